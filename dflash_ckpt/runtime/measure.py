"""What ``smoke-run`` measures and how it judges: the lossless check, acceptance and speed figures.

Pure functions over token lists and step times (torch only for the dtype keys of
``TIE_TOLERANCE``); the run that produces them is ``run/smoke.py``.

Timing: each decoding step is timed at its one host sync; the figures are medians over steps
(steps on the static path all have the same shape, so each is a repeat of the same work), with
their spread in ``--json``: T tok/s = 1 / median T step, D tok/s = tau / median D step. A
speedup above tau cannot be real (a D step costs at least a T step) and is withheld (DF406).

Two thresholds are decisions of this tool:
- ``DEFAULT_MIN_ACCEPTANCE`` = 2.0 tokens per step. Every step yields at least one token (the
  bonus), so tau 1.0 means no draft was ever accepted. A draft reading the wrong tap layers gets
  features it was never trained on; what it still gets right comes from the anchor's embedding
  alone (mostly the first draft position), which keeps tau close to 1 (a random draft measures
  1.0 here). Working drafts reach 4 to 8 at block 16 (paper, docs/DESIGN.md section 7), and this
  project's tiny trained pair must reach 4 at block 8 while the same weights with every tap
  moved by one must fall under 2. 2.0 sits between the two with margin on both sides, and below
  it DFlash barely pays for its extra draft and verify passes, so such a pair is not worth
  deploying anyway.
- ``TIE_TOLERANCE`` (``runtime/judge.py``, with the reasons): a position where DFlash's token is
  not the target's argmax is a tie when its logit is within this much of the maximum, at any
  rank. Batched verification and one-token decoding add in different orders, so near-equal
  logits may swap.
"""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

from dflash_ckpt.runtime.generate import Generation
from dflash_ckpt.runtime.judge import TIE_TOLERANCE, Judgement, judge_logits
from dflash_ckpt.sources.prompts import Prompt
WARMUP_TOKENS = 4
#: Target-only tokens timed per prompt (the first comes with the prefill and is not a step).
TIMING_TOKENS = 16


# -- the lossless check ------------------------------------------------------------------------


@dataclass
class Lossless:
    """How DFlash's tokens compare with the target's: ``identical``, ``tie``, ``differs``,
    ``skipped`` (a run stopped on non-finite values), or ``sampled`` (a sampled run: its output is
    one draw of the target's distribution, so no position is compared; the rules' losslessness is
    a statement about distributions, tested in tests/test_sampling_lossless.py)."""

    status: str
    compared: int
    position: int | None = None
    target_token: int | None = None
    dflash_token: int | None = None
    margin: float | None = None
    runner_up: int | None = None
    #: The DFlash token's rank in the target's logits at ``position`` (1 = the best).
    rank: int | None = None
    #: Positions judged ties (``runtime/judge.py``: every position is judged).
    ties: int = 0
    largest_margin: float | None = None
    #: Positions whose target logits tie at the top, and whose logits are all equal (DF414).
    tied_rows: int = 0
    flat_rows: int = 0

    @classmethod
    def of(cls, verdict: Judgement) -> Lossless:
        """From the judge's verdict (``runtime/judge.py``); ``runner_up`` is kept for readers
        of the JSON as the DFlash token when it is the target's second choice."""
        p = verdict.position
        rows = {"tied_rows": verdict.tied_rows, "flat_rows": verdict.flat_rows}
        if p is None:
            return cls(verdict.status, verdict.compared, **rows)
        return cls(verdict.status, verdict.compared, p.index, p.target_token, p.dflash_token, p.margin,
                   p.dflash_token if p.rank == 2 else None, p.rank, verdict.ties, verdict.largest_margin, **rows)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# -- figures -----------------------------------------------------------------------------------


def acceptance_stats(lengths: list[int], block_size: int) -> dict[str, Any]:
    """tau (mean new tokens per step, bonus included), mean accepted drafts, histogram 1..B."""
    hist = {str(k): 0 for k in range(1, block_size + 1)}
    for n in lengths:
        hist[str(n)] = hist.get(str(n), 0) + 1
    steps = len(lengths)
    tau = sum(lengths) / steps if steps else None
    return {
        "steps": steps,
        "tau": tau,
        "accepted_per_step": tau - 1 if tau is not None else None,
        "histogram": hist,
    }


def step_stats(steps: list[float]) -> dict[str, Any] | None:
    """Median and spread of step times, in milliseconds."""
    if not steps:
        return None
    ms = sorted(x * 1e3 for x in steps)
    q1, _, q3 = statistics.quantiles(ms, n=4, method="inclusive") if len(ms) > 1 else (ms[0],) * 3
    return {"n": len(ms), "median": statistics.median(ms), "min": ms[0], "p25": q1, "p75": q3, "max": ms[-1]}


def speed_figures(target_steps: list[float], dflash_steps: list[float], tau: float | None) -> dict[str, Any]:
    """T tok/s = 1 / median T step, D tok/s = tau / median D step, their ratio; a ratio above
    tau is physically impossible (a D step costs at least a T step), so it is withheld
    (``speedup`` None, ``speedup_plausible`` false) and flagged by ``judge`` (DF406)."""
    t_med = statistics.median(target_steps) if target_steps else None
    d_med = statistics.median(dflash_steps) if dflash_steps else None
    target_tok_s = 1 / t_med if t_med else None
    dflash_tok_s = tau / d_med if d_med and tau else None
    measured = dflash_tok_s / target_tok_s if dflash_tok_s and target_tok_s else None
    plausible = measured is None or tau is None or measured <= tau
    return {
        "target_tok_s": target_tok_s,
        "dflash_tok_s": dflash_tok_s,
        "speedup": measured if plausible else None,
        "speedup_measured": measured,
        "speedup_plausible": plausible,
        "timing": {"target_step_ms": step_stats(target_steps), "dflash_step_ms": step_stats(dflash_steps)},
    }


@dataclass
class PromptRun:
    prompt: Prompt
    input_ids: list[int]
    #: Target-only decoding over the timing window (``TIMING_TOKENS``, in two runs whose tokens
    #: and step times are concatenated here).
    target: Generation
    dflash: Generation
    lossless: Lossless
    #: The target's greedy choice at each DFlash position (teacher forced): the target-only
    #: output wherever the two agree, which is everywhere unless ``lossless`` says otherwise.
    target_tokens: list[int] = field(default_factory=list)
    target_text: str = ""
    dflash_text: str = ""
    input_text: str = ""

    def figures(self, block_size: int) -> dict[str, Any]:
        stats = acceptance_stats(self.dflash.acceptance_lengths, block_size)
        return {
            "new_tokens": len(self.dflash.tokens),
            # Target-only greedy decoding needs one forward per new token.
            "target_forwards": {"target_only": len(self.dflash.tokens), "dflash": self.dflash.target_forwards},
            "draft_forwards": self.dflash.draft_forwards,
            **stats,
            "prefill_s": {"target_only": self.target.prefill_s, "dflash": self.dflash.prefill_s},
            "decode_s": {"target_only": self.target.decode_s, "dflash": self.dflash.decode_s},
            "timed_tokens": {"target_only": len(self.target.tokens), "dflash": len(self.dflash.tokens)},
            **speed_figures(self.target.step_s, self.dflash.step_s, stats["tau"]),
        }

    def to_json(self, block_size: int) -> dict[str, Any]:
        return {
            **self.prompt.to_json(),
            "input_ids": self.input_ids,
            "output_ids": self.dflash.tokens,
            "target_output_ids": self.target_tokens,
            "acceptance_lengths": self.dflash.acceptance_lengths,
            "output_text": self.dflash_text,
            "target_output_text": self.target_text,
            "input_text": self.input_text,
            "overflow": self.dflash.overflow or self.target.overflow,
            "lossless": self.lossless.to_json(),
            **self.figures(block_size),
        }


def overall_figures(runs: Sequence[PromptRun], block: int) -> dict[str, Any]:
    """The figures over every prompt: acceptance over all steps, speeds from the medians of all
    step times (the most robust figures, which DF406 judges)."""
    lengths = [n for r in runs for n in r.dflash.acceptance_lengths]
    stats = acceptance_stats(lengths, block)
    return {
        "prompts": len(runs),
        "new_tokens": sum(len(r.dflash.tokens) for r in runs),
        "target_forwards": {
            "target_only": sum(len(r.dflash.tokens) for r in runs),
            "dflash": sum(r.dflash.target_forwards for r in runs),
        },
        **stats,
        **speed_figures([x for r in runs for x in r.target.step_s],
                        [x for r in runs for x in r.dflash.step_s], stats["tau"]),
    }


# -- the measuring run ---------------------------------------------------------------------------


def measure_prompts(loop: Any, prompts: Sequence[Prompt], encoded: Sequence[list[int]], encoder: Any, *,
                    max_new_tokens: int, stop_ids: Sequence[int], tie_tolerance: float, warmup: bool = True,
                    progress: Any = None) -> list[PromptRun]:
    """Warm up, then per prompt: time target-only decoding, decode with DFlash, check it.

    ``loop``: ``loops.EagerLoop`` or ``loops.StaticLoop``; ``encoder`` decodes ids to text; ``progress``: a rich
    ``Progress`` (or None) advanced by the tokens DFlash yields."""
    runs: list[PromptRun] = []

    def run_target(ids: list[int], budget: int) -> Generation:
        return loop.decode(ids, max_new_tokens=budget, stop_ids=stop_ids)

    def run_dflash(ids: list[int], budget: int, on_tokens: Callable[[int], None] | None = None) -> Generation:
        return loop.dflash(ids, max_new_tokens=budget, stop_ids=stop_ids, on_tokens=on_tokens)

    window = min(TIMING_TOKENS, max_new_tokens)
    if warmup:
        run_target(encoded[0], min(WARMUP_TOKENS, max_new_tokens))
        run_dflash(encoded[0], min(WARMUP_TOKENS, max_new_tokens))
    task = progress.add_task("generating", total=max_new_tokens * len(prompts)) if progress else None
    for prompt, ids in zip(prompts, encoded):
        advance = (lambda n: progress.advance(task, n)) if progress else None
        if progress:
            progress.update(task, description=f"{prompt.name}")
        # Target-only steps are timed in two halves around the DFlash run, so that both speeds
        # sample the same stretch of the machine's load.
        ref = run_target(ids, max(window // 2, 1))
        spec = run_dflash(ids, max_new_tokens, advance)
        if window - len(ref.tokens) >= 1 and not ref.overflow and not ref.stopped:
            more = run_target(ids, window - len(ref.tokens))
            ref.tokens += more.tokens
            ref.step_s += more.step_s
            ref.decode_s += more.decode_s
            ref.overflow = more.overflow
        if progress:
            # Early stops leave part of the budget unused; count it so the bar ends full.
            progress.advance(task, max_new_tokens - len(spec.tokens))
        target_tokens: list[int] = []
        if ref.overflow or spec.overflow:
            lossless = Lossless("skipped", 0)
        elif getattr(loop, "sampler", None) is not None:
            lossless = Lossless("sampled", 0)
        else:
            verdict = judge_logits(loop.teacher_forced_logits(ids, spec.tokens), spec.tokens, tie_tolerance)
            target_tokens, lossless = verdict.target_tokens, Lossless.of(verdict)
        runs.append(PromptRun(prompt, ids, ref, spec, lossless, target_tokens=target_tokens,
                              target_text=encoder.decode(target_tokens), dflash_text=encoder.decode(spec.tokens)))
    return runs


# -- probe-taps' candidates ---------------------------------------------------------------------


@dataclass
class Candidate:
    """One tap set: tau as the probe simulated it and, for finalists, as the real loop measured it;
    or, for a candidate given up once it was sure to lose, a bound its tau stays below."""

    target_layer_ids: tuple[int, ...]
    tau_probe: float | None
    tau_loop: float | None = None
    tau_below: float | None = None
    #: Acceptance lengths behind ``tau`` (the loop's for finalists), for the standard error.
    lengths: list[int] = field(default_factory=list, repr=False)

    @property
    def tau(self) -> float | None:
        return self.tau_loop if self.tau_loop is not None else self.tau_probe

    @property
    def sort_key(self) -> tuple[int, float]:
        """Exact taus first, best first; then bounds, highest first."""
        return (0, -self.tau) if self.tau is not None else (1, -(self.tau_below or 0.0))

    @property
    def stderr(self) -> float | None:
        """Standard error of ``tau`` as a mean of per-step acceptance lengths."""
        n = len(self.lengths)
        if n < 2:
            return None
        mean = sum(self.lengths) / n
        var = sum((x - mean) ** 2 for x in self.lengths) / (n - 1)
        return (var / n) ** 0.5

    def z_over(self, other: Candidate) -> float | None:
        """How many standard errors of the difference ``self`` leads ``other`` by."""
        a, b = self.stderr, other.stderr
        if a is None or b is None:
            return None
        se = (a * a + b * b) ** 0.5
        if self.tau is None or other.tau is None:
            return None
        gap = self.tau - other.tau
        return gap / se if se > 0 else (float("inf") if gap > 0 else 0.0)

    def to_json(self) -> dict[str, Any]:
        return {
            "target_layer_ids": list(self.target_layer_ids),
            "tau": self.tau,
            "tau_probe": self.tau_probe,
            "tau_loop": self.tau_loop,
            "tau_below": self.tau_below,
            "measured_by": "loop" if self.tau_loop is not None else "probe" if self.tau_probe is not None else "stopped early",
            "steps": len(self.lengths),
            "stderr": self.stderr,
        }
