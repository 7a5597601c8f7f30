"""The decoding loop of a pair, chosen once: the static path where it runs the pair, else the eager one.

Both offer ``decode``, ``dflash`` and the teacher-forced logits, and give the same tokens: their DFlash loop is the one host loop
(``dflash_loop.run_dflash``) over the static executor (``static.py``: fixed shapes and CUDA
graphs) or the eager one (``eager_dflash.py``: any target and draft). The
caller sizes both with the plan's ``capacity`` and ``block_size`` (``plan.RunPlan``).

Sampled runs (a ``sampling.Sampler``) always take the eager loop: only the eager executor
samples (``eager_dflash.py`` says why).

``checked_loop`` is how smoke-run chooses: the static loop only after it passed its self-check
against the eager executor (``self_check.py``); a capture error, a failed replay or a difference
sends the whole run to the eager loop, and ``LoopChoice`` says which executor ran and why.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from dflash_ckpt.runtime.eager_dflash import dflash_decode
from dflash_ckpt.runtime.generate import Generation, decode, teacher_forced_logits
from dflash_ckpt.runtime.self_check import SelfCheck, first_line, self_check
from dflash_ckpt.runtime.static import StaticRunner, supports_static


class EagerLoop:
    """The eager loops (``generate.decode``, ``eager_dflash.dflash_decode``) over one pair, with one target cache and one draft cache of ``capacity``."""

    static = False
    capture_s = 0.0

    def __init__(self, target: Any, draft: Any, capacity: int, *, block_size: int, sampler: Any = None) -> None:
        self.target, self.draft, self.block = target, draft, block_size
        #: A sampled run's ``sampling.Sampler`` (None: greedy), for both loops.
        self.sampler = sampler
        self.tcache, self.dcache = target.new_cache(capacity), draft.new_cache(capacity)

    def decode(self, prompt_ids: Sequence[int], *, max_new_tokens: int, stop_ids: Sequence[int] = (),
               on_tokens: Callable[[int], None] | None = None, top2: bool = False) -> Generation:
        return decode(self.target, prompt_ids, max_new_tokens=max_new_tokens, stop_ids=stop_ids, cache=self.tcache,
                      on_tokens=on_tokens, sampler=self.sampler, top2=top2)

    def dflash(self, prompt_ids: Sequence[int], *, max_new_tokens: int, stop_ids: Sequence[int] = (),
               on_tokens: Callable[[int], None] | None = None) -> Generation:
        return dflash_decode(self.target, self.draft, prompt_ids, max_new_tokens=max_new_tokens, stop_ids=stop_ids,
                             target_cache=self.tcache, draft_cache=self.dcache, block_size=self.block,
                             on_tokens=on_tokens, sampler=self.sampler)

    def teacher_forced_logits(self, prompt_ids: Sequence[int], tokens: Sequence[int]) -> Any:
        return teacher_forced_logits(self.target, prompt_ids, tokens, cache=self.tcache)


class StaticLoop(StaticRunner):
    """The static runner as a ``Loop``: its lossless check runs on the same attention path."""

    static = True
    sampler = None

    def teacher_forced_logits(self, prompt_ids: Sequence[int], tokens: Sequence[int]) -> Any:
        return teacher_forced_logits(self.target, prompt_ids, tokens, forward_all=self.forward_all)


def make_loop(target: Any, draft: Any, capacity: int, *, block_size: int, graphs: bool = False,
              sampler: Any = None) -> EagerLoop | StaticLoop:
    """The static loop when it runs this pair as the eager one would (``supports_static``), with
    CUDA graphs when ``graphs`` (CUDA only); else, or for a sampled run (``sampler``), the eager loop."""
    if sampler is not None:
        return EagerLoop(target, draft, capacity, block_size=block_size, sampler=sampler)
    if supports_static(target, draft):
        return StaticLoop(target, draft, capacity, block_size=block_size, graphs=graphs)
    return EagerLoop(target, draft, capacity, block_size=block_size)


@dataclass
class LoopChoice:
    """Which executor a run uses and why: ``static-graphs`` (the static executor replaying CUDA
    graphs), ``static`` (the same without graphs: the CPU, or ``--no-compile``) or ``eager``."""

    executor: str
    reason: str
    #: The self-check's outcome, None where none ran.
    check: SelfCheck | None = None
    capture_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"executor": self.executor, "executor_reason": self.reason,
                "self_check": self.check.to_json() if self.check is not None else None}


def checked_loop(target: Any, draft: Any, capacity: int, *, block_size: int, graphs: bool, sampler: Any,
                 check_prompt: Sequence[int], max_new_tokens: int,
                 say: Callable[[str], None]) -> tuple[EagerLoop | StaticLoop, LoopChoice]:
    """The run's loop (``make_loop``'s choice), the static one only when it passes its self-check
    on ``check_prompt`` (``self_check.self_check``, at most ``max_new_tokens`` tokens); else the
    eager loop for the whole run, with one line said naming what differed or failed. ``graphs``:
    capture CUDA graphs (CUDA only; a capture error falls back too)."""
    loop = make_loop(target, draft, capacity, block_size=block_size, sampler=sampler)
    if not isinstance(loop, StaticLoop):
        if sampler is not None:
            why = "sampled runs run eagerly"
        elif not supports_static(target):
            why = "the target is not a native one (transformers backend): the generic path"
        else:
            why = "the draft's forward is not v1's: the generic path"
        return loop, LoopChoice("eager", why)
    what = "graphed" if graphs else "static"
    check: SelfCheck
    try:
        if graphs:
            loop.capture()
    except Exception as exc:  # noqa: BLE001 - whatever failed, the eager loop does not capture
        check = SelfCheck("capture-error", f"capturing the CUDA graphs failed: {first_line(exc)}")
    else:
        check = self_check(loop, check_prompt, max_new_tokens=max_new_tokens)
        if check.passed:
            note = f" ({check.detail})" if check.detail else ""
            return loop, LoopChoice("static-graphs" if graphs else "static",
                                    f"the self-check agreed with the eager executor over {check.steps} steps{note}",
                                    check, loop.capture_s)
    verb = "disagrees with the eager one" if check.status == "differs" else "failed"
    say(f"self-check: the {what} executor {verb} ({check.detail}); this run uses the eager executor (slower, "
        "same tokens)")
    del loop
    gc.collect()
    if target.device.type == "cuda":
        torch.cuda.empty_cache()
    return EagerLoop(target, draft, capacity, block_size=block_size), LoopChoice(
        "eager", f"self-check {check.status}: {check.detail}", check)
