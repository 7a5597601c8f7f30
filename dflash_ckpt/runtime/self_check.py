"""The static path checks itself against the eager one before a run trusts a figure from it.

The static executor (``static.py``) replays CUDA graphs on a GPU: a bug in capture or replay
(a stale buffer, a wrong span bucket, a graph that read a host value at capture time) would
reach the user as a false DF401 "output differs" blaming their draft, or as nonsense figures.
So before the measured prompts smoke-run runs one short input, the shortest prompt (its last
``CHECK_PROMPT`` tokens at most), through both executors: one prefill, ``CHECK_STEPS`` DFlash steps
(draft and verify) and a target-only decode of ``DECODE_TOKENS`` tokens (the prefill's and one
decode step). It compares the first token, each step's drafts, target argmax, accepted count
and finite flags, each verified row's top logit, and the decode's tokens and top-2 logits. Any
difference beyond rounding, or an error in the static runs, makes ``loops.checked_loop`` run the
whole run on the eager loop and say why in one line.

Rounding: both executors compute the same function with different kernels (the static path
attends over a masked span bucket of a preallocated cache, the eager one over a cropped cache),
so their logits agree within a few units of the dtype's rounding (``ROUNDING_ULPS``), and where
two candidates lie that close the two may pick differently: a tie. A divergence at a tie (judged
on the eager side's own logits) ends the comparison with the check passed: what was compared up
to there agreed, and what follows runs on different inputs.

On the CPU the static executor runs without graphs: the check then compares the same static
code with the eager one, which is how the tests drive it (with faults injected by monkeypatch).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

from dflash_ckpt.runtime.dflash_loop import Verified, run_dflash
from dflash_ckpt.runtime.eager_dflash import EagerExecutor
from dflash_ckpt.runtime.generate import Generation, decode, now
from dflash_ckpt.runtime.static import StaticExecutor, StaticRunner

#: DFlash steps compared: enough to run the draft step from a verify's context (steps 2 and on
#: replay the captured draft graph; step 1 reads the prompt's features eagerly), few enough to
#: cost well under a second of a real model on a GPU.
CHECK_STEPS = 3
#: Prompt tokens the check runs at most: the shortest prompt's last ones (a chat prompt ends in
#: the assistant's header, where a draft's proposals are accepted, and steps that accept many
#: drafts compare more of the draft and the verify than steps that accept none).
CHECK_PROMPT = 128
#: Target-only tokens: the prefill's and one (graphed) decode step's.
DECODE_TOKENS = 2
#: Logits of the two executors agree within this many units of their dtype's rounding at their
#: magnitude (``torch.finfo(dtype).eps`` times the logit, at least 1.0): bf16 at a logit of 20
#: allows 0.625 (the judge's tie tolerance is 0.5; a wrong cache slot or a stale buffer moves
#: logits by whole units). In half precision the logit is rounded once more at the end, which
#: hides most of what the layers accumulate (the tiny pair, CPU: at most 2 units); in float32
#: nothing hides it (the tiny pair: about 6 units). ``benchmarks/gpu_check.py`` prints what a
#: GPU's graphed run measures against this.
ROUNDING_ULPS = {torch.bfloat16: 4.0, torch.float16: 4.0, torch.float32: 64.0}


@dataclass
class SelfCheck:
    """What the self-check found; ``status``: ``agree``, ``differs``, ``replay-error`` or
    ``capture-error`` (``loops.checked_loop`` sets the last)."""

    status: str
    #: What differed or failed (one clause), or a note on a tie that ended the comparison.
    detail: str | None = None
    seconds: float = 0.0
    #: DFlash steps compared (a tie or a difference may end the comparison early).
    steps: int = 0
    #: The largest difference between the two executors' compared logits.
    max_logit_diff: float = 0.0

    @property
    def passed(self) -> bool:
        return self.status == "agree"

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "seconds": round(self.seconds, 4)}


# -- what each executor did ----------------------------------------------------------------------


@dataclass
class TracedStep:
    """One DFlash step as the host saw it, with each verified row's top logit."""

    size: int
    drafts: list[int]
    posterior: list[int]
    accepted: int
    overflow: str | None
    top: list[float]


@dataclass
class Trace:
    """One executor's run of the check's input."""

    first: int = -1
    steps: list[TracedStep] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    acceptance: list[int] = field(default_factory=list)
    decode_tokens: list[int] = field(default_factory=list)
    decode_top2: list[list[float]] = field(default_factory=list)
    decode_top2_ids: list[list[int]] = field(default_factory=list)
    #: Eager only: logits behind each choice, for judging a divergence a tie.
    prefill_logits: torch.Tensor | None = None
    verify_logits: list[torch.Tensor] = field(default_factory=list)
    draft_logits: list[torch.Tensor] = field(default_factory=list)

    def finish(self, dflash: Generation, decoded: Generation) -> Trace:
        """The trace with the DFlash run's tokens and the target-only decode's."""
        self.tokens, self.acceptance = dflash.tokens, dflash.acceptance_lengths
        self.first = dflash.tokens[0] if dflash.tokens else -1
        self.decode_tokens, self.decode_top2, self.decode_top2_ids = decoded.tokens, decoded.top2_values, decoded.top2_ids
        return self


class _TargetTap:
    """The target, recording the logits of every forward (the eager executor's prefill and
    verify passes); everything else is the target's."""

    def __init__(self, target: Any) -> None:
        self._m, self.logits = target, []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._m, name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        out = self._m(*args, **kwargs)
        self.logits.append(out.logits[0])
        return out


class _DraftTap:
    """The draft, recording the logits behind each ``pick_tokens`` (the eager draft call's)."""

    def __init__(self, draft: Any) -> None:
        self._m, self.logits = draft, []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._m, name)

    def pick_tokens(self, hidden: torch.Tensor, head_w: torch.Tensor, anchor: torch.Tensor) -> torch.Tensor:
        self.logits.append(self._m.logits(hidden, head_w)[0])
        return self._m.pick_tokens(hidden, head_w, anchor)


class _TracedEager(EagerExecutor):
    def __init__(self, target: Any, draft: Any, trace: Trace, **kw: Any) -> None:
        self.tap_t, self.tap_d, self.trace = _TargetTap(target), _DraftTap(draft), trace
        super().__init__(self.tap_t, self.tap_d, **kw)

    def verify(self, start: int, last: int, size: int) -> Verified:
        v = super().verify(start, last, size)
        rows = self.tap_t.logits[-1][:size]
        top = rows.float().max(dim=-1).values.tolist()
        self.trace.steps.append(TracedStep(size, v.drafts[: size - 1], v.posterior[:size], v.accepted, v.overflow, top))
        self.trace.verify_logits.append(rows)
        self.trace.draft_logits.append(self.tap_d.logits[-1] if size > 1 else rows[:0])
        return v


class _TracedStatic(StaticExecutor):
    def __init__(self, runner: StaticRunner, trace: Trace) -> None:
        super().__init__(runner)
        self.trace = trace

    def verify(self, start: int, last: int, size: int) -> Verified:
        v = super().verify(start, last, size)
        top = self.r.vtop[:size].tolist()
        self.trace.steps.append(TracedStep(size, v.drafts[: size - 1], v.posterior[:size], v.accepted, v.overflow, top))
        return v


# -- running both ---------------------------------------------------------------------------------


def trace_static(runner: StaticRunner, prompt: Sequence[int], max_new_tokens: int) -> Trace:
    """The static executor's run of the check's input (graphed when the runner holds graphs)."""
    trace = Trace()
    with torch.inference_mode():
        gen = run_dflash(_TracedStatic(runner, trace), prompt, max_new_tokens=max_new_tokens, max_steps=CHECK_STEPS)
    return trace.finish(gen, runner.decode(prompt, max_new_tokens=min(DECODE_TOKENS, max_new_tokens), top2=True))


def trace_eager(target: Any, draft: Any, prompt: Sequence[int], max_new_tokens: int, *, block_size: int) -> Trace:
    """The eager executor's run of the check's input, in caches sized for it alone."""
    trace = Trace()
    width = draft.args.block_layout.verify_width(block_size)
    capacity = len(prompt) + max_new_tokens + width
    tcache, dcache = target.new_cache(capacity), draft.new_cache(capacity)
    with torch.inference_mode():
        ex = _TracedEager(target, draft, trace, target_cache=tcache, draft_cache=dcache, block_size=block_size)
        gen = run_dflash(ex, prompt, max_new_tokens=max_new_tokens, max_steps=CHECK_STEPS)
        trace.prefill_logits = ex.tap_t.logits[0][-1]
    return trace.finish(gen, decode(target, prompt, max_new_tokens=min(DECODE_TOKENS, max_new_tokens), cache=tcache,
                                    top2=True))


# -- comparing ------------------------------------------------------------------------------------


def tolerance(dtype: torch.dtype, *values: float) -> float:
    """How far two logits computed in ``dtype`` may differ by rounding alone."""
    return ROUNDING_ULPS.get(dtype, 64.0) * torch.finfo(dtype).eps * max([1.0, *(abs(v) for v in values)])


def _is_tie(logits: torch.Tensor | None, ours: int, theirs: int, dtype: torch.dtype) -> bool:
    """Whether ``theirs`` lies within rounding of ``ours`` (the eager pick) in the eager ``logits``."""
    if logits is None:
        return False
    a, b = float(logits[ours].float()), float(logits[theirs].float())
    return a - b <= 2 * tolerance(dtype, a, b)


class _Comparison:
    def __init__(self, dtype: torch.dtype) -> None:
        self.dtype, self.max_diff, self.steps = dtype, 0.0, 0

    def close(self, a: float, b: float) -> bool:
        diff = abs(a - b)
        if diff == diff:  # not NaN
            self.max_diff = max(self.max_diff, diff)
        return diff <= tolerance(self.dtype, a, b)


def compare(graphed: Trace, eager: Trace, dtype: torch.dtype, *, what: str = "graphed") -> SelfCheck:
    """``agree`` (possibly up to a tie, named in ``detail``) or ``differs`` with the first
    difference named; ``what`` names the static side in the text."""
    c = _Comparison(dtype)

    def result(status: str, detail: str | None) -> SelfCheck:
        return SelfCheck(status, detail, steps=c.steps, max_logit_diff=round(c.max_diff, 6))

    def tie(where: str) -> SelfCheck:
        return result("agree", f"compared up to a near tie at {where}")

    if graphed.first != eager.first:
        if _is_tie(eager.prefill_logits, eager.first, graphed.first, dtype):
            return tie("the first token")
        return result("differs", f"first token: {what} {graphed.first}, eager {eager.first}")
    for k, (g, e) in enumerate(zip(graphed.steps, eager.steps), start=1):
        # Verify row i reads the anchor and drafts 0..i-1: rows up to the first differing draft
        # read the same input; only the drafts up to the first rejected one decide the output.
        m = next((j for j, (gd, ed) in enumerate(zip(g.drafts, e.drafts)) if gd != ed), len(e.drafts))
        for i, (gt, et) in enumerate(zip(g.top[: m + 1], e.top[: m + 1])):
            if not c.close(gt, et):
                return result("differs", f"step {k}: verify logits differ by {abs(gt - et):.4g} at row {i} "
                                         f"(top {gt:.4g} {what}, {et:.4g} eager; rounding allows "
                                         f"{tolerance(dtype, gt, et):.3g})")
        # Every draft of a block comes from the same input (the anchor, masks and the context),
        # accepted or not: each must agree up to a tie in the eager draft's logits.
        for j, (gd, ed) in enumerate(zip(g.drafts, e.drafts)):
            if gd != ed and not _is_tie(eager.draft_logits[k - 1][j], ed, gd, dtype):
                return result("differs", f"step {k}: draft {j + 1} is {gd} {what}, {ed} eager")
        if m < len(e.drafts) and (m < e.accepted or m < g.accepted):
            return tie(f"step {k}, draft {m + 1}")  # a tie that changed what was accepted
        for i, (gp, ep) in enumerate(zip(g.posterior[: e.accepted + 1], e.posterior[: e.accepted + 1])):
            if gp != ep:
                if _is_tie(eager.verify_logits[k - 1][i], ep, gp, dtype):
                    return tie(f"step {k}, verify row {i}")
                return result("differs", f"step {k}: the target's token at row {i} is {gp} {what}, {ep} eager")
        if g.accepted != e.accepted or g.overflow != e.overflow:
            return result("differs", f"step {k}: {what} accepted {g.accepted} ({g.overflow or 'finite'}), "
                                     f"eager {e.accepted} ({e.overflow or 'finite'})")
        c.steps = k
    if len(graphed.steps) != len(eager.steps) or graphed.acceptance != eager.acceptance:
        return result("differs", f"acceptance lengths {graphed.acceptance} {what}, {eager.acceptance} eager")
    if graphed.tokens != eager.tokens:
        return result("differs", f"tokens {graphed.tokens} {what}, {eager.tokens} eager")
    for i, (gt, et) in enumerate(zip(graphed.decode_tokens, eager.decode_tokens)):
        ids = eager.decode_top2_ids[i] if i < len(eager.decode_top2_ids) else []
        if gt != et:
            values = eager.decode_top2[i]
            if len(ids) == 2 and ids[1] == gt and values[0] - values[1] <= 2 * tolerance(dtype, *values):
                return tie(f"decode token {i + 1}")
            return result("differs", f"decode token {i + 1}: {what} {gt}, eager {et}")
        for gv, ev in zip(graphed.decode_top2[i], eager.decode_top2[i]):
            if not c.close(gv, ev):
                return result("differs", f"decode token {i + 1}: top logits differ by {abs(gv - ev):.4g} "
                                         f"({gv:.4g} {what}, {ev:.4g} eager; rounding allows {tolerance(dtype, gv, ev):.3g})")
    if len(graphed.decode_tokens) != len(eager.decode_tokens):
        return result("differs", f"decode tokens {graphed.decode_tokens} {what}, {eager.decode_tokens} eager")
    return result("agree", None)


def first_line(exc: BaseException) -> str:
    """``Type: first line of the message`` (200 characters at most), how a failure is named."""
    return f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:200]}"


def check_input(prompts: Sequence[Sequence[int]]) -> list[int]:
    """The check's short input: the shortest prompt's last ``CHECK_PROMPT`` tokens at most."""
    return list(min(prompts, key=len)[-CHECK_PROMPT:])


def self_check(runner: StaticRunner, prompt: Sequence[int], *, max_new_tokens: int) -> SelfCheck:
    """Run ``prompt`` through ``runner``'s static executor (graphed when it holds graphs) and the
    eager one, and compare (``compare``). ``max_new_tokens`` bounds the DFlash run and the decode
    (the run's own ``-n`` at most, so the runner's caches hold them). An error on the static side is a
    ``replay-error``; one on the eager side is not caught (the run could not go on eagerly either)."""
    target, draft = runner.target, runner.draft
    what = "graphed" if runner.graphs else "static"
    n = max(1, min(max_new_tokens, CHECK_STEPS * runner.width + 1))
    t0 = now(target.device)
    try:
        static = trace_static(runner, prompt, n)
    except Exception as exc:  # noqa: BLE001 - any failure of the static side means: do not use it
        return SelfCheck("replay-error", f"the {what} run failed: {first_line(exc)}", seconds=now(target.device) - t0)
    eager = trace_eager(target, draft, prompt, n, block_size=runner.block)
    out = compare(static, eager, target.dtype, what=what)
    out.seconds = now(target.device) - t0
    return out


__all__ = ["CHECK_PROMPT", "CHECK_STEPS", "DECODE_TOKENS", "ROUNDING_ULPS", "SelfCheck", "Trace", "check_input",
           "compare", "self_check", "tolerance", "trace_eager", "trace_static"]
