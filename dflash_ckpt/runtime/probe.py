"""Measure a draft's acceptance under any tap set with draft calls only (``probe-taps``).

Greedy speculative decoding is lossless: whatever tap layers a draft reads, the tokens a DFlash
run yields are the target's own greedy continuation. So, per prompt, the target is run twice and
never again: once greedily (``generate.decode``, the continuation) and once over prompt plus
continuation with every decoder layer tapped (``record``). A candidate tap set then costs only
draft calls (``simulate``): the DFlash loop of ``generate.dflash_decode`` step for step, where the
context of each step is the candidate's layers sliced out of the recorded features at the
positions accepted so far, and the target's verification is a comparison with the known
continuation (accepted = longest prefix of drafts equal to it, plus the bonus token).

The loop uses only the public draft protocol (``args``, ``fuse``, ``embed``, ``forward_fused``,
``pick_tokens``, ``new_cache``) and the target protocol with all layers tapped, so any draft or
target implementing them can be probed. Recorded features come from one full forward rather than
the real loop's incremental verify passes, so a probed tau can differ from a measured one where
rounding flips a draft token; ``probe-taps`` re-measures its finalists with ``dflash_decode``.
"""

from __future__ import annotations

import dataclasses
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

import torch

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


@dataclass
class Simulation:
    """What the DFlash loop would yield under one tap set on one recording."""

    acceptance_lengths: list[int] = field(default_factory=list)
    draft_forwards: int = 0
    overflow: str | None = None
    #: Stopped after ``max_steps`` steps, before the end of the continuation.
    cut: bool = False


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


@torch.inference_mode()
def simulate(
    draft: Any,
    rec: Recording,
    layer_ids: Sequence[int],
    *,
    embed_w: torch.Tensor,
    head_w: torch.Tensor,
    draft_cache: Any,
    block_size: int | None = None,
    stop_ids: Sequence[int] = (),
    max_new_tokens: int | None = None,
    max_steps: int | None = None,
) -> Simulation:
    """The acceptance lengths ``dflash_decode`` would record reading ``layer_ids``.

    Step for step as ``generate.dflash_decode``: the first token comes from prefill; each step
    drafts ``[last, mask * (B-1)]`` (B-1 drafts from slots 1.. in the 1+N layout, B from slot 0
    anchor-first: ``draft.args.block_layout``; fewer near the token budget) conditioned on the features
    of the positions accepted since the previous step, accepts the longest prefix of drafts equal
    to the continuation plus one bonus token, and stops at a stop token or the budget.
    ``max_steps`` gives up (``cut``) once that many steps have not reached the end: the caller
    knows the candidate cannot reach the tau it needs.
    """
    args = draft.args
    block = block_size or args.block_size
    first_slot = args.block_layout.first_draft_slot  # the layout switch, as in ``dflash_decode``
    width = args.block_layout.verify_width(block)
    stops = frozenset(stop_ids)
    seq = rec.tokens
    budget = len(seq) if max_new_tokens is None else min(max_new_tokens, len(seq))
    sim = Simulation()
    if rec.overflow or not seq:
        sim.overflow = rec.overflow
        return sim
    dev = draft.device
    feats = rec.taps(layer_ids).to(dev)
    p = len(rec.prompt_ids)
    block_ids = torch.full((1, block), args.mask_token_id, dtype=torch.long, device=dev)
    draft_cache.reset()
    context = feats[:, :p]
    produced = 1  # the first token, the target's argmax after the prompt
    stopped = seq[0] in stops
    start = p  # position of the last token, not yet run through the target
    while not stopped and produced < budget:
        if max_steps is not None and len(sim.acceptance_lengths) >= max_steps:
            sim.cut = True
            break
        size = min(width, budget - produced)
        drafts: list[int] = []
        if size > 1:
            block_ids.fill_(args.mask_token_id)
            block_ids[0, 0] = seq[produced - 1]
            fused = draft.fuse(context)
            hidden = draft.forward_fused(fused, draft.embed(block_ids, embed_w), cache=draft_cache)
            picked = draft.pick_tokens(hidden[:, first_slot: first_slot + size - 1], head_w, block_ids[:, :1])
            host = torch.cat([picked.reshape(-1), torch.isfinite(fused).all().long()[None]]).tolist()
            sim.draft_forwards += 1
            if not host[-1]:
                sim.overflow = "fused features"
                break
            drafts = host[: size - 1]
        truth = seq[produced: produced + size]
        accepted = 0
        while accepted < size - 1 and drafts[accepted] == truth[accepted]:
            accepted += 1
        new = truth[: accepted + 1]
        for i, tok in enumerate(new):
            if tok in stops:
                new = new[: i + 1]
                stopped = True
                break
        sim.acceptance_lengths.append(len(new))
        produced += len(new)
        context = feats[:, start: start + accepted + 1]
        start += accepted + 1
    return sim


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
    block_size: int | None = None,
    stop_ids: Sequence[int] = (),
) -> Measurement:
    """Pooled tau over ``recs`` (tokens over steps, as smoke-run pools it), given up below ``floor``.

    Every tap set yields the same tokens (lossless), so tau = total / steps with a fixed total:
    a set that must reach ``floor`` may take at most ``total / floor`` steps. Past that, the
    simulation stops and the result is a bound below ``floor`` (at least one step was left).
    A set whose fused features overflow scores 0: the draft cannot run on it.
    """
    total = sum(max(len(r.tokens) - 1, 0) for r in recs)
    allowed = int(total / floor) if floor else None
    lengths: list[int] = []
    calls = 0
    for rec in recs:
        left = None if allowed is None else allowed - len(lengths)
        sim = simulate(draft, rec, layer_ids, embed_w=embed_w, head_w=head_w, draft_cache=draft_cache,
                       block_size=block_size, stop_ids=stop_ids, max_steps=left)
        calls += sim.draft_forwards
        lengths += sim.acceptance_lengths
        if sim.overflow:
            return Measurement(0.0, True, lengths, calls, overflow=sim.overflow)
        if sim.cut:
            return Measurement(total / (len(lengths) + 1), False, lengths, calls)
    return Measurement(sum(lengths) / len(lengths) if lengths else 1.0, True, lengths, calls)


@contextmanager
def reading_taps(draft: Any, layer_ids: Sequence[int]) -> Iterator[Any]:
    """The same loaded draft, its ``args.target_layer_ids`` set to ``layer_ids`` for a while.

    The weights do not depend on which layers are tapped (``fc`` reads ``k * H`` whatever they
    are), so ``dflash_decode`` can measure any candidate without reloading the draft.
    """
    before = draft.args
    draft.args = dataclasses.replace(before, target_layer_ids=tuple(layer_ids))
    try:
        yield draft
    finally:
        draft.args = before
