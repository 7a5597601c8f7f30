"""More evidence for a narrow lead in ``probe-taps``, and the finding when there is still too little.

A winner that leads its runner-up by less than one standard error of the difference (verdict
"narrow") is no winner: on the tiny pair with ``-n 24`` the one-layer-off set [2, 3, 5] edges out
the trained [1, 3, 5] by chance. Neighbouring layers carry similar features, so what separates
them is more steps. So before judging, a narrow lead is measured again on more evidence, round
after round: each round doubles the tokens per prompt (up to ``EVIDENCE_MAX_NEW_TOKENS``) and,
when the user gave their own prompts, adds the built-in ones. Only the candidates whose tau is
exact (the ranked head, ``probe_search.KEEP_EXACT`` or ``--top`` of them) are measured again: the
others were given up as sure losers on less evidence. The finalists go through smoke-run's loop
again, as in the first round. The budget is ``EVIDENCE_ROUNDS`` rounds; a lead still narrow after
it is DF412 (exit 1, ``checks/run_findings.unclear_findings``), and ``--write`` refuses it unless
``--force``.

This module takes the run's objects (``ProbeResult``, its candidates) as they are and imports
nothing from ``run/probe.py``, the one module that imports it.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from dflash_ckpt.errors import UsageError
from dflash_ckpt.runtime.loops import make_loop
from dflash_ckpt.runtime.plan import Blocks, require_positions_fit
from dflash_ckpt.runtime.probe import Recording, measure, reading_taps, record
from dflash_ckpt.sources.prompts import BUILTIN_PROMPTS, Prompt

#: Extra rounds of measurement a narrow lead gets (each doubles the tokens per prompt).
EVIDENCE_ROUNDS = 3
#: Tokens per prompt the rounds go up to (the user's ``-n`` when that is larger: never fewer).
EVIDENCE_MAX_NEW_TOKENS = 512
#: The verdict that asks for more evidence (``checks/run_findings.verdict``: below one standard error).
NARROW = "narrow"


@dataclass
class Session:
    """What a round needs from the first one: the loaded pair and how it was run."""

    draft: Any
    target: Any
    prompts: list[Prompt]
    encoder: Any
    encoded: list[list[int]]
    max_new_tokens: int
    stops: list[int]
    #: The run's block size and layout (``runtime/plan.Blocks``): every cache here is sized by it.
    blocks: Blocks
    depth: int
    max_positions: int
    where: str
    confirm: int
    configured: tuple[int, ...] | None
    custom_prompts: bool
    rounds: list[dict[str, Any]] = field(default_factory=list)

    @property
    def block(self) -> int:
        return self.blocks.block_size


def settle(result: Any, s: Session, say: Callable[[str], None]) -> dict[str, Any]:
    """Measure a narrow lead again on more evidence until it is not narrow or the budget is spent.

    Updates ``result`` in place (its ranked candidates, prompts, timings, draft calls) and returns
    the ``evidence`` part of the JSON: every round's tokens, prompts and verdict.
    """
    s.rounds.append(_round(result, s.max_new_tokens, s.prompts))
    n, prompts, encoded = s.max_new_tokens, list(s.prompts), list(s.encoded)
    recs_stopped = all(p.get("stopped") for p in result.prompts) if result.prompts else False
    for _ in range(EVIDENCE_ROUNDS):
        if result.confidence()["verdict"] != NARROW:
            break
        more = [p for p in BUILTIN_PROMPTS if s.custom_prompts and p.name not in {q.name for q in prompts}]
        cap = max(EVIDENCE_MAX_NEW_TOKENS, s.max_new_tokens)
        n2 = n if recs_stopped else min(2 * n, cap)
        if n2 == n and not more:
            break  # every continuation ended before the budget, and no prompt is left to add
        prompts2 = prompts + more
        encoded2 = encoded + [s.encoder.encode(p) for p in more]
        try:
            if s.max_positions:
                require_positions_fit(prompts2, encoded2, n2, s.block, s.max_positions, s.where)
        except UsageError:
            break  # the target has no room for more tokens: the evidence stays what it is
        say(f"narrow lead: measuring the leading candidates again with up to {n2} tokens on {len(prompts2)} prompt(s)")
        recs = _record(result, s, encoded2, n2)
        _remeasure(result, s, recs, encoded2, n2)
        n, prompts, encoded = n2, prompts2, encoded2
        recs_stopped = all(r.stopped for r in recs)
        result.prompts = [
            {**p.to_json(), "input_ids": ids, "continuation_ids": rec.tokens, "stopped": rec.stopped}
            for p, ids, rec in zip(prompts, encoded, recs)
        ]
        s.rounds.append(_round(result, n, prompts))
    return {
        "rounds": s.rounds,
        "max_rounds": EVIDENCE_ROUNDS,
        "max_new_tokens_cap": max(EVIDENCE_MAX_NEW_TOKENS, s.max_new_tokens),
        "max_new_tokens": n,
        "settled": result.confidence()["verdict"] != NARROW,
    }


def _round(result: Any, n: int, prompts: Sequence[Prompt]) -> dict[str, Any]:
    c = result.confidence()
    best = result.best
    return {"max_new_tokens": n, "prompts": [p.name for p in prompts], "verdict": c["verdict"], "z": c["z"],
            "best": list(best.target_layer_ids) if best is not None else None}


def _record(result: Any, s: Session, encoded: list[list[int]], n: int) -> list[Recording]:
    t0 = time.perf_counter()
    cache = s.target.new_cache(s.blocks.capacity(encoded, n, any_layout=True))
    recs = [record(s.target, ids, depth=s.depth, max_new_tokens=n, stop_ids=s.stops, cache=cache) for ids in encoded]
    result.record_s += time.perf_counter() - t0
    for rec in recs:
        if rec.overflow:
            raise UsageError(f"the target's {rec.overflow} hold inf/NaN on a longer continuation; "
                             "run the target in bfloat16 (--target-dtype bfloat16), or give more -n yourself")
    return recs


def _remeasure(result: Any, s: Session, recs: list[Recording], encoded: list[list[int]], n: int) -> None:
    """The exact candidates on the new recordings (probe), then the finalists by smoke-run's loop."""
    capacity = s.blocks.capacity(encoded, n, layout=s.draft.args.block_layout)
    dcache = s.draft.new_cache(capacity)
    embed_w, head_w = s.target.embed_tokens.weight, s.target.lm_head.weight
    exact = [c for c in result.ranked if c.tau_probe is not None]
    for cand in exact:
        m = measure(s.draft, recs, cand.target_layer_ids, embed_w=embed_w, head_w=head_w, draft_cache=dcache,
                    block_size=s.block, stop_ids=s.stops)
        result.draft_forwards += m.draft_forwards
        cand.tau_probe, cand.tau_loop, cand.lengths = m.tau, None, m.acceptance_lengths
    exact.sort(key=lambda c: -c.tau_probe)
    finalists = exact[: s.confirm] + [c for c in exact[s.confirm:] if c.target_layer_ids == s.configured]
    t1 = time.perf_counter()
    for cand in finalists:
        lengths: list[int] = []
        with reading_taps(s.draft, cand.target_layer_ids):
            loop = make_loop(s.target, s.draft, capacity, block_size=s.block)  # smoke-run's own loop
            for ids in encoded:
                gen = loop.dflash(ids, max_new_tokens=n, stop_ids=s.stops)
                lengths += gen.acceptance_lengths
        cand.tau_loop = sum(lengths) / len(lengths) if lengths else 1.0
        cand.lengths = lengths
    result.confirm_s += time.perf_counter() - t1
    rest = [c for c in result.ranked if c.tau_probe is None]
    result.ranked = sorted(exact, key=lambda c: c.sort_key) + rest


def candidate_bar(progress: Any, depth: int, k: int, budget: int | None) -> Callable[[], None]:
    """A step of ``progress`` (a rich ``Progress``, or ``None``: nothing) per candidate measured,
    out of what the search will measure: every candidate, or its budget."""
    if progress is None:
        return lambda: None
    from dflash_ckpt.run.probe_search import DEFAULT_SEARCH_BUDGET, EXHAUSTIVE_MAX

    space = math.comb(depth, k)
    total = space if space <= EXHAUSTIVE_MAX and (budget is None or space <= budget) else min(space, budget or DEFAULT_SEARCH_BUDGET)
    task = progress.add_task(f"measuring tap sets ({k} of {depth} layers)", total=total)
    return lambda: progress.advance(task)


__all__ = ["EVIDENCE_MAX_NEW_TOKENS", "EVIDENCE_ROUNDS", "NARROW", "Session", "candidate_bar", "settle"]
