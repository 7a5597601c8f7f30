"""Measure a draft's acceptance under any tap set with draft calls only (``probe-taps``).

Greedy speculative decoding is lossless: whatever tap layers a draft reads, the tokens a DFlash
run yields are the target's own greedy continuation. So, per prompt, the target is run twice and
never again: once greedily (``generate.decode``, the continuation) and once over prompt plus
continuation with every decoder layer tapped (``record``). A candidate tap set then costs only
draft calls (``measure``): the one DFlash host loop (``dflash_loop.run_dflash``) with an executor
(``RecordedExecutor``) whose context for each step is the candidate's layers sliced out of the
recorded features at the positions accepted so far, and whose verification is a comparison with
the known continuation (accepted = longest prefix of drafts equal to it, plus the bonus token).

The loop uses only the public draft protocol (``args``, ``fuse``, ``embed``, ``forward_fused``,
``pick_tokens``, ``new_cache``) and the target protocol with all layers tapped, so any draft or
target implementing them can be probed. Recorded features come from one full forward rather than
the real loop's incremental verify passes, so a probed tau can differ from a measured one where
rounding flips a draft token; ``probe-taps`` re-measures its finalists with smoke-run's loop.
"""

from __future__ import annotations

import dataclasses
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import torch

from dflash_ckpt.runtime.dflash_loop import Verified, accept, run_dflash
from dflash_ckpt.runtime.generate import decode
from dflash_ckpt.runtime.layers import KVCache


@dataclass
class Recording:
    """One prompt's greedy continuation and every layer's output along it.

    ``features [1, P + len(tokens), depth * H]`` holds the outputs of layers ``0..depth-1``
    (concatenated in layer order) at every position of prompt + continuation.
    """

    prompt_ids: list[int]
    tokens: list[int]
    features: torch.Tensor
    hidden_size: int
    stopped: bool = False
    overflow: str | None = None

    def taps(self, layer_ids: Sequence[int]) -> torch.Tensor:
        """The features the DFlash loop would tap with ``layer_ids``: ``[1, n, k * H]``."""
        h = self.hidden_size
        index = torch.cat([torch.arange(i * h, (i + 1) * h) for i in layer_ids]).to(self.features.device)
        return self.features.index_select(-1, index)


@torch.inference_mode()
def record(
    target: Any,
    prompt_ids: Sequence[int],
    *,
    depth: int,
    max_new_tokens: int,
    stop_ids: Sequence[int] = (),
    cache: KVCache,
) -> Recording:
    """Greedy continuation (as ``decode`` makes it) and all ``depth`` layers' outputs along it."""
    gen = decode(target, prompt_ids, max_new_tokens=max_new_tokens, stop_ids=stop_ids, cache=cache)
    ids = torch.tensor([list(prompt_ids) + gen.tokens], dtype=torch.long, device=target.device)
    cache.reset()
    out = target(ids, cache=cache, taps=list(range(depth)), logits="last")  # the protocol's cheapest
    feats = out.features
    hidden = feats.shape[-1] // depth
    overflow = gen.overflow or (None if bool(torch.isfinite(feats).all()) else "tapped features")
    return Recording(list(prompt_ids), list(gen.tokens), feats, hidden, stopped=gen.stopped, overflow=overflow)


class RecordedExecutor:
    """The DFlash steps replayed on a ``Recording``: draft calls only. The context is the
    candidate's layers sliced out of the recorded features, and verifying a block is comparing
    its drafts with the recorded continuation (the target's own greedy tokens)."""

    def __init__(self, draft: Any, rec: Recording, layer_ids: Sequence[int], *, embed_w: torch.Tensor,
                 head_w: torch.Tensor, draft_cache: Any, block_size: int) -> None:
        args = draft.args
        self.draft_model, self.dcache, self.embed_w, self.head_w = draft, draft_cache, embed_w, head_w
        self.device = draft.device
        self.first_slot = args.block_layout.first_draft_slot  # the layout switch, as the eager executor's
        self.width = args.block_layout.verify_width(block_size)
        self.mask_id = args.mask_token_id
        self.feats = rec.taps(layer_ids).to(self.device)
        self.prompt_len, self.seq = len(rec.prompt_ids), rec.tokens
        self.block_ids = torch.full((1, block_size), self.mask_id, dtype=torch.long, device=self.device)
        self.context = self.feats[:, : self.prompt_len]
        self.drafts: list[int] = []
        self.fused_ok = True

    def prefill(self, prompt_ids: Sequence[int]) -> tuple[int, bool]:
        """The first token is the continuation's first: the recording ran the target already."""
        self.dcache.reset()
        self.context = self.feats[:, : self.prompt_len]
        return self.seq[0], True

    def draft(self, start: int, last: int, size: int) -> None:
        d = self.draft_model
        self.block_ids.fill_(self.mask_id)
        self.block_ids[0, 0] = last
        fused = d.fuse(self.context)
        hidden = d.forward_fused(fused, d.embed(self.block_ids, self.embed_w), cache=self.dcache)
        picked = d.pick_tokens(hidden[:, self.first_slot: self.first_slot + size - 1], self.head_w, self.block_ids[:, :1])
        host = torch.cat([picked.reshape(-1), torch.isfinite(fused).all().long()[None]]).tolist()
        self.drafts, self.fused_ok = host[: size - 1], bool(host[-1])

    def verify(self, start: int, last: int, size: int) -> Verified:
        produced = start - self.prompt_len + 1  # tokens of the continuation yielded so far
        truth = self.seq[produced: produced + size]
        drafts, ok = self.drafts, self.fused_ok
        self.drafts, self.fused_ok = [], True
        return Verified(drafts, truth, accept(drafts, truth, size - 1), None if ok else "fused features")

    def commit(self, start: int, accepted: int) -> None:
        self.context = self.feats[:, start: start + accepted + 1]


@dataclass
class Measurement:
    """A tap set over every recording: its tau, or (``exact`` false) a bound tau stays below."""

    tau: float
    exact: bool
    acceptance_lengths: list[int]
    draft_forwards: int
    overflow: str | None = None


def measure(
    draft: Any,
    recs: Sequence[Recording],
    layer_ids: Sequence[int],
    *,
    floor: float | None = None,
    embed_w: torch.Tensor,
    head_w: torch.Tensor,
    draft_cache: Any,
    block_size: int,
    stop_ids: Sequence[int] = (),
) -> Measurement:
    """Pooled tau over ``recs`` (tokens over steps, as smoke-run pools it), given up below ``floor``.

    Each recording is replayed by a ``RecordedExecutor``: the acceptance lengths
    ``eager_dflash.dflash_decode`` would record reading ``layer_ids``. Every tap set yields the
    same tokens (lossless), so tau = total / steps with a fixed total: a set that must reach
    ``floor`` may take at most ``total / floor`` steps. Past that, the simulation stops and the
    result is a bound below ``floor`` (at least one step was left). A set whose fused features
    overflow scores 0: the draft cannot run on it.
    """
    total = sum(max(len(r.tokens) - 1, 0) for r in recs)
    allowed = int(total / floor) if floor else None
    lengths: list[int] = []
    calls = 0
    with torch.inference_mode():
        for rec in recs:
            if rec.overflow:
                return Measurement(0.0, True, lengths, calls, overflow=rec.overflow)
            if not rec.tokens:
                continue
            left = None if allowed is None else allowed - len(lengths)
            ex = RecordedExecutor(draft, rec, layer_ids, embed_w=embed_w, head_w=head_w, draft_cache=draft_cache,
                                  block_size=block_size)
            gen = run_dflash(ex, rec.prompt_ids, max_new_tokens=len(rec.tokens), stop_ids=stop_ids, max_steps=left)
            calls += gen.draft_forwards
            lengths += gen.acceptance_lengths
            if gen.overflow:
                return Measurement(0.0, True, lengths, calls, overflow=gen.overflow)
            if left is not None and not gen.stopped and len(gen.tokens) < len(rec.tokens):
                return Measurement(total / (len(lengths) + 1), False, lengths, calls)
    return Measurement(sum(lengths) / len(lengths) if lengths else 1.0, True, lengths, calls)


@contextmanager
def reading(draft: Any, **changes: Any) -> Iterator[Any]:
    """The same loaded draft, its ``args`` fields set to ``changes`` for a while (the settings
    the weights do not depend on: which layers it taps, its block layout)."""
    before = draft.args
    draft.args = dataclasses.replace(before, **changes)
    try:
        yield draft
    finally:
        draft.args = before


def reading_taps(draft: Any, layer_ids: Sequence[int]) -> AbstractContextManager[Any]:
    """The draft reading ``layer_ids`` for a while: ``fc`` reads ``k * H`` whatever they are, so
    smoke-run's loop can measure any candidate without reloading the draft."""
    return reading(draft, target_layer_ids=tuple(layer_ids))
