"""Test-only ways into the DFlash loop: a proposer in place of the draft, and the top-2 lossless
check that predates the judge (``runtime/judge.py``).

A proposer is an executor (``dflash_loop.Executor``) whose ``draft`` step writes given tokens
instead of calling the draft: the host loop, the verification and the caches stay the real ones,
so acceptance can be steered (an oracle with a share of wrong tokens) while the output must not
change. Production code never needs either; they live here so it carries no test hooks.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

from dflash_ckpt.runtime.dflash_loop import run_dflash
from dflash_ckpt.runtime.eager_dflash import EagerExecutor
from dflash_ckpt.runtime.generate import Generation, teacher_forced_logits
from dflash_ckpt.runtime.measure import Lossless
from dflash_ckpt.runtime.static import StaticExecutor, StaticRunner

#: ``proposer(start, anchor, k)``: ``k`` draft tokens for the block whose anchor token ``anchor``
#: sits at position ``start``.
Proposer = Callable[[int, int, int], Sequence[int]]


class ProposedEager(EagerExecutor):
    """The eager executor with the draft call replaced by ``proposer``."""

    def __init__(self, *args: Any, proposer: Proposer, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.proposer = proposer

    def draft(self, start: int, last: int, size: int) -> None:
        self.start_block(last)
        proposal = list(self.proposer(start, last, size - 1))
        self.block_ids[0, 1:size] = torch.tensor(proposal, dtype=torch.long, device=self.device)


class ProposedStatic(StaticExecutor):
    """The static executor with the draft call replaced by ``proposer`` (the verify stays on the device)."""

    def __init__(self, runner: StaticRunner, proposer: Proposer) -> None:
        super().__init__(runner)
        self.proposer = proposer

    def draft(self, start: int, last: int, size: int) -> None:
        r = self.r
        proposal = list(self.proposer(start, last, size - 1)) + [r.mask_id] * (self.width - size)
        r.ids[0, 1:] = torch.tensor(proposal, dtype=torch.long, device=self.device)


@torch.inference_mode()
def dflash_decode(target: Any, draft: Any, prompt_ids: Sequence[int], *, max_new_tokens: int, target_cache: Any,
                  draft_cache: Any, block_size: int | None = None, stop_ids: Sequence[int] = (),
                  on_tokens: Callable[[int], None] | None = None, proposer: Proposer | None = None) -> Generation:
    """``eager_dflash.dflash_decode`` for tests: the trained block size unless given, and an
    optional ``proposer`` in place of the draft."""
    block = block_size if block_size is not None else draft.args.block_size
    kw = {"target_cache": target_cache, "draft_cache": draft_cache, "block_size": block}
    ex = ProposedEager(target, draft, proposer=proposer, **kw) if proposer else EagerExecutor(target, draft, **kw)
    return run_dflash(ex, prompt_ids, max_new_tokens=max_new_tokens, stop_ids=stop_ids, on_tokens=on_tokens)


@torch.inference_mode()
def static_dflash(runner: StaticRunner, prompt_ids: Sequence[int], *, max_new_tokens: int,
                  stop_ids: Sequence[int] = (), proposer: Proposer | None = None) -> Generation:
    """``runner.dflash``, with an optional ``proposer`` in place of the draft."""
    if proposer is None:
        return runner.dflash(prompt_ids, max_new_tokens=max_new_tokens, stop_ids=stop_ids)
    runner._require_room(prompt_ids, max_new_tokens)
    return run_dflash(ProposedStatic(runner, proposer), prompt_ids, max_new_tokens=max_new_tokens, stop_ids=stop_ids)


@torch.inference_mode()
def teacher_forced(target: Any, prompt_ids: Sequence[int], tokens: Sequence[int], *, cache: Any = None,
                   forward_all: Callable[[Sequence[int]], torch.Tensor] | None = None,
                   ) -> tuple[list[int], list[list[float]], list[list[int]]]:
    """The target's greedy choice for each of ``tokens`` given the prompt and the tokens before
    it, from ONE forward over ``prompt + tokens[:-1]``: argmax, top-2 logits and their ids."""
    if not tokens:
        return [], [], []
    scores = teacher_forced_logits(target, prompt_ids, tokens, cache=cache, forward_all=forward_all).float()
    top = scores.topk(2, dim=-1)
    return scores.argmax(dim=-1).tolist(), top.values.tolist(), top.indices.tolist()


def compare_outputs(target_tokens: list[int], dflash_tokens: list[int], top2_values: list[list[float]],
                    top2_ids: list[list[int]], tolerance: float) -> Lossless:
    """Compare two greedy outputs; judge the first divergence by the target's top-2 margin there.

    ``top2_*[j]`` are the target-only run's two best logits (and ids) when it chose token ``j``.
    The divergence is a tie when the margin is within ``tolerance`` and DFlash chose the
    target's runner-up; anything else (or outputs of different length with equal prefixes)
    differs.
    """
    n = min(len(target_tokens), len(dflash_tokens))
    for j in range(n):
        if target_tokens[j] != dflash_tokens[j]:
            values, ids = top2_values[j], top2_ids[j]
            margin = float(values[0] - values[1])
            runner_up = ids[1] if ids[0] == target_tokens[j] else ids[0]
            tie = margin <= tolerance and dflash_tokens[j] == runner_up
            return Lossless("tie" if tie else "differs", j, j, target_tokens[j], dflash_tokens[j], margin, runner_up)
    if len(target_tokens) != len(dflash_tokens):
        return Lossless("differs", n, n,
                        target_tokens[n] if n < len(target_tokens) else None,
                        dflash_tokens[n] if n < len(dflash_tokens) else None)
    return Lossless("identical", n)
