"""``smoke-run --engine both``: the reference runtime against a serving engine on the same ids.

Pure functions over the two engines' ``PromptRun``s (``runtime/measure.py``). Per prompt: tokens
equal or the first difference, judged a tie or not with the engine's teacher-forced target
log-probabilities at that position (raw log-probabilities differ from logits by one constant per
row, so their gap is the logit gap the reference judge uses); acceptance lengths equal or the
first step where they part; per-position acceptance counts; tau and tok/s of each.

Sampled runs (``sampled=True``): each output is one draw, so tokens are not compared (DF427 and
the teacher-forced rows are for greedy; ``difference`` is ``sampled``) and only acceptance is:
DF426 holds as it is, vLLM verifies with its rejection sampler and DFlash's argmax drafts give
``match`` and ``rejection`` the same law, and ``acceptance_summary`` sets both taus with their
intervals beside a homogeneity test (a signal to look, in the JSON only).

Findings: DF427 when an output differs beyond a tie; DF426 when the engine accepts materially
fewer drafts. The threshold (``LESS_FRACTION``, ``LESS_Z``): on the same ids, greedy, two correct
implementations accept the same drafts except where a near tie flips one (the tiny pair: 26
accepted drafts in vLLM and in the reference over three prompts), while a draft read differently
(its taps moved by one, sink or window keys ignored, another block layout) loses most of its
accepted drafts (the tiny pair's shifted-taps twin falls from tau 4 to under 2). So the engine
must keep at least 3/4 of the reference's accepted drafts per step, and a shortfall counts only
when it is more than two standard errors of the difference (each tau is a mean over steps), so
that a few steps of a short run cannot raise it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

from dflash_ckpt.rules import Finding, finding

LESS_FRACTION = 0.75
LESS_Z = 2.0
#: DF426's last clause on a sampled run: a greedy run tells a draft read differently (it falls
#: greedy too) from the engine's sampled verification (greedy agrees).
SAMPLED_HINT = ("; the run sampled (the engine's rejection rule): rerun greedy (no --temperature), and if the "
                "engine agrees there, its sampled verification is what accepts less")


@dataclass
class PromptComparison:
    name: str
    tokens_equal: bool
    first_difference: int | None
    #: ``tie``, ``differs`` or ``None`` (equal); with the logprob gap of the two tokens there.
    difference: str | None
    margin: float | None
    reference_token: int | None
    engine_token: int | None
    lengths_equal: bool
    #: The first DFlash step whose acceptance length differs (within the common steps).
    first_step_apart: int | None
    reference_per_pos: list[int]
    engine_per_pos: list[int]
    reference_tau: float | None
    engine_tau: float | None
    reference_tok_s: dict[str, float | None]
    engine_tok_s: dict[str, float | None]

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def per_position(lengths: Sequence[int], block: int) -> list[int]:
    """Accepted drafts per draft position, as vLLM counts them: position i counts the steps that
    accepted more than i drafts (an acceptance length is accepted drafts + 1)."""
    return [sum(1 for n in lengths if n - 1 > i) for i in range(max(block - 1, 0))]


def _first_apart(a: Sequence[Any], b: Sequence[Any]) -> int | None:
    for j, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return j
    return None if len(a) == len(b) else min(len(a), len(b))


def judge_difference(top: Sequence[Sequence[float]], ref_token: int | None, eng_token: int | None,
                     tolerance: float) -> tuple[str, float | None]:
    """A tie when both tokens are in the engine's top log-probabilities at the position and
    their gap is within ``tolerance``; else ``differs`` (a token outside the top is no tie)."""
    lp = {int(t): float(v) for t, v in top}
    if ref_token is None or eng_token is None or ref_token not in lp or eng_token not in lp:
        return "differs", None
    gap = abs(lp[ref_token] - lp[eng_token])
    return ("tie" if gap <= tolerance else "differs"), gap


def compare_prompts(ref_runs: Sequence[Any], eng_runs: Sequence[Any], tops: Sequence[Sequence[Any]], *,
                    block: int, tolerance: float, sampled: bool = False) -> list[PromptComparison]:
    out = []
    for ref, eng, top in zip(ref_runs, eng_runs, tops):
        a, b = ref.dflash.tokens, eng.dflash.tokens
        j = None if sampled else _first_apart(a, b)
        kind = margin = None
        rt = et = None
        if sampled:
            kind = "sampled"
        elif j is not None:
            rt = a[j] if j < len(a) else None
            et = b[j] if j < len(b) else None
            kind, margin = judge_difference(top[j] if j < len(top) else [], rt, et, tolerance)
        la, lb = ref.dflash.acceptance_lengths, eng.dflash.acceptance_lengths
        fr, fe = ref.figures(block), eng.figures(block)
        out.append(PromptComparison(
            ref.prompt.name, not sampled and j is None, j, kind, margin, rt, et, list(la) == list(lb), _first_apart(la, lb),
            per_position(la, block), per_position(lb, block), fr["tau"], fe["tau"],
            {"target_only": fr["target_tok_s"], "dflash": fr["dflash_tok_s"]},
            {"target_only": fe["target_tok_s"], "dflash": fe["dflash_tok_s"]}))
    return out


def _mean_var(xs: Sequence[int]) -> tuple[float, float, int]:
    n = len(xs)
    if not n:
        return 0.0, 0.0, 0
    m = sum(xs) / n
    return m, (sum((x - m) ** 2 for x in xs) / (n - 1) if n > 1 else 0.0), n


def accepts_less(ref_lengths: Sequence[int], eng_lengths: Sequence[int]) -> tuple[bool, float | None]:
    """Whether the engine's accepted drafts per step fall below ``LESS_FRACTION`` of the
    reference's by more than ``LESS_Z`` standard errors; and that z."""
    (mr, vr, nr), (me, ve, ne) = _mean_var(ref_lengths), _mean_var(eng_lengths)
    if not nr or not ne:
        return False, None
    se = math.sqrt(vr / nr + ve / ne)
    gap = mr - me
    z = gap / se if se > 0 else (math.inf if gap > 0 else 0.0)
    return (me - 1) < LESS_FRACTION * (mr - 1) and z > LESS_Z, z


def engine_findings(engine: str, comparisons: Sequence[PromptComparison], ref_runs: Sequence[Any],
                    eng_runs: Sequence[Any], tolerance: float, sampled: bool = False) -> list[Finding]:
    """DF427 per prompt whose outputs differ beyond a tie; DF426 over all prompts' steps."""
    out: list[Finding] = []
    for c in comparisons:
        if c.difference == "differs":
            gap = f"log-probabilities {c.margin:.4g} apart" if c.margin is not None else \
                "one token outside the engine's top log-probabilities"
            out.append(finding("DF427", f"prompt {c.name!r}: {engine}'s DFlash output differs from the reference "
                                        f"runtime's at new token {c.first_difference} (reference {c.reference_token}, "
                                        f"{engine} {c.engine_token}), {gap} under {engine}'s target, beyond the tie "
                                        f"tolerance {tolerance:g}; rerun with --json and report it", path=None))
    ref_l = [n for r in ref_runs for n in r.dflash.acceptance_lengths]
    eng_l = [n for r in eng_runs for n in r.dflash.acceptance_lengths]
    less, z = accepts_less(ref_l, eng_l)
    if less:
        tr, te = sum(ref_l) / len(ref_l), sum(eng_l) / len(eng_l)
        out.append(finding("DF426", f"{engine} accepts {te - 1:.2f} drafts per step (tau {te:.2f}) against the "
                                    f"reference runtime's {tr - 1:.2f} (tau {tr:.2f}) on the same ids, below "
                                    f"{LESS_FRACTION:g} of it by {z:.1f} standard errors: {engine} reads this draft "
                                    "differently (tap offset, ignored sink or sliding-window keys, another block "
                                    "layout); compare inspect's reader row for it" + (SAMPLED_HINT if sampled else ""),
                           path=None))
    return out


#: A homogeneity p-value under this asks for a look at the two acceptance distributions.
INVESTIGATE_P = 0.01


def acceptance_summary(ref_runs: Sequence[Any], eng_runs: Sequence[Any], eng_metrics: dict[str, Any],
                       block: int) -> dict[str, Any]:
    """Both engines' tau with its 95% interval over prompts (``stats/confidence.tau_estimate``),
    and Pearson's homogeneity test of the accepted-count distributions, ours from the steps and
    the engine's from its own counters (``engine_accepted_counts``)."""
    from dflash_ckpt.stats.confidence import (accepted_counts, engine_accepted_counts, homogeneity,
                                                tau_estimate)

    ref_tau = tau_estimate([r.dflash.acceptance_lengths for r in ref_runs])
    eng_tau = tau_estimate([r.dflash.acceptance_lengths for r in eng_runs])
    out: dict[str, Any] = {"reference": ref_tau.to_json() if ref_tau.steps else None,
                           "engine": eng_tau.to_json() if eng_tau.steps else None, "homogeneity": None,
                           "investigate": False}
    drafts = max(block - 1, 0)
    per_pos = list(eng_metrics.get("accepted_per_pos") or [])[:drafts]
    try:
        ours = accepted_counts([n for r in ref_runs for n in r.dflash.acceptance_lengths], drafts)
        theirs = engine_accepted_counts(int(eng_metrics.get("drafts", 0)), per_pos + [0] * (drafts - len(per_pos)))
        test = homogeneity(ours, theirs)
    except ValueError:
        return out
    out["homogeneity"] = {"statistic": test.statistic, "dof": test.dof, "p_value": test.p_value, "cells": test.cells}
    out["investigate"] = test.dof > 0 and test.p_value < INVESTIGATE_P
    return out
