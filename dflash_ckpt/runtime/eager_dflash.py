"""The eager DFlash executor: any target (native or transformers-backed) and draft, on the generic path.

Blocks are verified as far as the token budget needs and the target cache is cropped back past
the accepted tokens; the host loop (``dflash_loop.run_dflash``) decides everything else. This is
the oracle the static path and the probe's replay are tested against.

It is also the only executor that samples (``sampling.Sampler``: the first token and each verify
pass's rule, on the device, read back with the step's one sync): sampled runs take the eager
loop (``loops.make_loop``), because the static path's verify step computes greedy acceptance
inside its captured graphs, and sampling there would need the run's generator registered with
every graph; the timing then compares eager with eager.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Sequence

import torch

from dflash_ckpt.runtime.dflash_loop import Verified, accept, first_token, run_dflash
from dflash_ckpt.runtime.generate import Generation, prefill

if TYPE_CHECKING:
    from dflash_ckpt.runtime.draft import DFlashDraft
    from dflash_ckpt.runtime.sampling import Sampler


class EagerExecutor:
    """One pair's DFlash steps on the generic path, with the caches the caller sized (the plan's
    ``capacity``) and the plan's ``block_size``; ``sampler``: a sampled run's (None: greedy)."""

    def __init__(self, target: Any, draft: Any, *, target_cache: Any, draft_cache: Any, block_size: int,
                 sampler: Sampler | None = None) -> None:
        args = draft.args
        self.sampler = sampler
        self.target, self.draft_model, self.tcache, self.dcache = target, draft, target_cache, draft_cache
        self.device = target.device
        self.block = block_size
        self.first_slot = args.block_layout.first_draft_slot  # the layout's one switch
        self.width = args.block_layout.verify_width(block_size)  # B (1+N) or B+1 (anchor-first)
        self.taps = list(args.target_layer_ids)
        self.mask_id = args.mask_token_id
        self.block_ids = torch.full((1, self.width), self.mask_id, dtype=torch.long, device=self.device)
        self.embed_w, self.head_w = target.embed_tokens.weight, target.lm_head.weight
        self.context: torch.Tensor | None = None  # what the next draft call reads
        self.features: torch.Tensor | None = None  # the last verify's tapped features
        #: This step's draft call: its fused context was finite (``None``: no block started yet).
        self.fused_ok: torch.Tensor | None = None
        self.all_finite = torch.ones((), dtype=torch.bool, device=self.device)

    def prefill(self, prompt_ids: Sequence[int]) -> tuple[int, bool]:
        self.dcache.reset()
        prompt = torch.tensor([list(prompt_ids)], dtype=torch.long, device=self.device)
        logits, self.context = prefill(self.target, prompt, self.tcache, self.taps)
        return first_token(logits, self.context, self.sampler.sample if self.sampler is not None else None)

    def start_block(self, last: int) -> None:
        """The block ``[last, mask...]`` in ``block_ids``, with no fused context judged yet."""
        self.block_ids.fill_(self.mask_id)
        self.block_ids[0, 0] = last
        self.fused_ok = self.all_finite

    def draft(self, start: int, last: int, size: int) -> None:
        """Fill ``block_ids[0, 1:size]`` with the draft's tokens for the block ``[last, mask...]``
        (its first ``block`` slots) given the tapped ``context`` features of the tokens accepted
        since the last call; the drafts are the outputs at slots ``first_slot`` onwards (1 for
        1+N, 0 for anchor-first, whose verify block is one wider than the draft's). Whether the
        fused context is finite stays a device bool, read with the step's one sync."""
        self.start_block(last)
        d, ids = self.draft_model, self.block_ids
        fused = d.fuse(self.context)
        hidden = d.forward_fused(fused, d.embed(ids[:, :self.block], self.embed_w), cache=self.dcache)
        picked = hidden[:, self.first_slot: self.first_slot + size - 1]
        ids[0, 1:size] = d.pick_tokens(picked, self.head_w, ids[:, :1])[0]
        self.fused_ok = torch.isfinite(fused).all()

    def verify(self, start: int, last: int, size: int) -> Verified:
        """Run ``block_ids[:, :size]`` through the target (appended to its cache) and accept: the
        one host sync of a step carries drafts, the target's argmax and the finite flags. With a
        ``sampler``, its rule decides on the device and the sync carries the step's output row and
        the accepted count instead of the argmax."""
        if self.fused_ok is None:  # nothing drafted this step (one slot left in the budget)
            self.start_block(last)
        ids = self.block_ids
        out = self.target(ids[:, :size], cache=self.tcache, taps=self.taps, logits="all")
        scores = out.logits[0].float()
        ok = torch.isfinite(out.features).all() & torch.isfinite(scores).all()
        if self.sampler is None:
            posterior, extra = scores.argmax(dim=-1), scores.new_zeros(0, dtype=torch.long)
        else:
            step = self.sampler.verify(torch.nan_to_num(scores), ids[0, 1:size])
            posterior, extra = step.tokens[0], step.accepted
        host = torch.cat([ids[0, 1:size], posterior, extra, ok.long()[None], self.fused_ok.long()[None]]).tolist()
        drafts, post = host[: size - 1], host[size - 1: 2 * size - 1]
        accepted = accept(drafts, post, size - 1) if self.sampler is None else host[2 * size - 1]
        overflow = None if host[-2] else "tapped features"
        if overflow is None and not host[-1]:
            overflow = "fused features"
        self.fused_ok, self.features = None, out.features
        return Verified(drafts, post, accepted, overflow, out.features)

    def commit(self, start: int, accepted: int) -> None:
        # Positions start..start+accepted now hold verified tokens; the bonus is not yet run.
        self.tcache.crop(start + accepted + 1)
        assert self.features is not None
        self.context = self.features[:, : accepted + 1]


@torch.inference_mode()
def dflash_decode(
    target: Any,
    draft: DFlashDraft,
    prompt_ids: Sequence[int],
    *,
    max_new_tokens: int,
    block_size: int,
    target_cache: Any,
    draft_cache: Any,
    stop_ids: Sequence[int] = (),
    on_tokens: Callable[[int], None] | None = None,
    sampler: Sampler | None = None,
) -> Generation:
    """DFlash speculative decoding on the eager path (``run_dflash`` with an ``EagerExecutor``);
    greedy, the output equals ``generate.decode``'s up to logit ties; with a ``sampler``, its
    rule verifies each block."""
    ex = EagerExecutor(target, draft, target_cache=target_cache, draft_cache=draft_cache, block_size=block_size,
                       sampler=sampler)
    return run_dflash(ex, prompt_ids, max_new_tokens=max_new_tokens, stop_ids=stop_ids, on_tokens=on_tokens)
