"""The decoding loop of a pair, chosen once: the static path where it runs the pair, else the eager one.

Both offer ``decode``, ``dflash`` and the teacher-forced logits, and give the same tokens: their DFlash loop is the one host loop
(``dflash_loop.run_dflash``) over the static executor (``static.py``: fixed shapes and CUDA
graphs) or the eager one (``eager_dflash.py``: any target and draft). The
caller sizes both with the plan's ``capacity`` and ``block_size`` (``plan.RunPlan``).

Sampled runs (a ``sampling.Sampler``) always take the eager loop: only the eager executor
samples (``eager_dflash.py`` says why).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from dflash_ckpt.runtime.eager_dflash import dflash_decode
from dflash_ckpt.runtime.generate import Generation, decode, teacher_forced_logits
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
               on_tokens: Callable[[int], None] | None = None) -> Generation:
        return decode(self.target, prompt_ids, max_new_tokens=max_new_tokens, stop_ids=stop_ids, cache=self.tcache,
                      on_tokens=on_tokens, sampler=self.sampler)

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
