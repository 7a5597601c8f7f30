"""Greedy decoding, batch 1: target-only, and DFlash speculative (DESIGN section 6).

Plain functions over the modules, in the spirit of gpt-fast. Each decoding step synchronises
with the device once (the host needs the accepted length to crop the caches, and the tokens to
check for stop tokens); the non-finite checks ride along in that same transfer.

Counting: ``max_new_tokens`` counts every new token, the first one (the target's argmax after
the prompt) included. An acceptance length is the number of new tokens a DFlash step yields:
accepted drafts plus the target's bonus token, cut short by a stop token or the token budget,
as the z-lab reference records it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch

from dflash_ckpt.runtime.draft import DFlashDraft
from dflash_ckpt.runtime.layers import KVCache
from dflash_ckpt.runtime.target import TargetModel

#: ``proposer(start, anchor, k)``: ``k`` draft tokens for the block whose anchor token ``anchor``
#: sits at position ``start``. Replaces the draft in tests and benchmarks.
Proposer = Callable[[int, int, int], Sequence[int]]


@dataclass
class Generation:
    """What one decoding run produced, and what it cost."""

    tokens: list[int] = field(default_factory=list)
    #: DFlash only: new tokens per step (accepted drafts + bonus).
    acceptance_lengths: list[int] = field(default_factory=list)
    #: Forward passes of the target, prefill included.
    target_forwards: int = 0
    draft_forwards: int = 0
    prefill_s: float = 0.0
    decode_s: float = 0.0
    #: Target-only: the top-2 logits (float32) and their ids behind each new token.
    top2_values: list[list[float]] = field(default_factory=list)
    top2_ids: list[list[int]] = field(default_factory=list)
    #: Where non-finite values appeared (``None``: nowhere); generation stops there.
    overflow: str | None = None
    stopped: bool = False

    @property
    def decode_tokens(self) -> int:
        """Tokens produced after prefill (the first token comes from prefill)."""
        return max(len(self.tokens) - 1, 0)

    @property
    def decode_tok_s(self) -> float | None:
        return self.decode_tokens / self.decode_s if self.decode_s > 0 and self.decode_tokens else None


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def now(device: torch.device) -> float:
    """Wall time after the device has finished its queued work."""
    sync(device)
    return time.perf_counter()


def _first_stop(tokens: Sequence[int], stop_ids: frozenset[int]) -> int | None:
    for i, tok in enumerate(tokens):
        if tok in stop_ids:
            return i
    return None


@torch.inference_mode()
def prefill(target: TargetModel, prompt: torch.Tensor, cache: KVCache, taps: Sequence[int] = ()) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Run the prompt ``[1, n]`` into an empty cache; the last position's logits and the taps."""
    cache.reset()
    out = target(prompt, cache=cache, taps=taps, logits="last")
    return out.logits[:, -1], out.features


@torch.inference_mode()
def decode(
    target: TargetModel,
    prompt_ids: Sequence[int],
    *,
    max_new_tokens: int,
    stop_ids: Sequence[int] = (),
    cache: KVCache,
    on_tokens: Callable[[int], None] | None = None,
) -> Generation:
    """Target-only greedy decoding, one token per forward pass."""
    dev = target.device
    stops = frozenset(stop_ids)
    gen = Generation()
    prompt = torch.tensor([list(prompt_ids)], dtype=torch.long, device=dev)
    top_v = torch.empty(max_new_tokens, 2, dtype=torch.float32, device=dev)
    top_i = torch.empty(max_new_tokens, 2, dtype=torch.long, device=dev)
    t0 = now(dev)
    logits, _ = prefill(target, prompt, cache)
    gen.target_forwards = 1
    step = torch.empty(1, 1, dtype=torch.long, device=dev)
    t_decode = None
    for i in range(max_new_tokens):
        if i > 0:
            logits = target(step, cache=cache, logits="last").logits[:, -1]
            gen.target_forwards += 1
        scores = logits.float()
        top = scores.topk(2, dim=-1)
        top_v[i], top_i[i] = top.values[0], top.indices[0]
        nxt = scores.argmax(dim=-1)
        tok, finite = torch.stack([nxt[0], torch.isfinite(scores).all().long()]).tolist()
        if t_decode is None:
            t_decode = time.perf_counter()
            gen.prefill_s = t_decode - t0
        if not finite:
            gen.overflow = "logits"
            break
        gen.tokens.append(tok)
        if on_tokens:
            on_tokens(1)
        if tok in stops:
            gen.stopped = True
            break
        step[0, 0] = tok
    gen.decode_s = now(dev) - (t_decode or t0)
    n = len(gen.tokens)
    gen.top2_values = top_v[:n].tolist()
    gen.top2_ids = top_i[:n].tolist()
    return gen


@torch.inference_mode()
def dflash_decode(
    target: TargetModel,
    draft: DFlashDraft,
    prompt_ids: Sequence[int],
    *,
    max_new_tokens: int,
    stop_ids: Sequence[int] = (),
    target_cache: KVCache,
    draft_cache: KVCache,
    block_size: int | None = None,
    on_tokens: Callable[[int], None] | None = None,
    proposer: Proposer | None = None,
) -> Generation:
    """Greedy DFlash speculative decoding; the output equals ``decode``'s up to logit ties.

    Each step drafts a block ``[last token, mask * (B-1)]`` conditioned on the tapped features
    of the tokens accepted since the previous step, verifies it with one target forward, keeps
    the longest prefix of drafts equal to the target's argmax plus the target's bonus token,
    and crops both caches. Near the token budget the block is verified only as far as needed.
    """
    args = draft.args
    dev = target.device
    block = block_size or args.block_size
    taps = list(args.target_layer_ids)
    stops = frozenset(stop_ids)
    gen = Generation()
    prompt = torch.tensor([list(prompt_ids)], dtype=torch.long, device=dev)
    block_ids = torch.full((1, block), args.mask_token_id, dtype=torch.long, device=dev)
    embed_w, head_w = target.embed_tokens.weight, target.lm_head.weight
    draft_cache.reset()

    t0 = now(dev)
    logits, context = prefill(target, prompt, target_cache, taps)
    gen.target_forwards = 1
    scores = logits.float()
    ok = torch.isfinite(context).all() & torch.isfinite(scores).all()
    first, feats_ok = torch.stack([scores.argmax(dim=-1)[0], ok.long()]).tolist()
    t_decode = time.perf_counter()
    gen.prefill_s = t_decode - t0
    if not feats_ok:
        gen.overflow = "tapped features"
        gen.decode_s = 0.0
        return gen
    gen.tokens.append(first)
    if on_tokens:
        on_tokens(1)
    gen.stopped = first in stops
    start = len(prompt_ids)  # position of the last token, not yet run through the target
    last = first
    while not gen.stopped and len(gen.tokens) < max_new_tokens:
        size = min(block, max_new_tokens - len(gen.tokens))
        block_ids.fill_(args.mask_token_id)
        block_ids[0, 0] = last
        fused_ok = torch.ones((), dtype=torch.bool, device=dev)
        if size > 1:
            if proposer is not None:
                proposal = list(proposer(start, last, size - 1))
                block_ids[0, 1:size] = torch.tensor(proposal, dtype=torch.long, device=dev)
            else:
                fused = draft.fuse(context)
                fused_ok = torch.isfinite(fused).all()
                hidden = draft.forward_fused(fused, draft.embed(block_ids, embed_w), cache=draft_cache)
                block_ids[0, 1:size] = draft.pick_tokens(hidden[:, 1:size], head_w, block_ids[:, 0])[0]
                gen.draft_forwards += 1
        out = target(block_ids[:, :size], cache=target_cache, taps=taps, logits="all")
        gen.target_forwards += 1
        scores = out.logits[0].float()
        posterior = scores.argmax(dim=-1)
        ok = torch.isfinite(out.features).all() & torch.isfinite(scores).all()
        host = torch.cat([block_ids[0, 1:size], posterior, ok.long()[None], fused_ok.long()[None]]).tolist()
        drafts, post = host[: size - 1], host[size - 1: 2 * size - 1]
        if not host[-2]:
            gen.overflow = "tapped features"
            break
        if not host[-1]:
            gen.overflow = "fused features"
            break
        accepted = 0
        while accepted < size - 1 and drafts[accepted] == post[accepted]:
            accepted += 1
        new = drafts[:accepted] + [post[accepted]]
        cut = _first_stop(new, stops)
        if cut is not None:
            new = new[: cut + 1]
            gen.stopped = True
        gen.tokens.extend(new)
        gen.acceptance_lengths.append(len(new))
        if on_tokens:
            on_tokens(len(new))
        # Positions start..start+accepted now hold verified tokens; the bonus is not yet run.
        target_cache.crop(start + accepted + 1)
        context = out.features[:, : accepted + 1]
        start += accepted + 1
        last = new[-1]
    gen.decode_s = now(dev) - t_decode
    return gen
