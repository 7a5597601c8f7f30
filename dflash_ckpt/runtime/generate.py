"""Greedy decoding, batch 1: target-only, and DFlash speculative (DESIGN section 6).

Plain functions over the modules, in the spirit of gpt-fast. Two paths share the loop logic:
- the generic eager path here works with any target that implements the target protocol
  (``target(ids, cache=, taps=, logits=)`` returning ``.logits``/``.features``, a cache with
  ``reset``/``crop``): blocks are verified as far as the token budget needs, caches cropped;
- the static path (``runtime/static.py``, native targets only) has fixed shapes and device-side
  state, so its steps can be captured as CUDA graphs.
``runtime/loops.py`` chooses one of the two for a pair, once; nothing here knows the static path.

Each decoding step synchronises with the device once (the host needs the accepted tokens to
check for stop tokens); the non-finite checks ride along in that same transfer, and each
step's wall time is recorded at that sync (``Generation.step_s``).

Counting: ``max_new_tokens`` counts every new token, the first one (the target's argmax after
the prompt) included. An acceptance length is the number of new tokens a DFlash step yields:
accepted drafts plus the target's bonus token, cut short by a stop token or the token budget,
as the z-lab reference records it.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

import torch

if TYPE_CHECKING:
    from dflash_ckpt.runtime.draft import DFlashDraft

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
    #: Wall time of each decoding step (one token target-only, one draft+verify DFlash), taken
    #: at the step's host sync; the prefill is not a step.
    step_s: list[float] = field(default_factory=list)
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


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def now(device: torch.device) -> float:
    """Wall time after the device has finished its queued work."""
    sync(device)
    return time.perf_counter()


def first_stop(tokens: Sequence[int], stop_ids: frozenset[int]) -> int | None:
    for i, tok in enumerate(tokens):
        if tok in stop_ids:
            return i
    return None


def accept(drafts: Sequence[int], posterior: Sequence[int], limit: int) -> int:
    """Accepted drafts: the longest prefix of ``drafts`` (at most ``limit``) equal to the
    target's argmax at the position before each (``posterior[i]`` predicts ``drafts[i]``)."""
    n = 0
    while n < limit and drafts[n] == posterior[n]:
        n += 1
    return n


#: The clock behind ``Generation.step_s`` (see ``step_clock``).
_STEP_CLOCK: list[Callable[[], float]] = [time.perf_counter]


@contextmanager
def step_clock(clock: Callable[[], float]) -> Iterator[None]:
    """Time decoding steps with ``clock`` inside the block (default: wall time). With one CPU
    thread, ``time.thread_time`` measures a step's own work, which other processes on a shared
    machine do not inflate (wall time counts the slices the scheduler gives them)."""
    _STEP_CLOCK.append(clock)
    try:
        yield
    finally:
        _STEP_CLOCK.pop()


class StepRecorder:
    """Appends one step's new tokens to a ``Generation``: stop tokens, counts, timing, progress.
    Created right after the prefill's host sync: the first step is timed from there."""

    def __init__(self, gen: Generation, stop_ids: Sequence[int], on_tokens: Callable[[int], None] | None,
                 t_decode: float) -> None:
        self.gen, self.stops, self.on_tokens = gen, frozenset(stop_ids), on_tokens
        self.t_decode = t_decode  # when decoding began, for ``Generation.decode_s``
        self.clock = _STEP_CLOCK[-1]
        self.last = t_decode if self.clock is time.perf_counter else self.clock()

    def add(self, new: list[int], *, step: bool = True) -> list[int]:
        """Record ``new`` (cut after a stop token); returns what was kept."""
        cut = first_stop(new, self.stops)
        if cut is not None:
            new = new[: cut + 1]
            self.gen.stopped = True
        self.gen.tokens.extend(new)
        if step:
            self.gen.acceptance_lengths.append(len(new))
        t = self.clock()
        self.gen.step_s.append(t - self.last)
        self.last = t
        if self.on_tokens:
            self.on_tokens(len(new))
        return new


def start_dflash(gen: Generation, logits: torch.Tensor, feats: torch.Tensor, t0: float, stop_ids: Sequence[int],
                 on_tokens: Callable[[int], None] | None) -> tuple[StepRecorder, int] | None:
    """After a DFlash prefill (one target forward, begun at ``t0``): the first token, recorded (it
    is no step), read in the same host sync as whether the logits and the tapped ``feats`` are
    finite. ``None`` when they are not (``gen.overflow`` says so): nothing can be drafted from
    them. Shared by the eager loop and the static runner, whose prefill differs."""
    gen.target_forwards = 1
    scores = logits.float()
    ok = torch.isfinite(feats).all() & torch.isfinite(scores).all()
    first, feats_ok = torch.stack([scores.argmax(dim=-1)[0], ok.long()]).tolist()
    t_decode = time.perf_counter()
    gen.prefill_s = t_decode - t0
    if not feats_ok:
        gen.overflow = "tapped features"
        return None
    rec = StepRecorder(gen, stop_ids, on_tokens, t_decode)
    rec.add([first], step=False)
    gen.step_s.clear()
    return rec, first


# -- the generic eager path --------------------------------------------------------------------


@torch.inference_mode()
def prefill(target: Any, prompt: torch.Tensor, cache: Any, taps: Sequence[int] = ()) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Run the prompt ``[1, n]`` into an empty cache; the last position's logits and the taps."""
    cache.reset()
    out = target(prompt, cache=cache, taps=taps, logits="last")
    return out.logits[:, -1], out.features


@torch.inference_mode()
def decode(
    target: Any,
    prompt_ids: Sequence[int],
    *,
    max_new_tokens: int,
    stop_ids: Sequence[int] = (),
    cache: Any = None,
    on_tokens: Callable[[int], None] | None = None,
) -> Generation:
    """Target-only greedy decoding, one token per forward pass."""
    dev = target.device
    gen = Generation()
    prompt = torch.tensor([list(prompt_ids)], dtype=torch.long, device=dev)
    top_v = torch.empty(max_new_tokens, 2, dtype=torch.float32, device=dev)
    top_i = torch.empty(max_new_tokens, 2, dtype=torch.long, device=dev)
    t0 = now(dev)
    logits, _ = prefill(target, prompt, cache)
    gen.target_forwards = 1
    step = torch.empty(1, 1, dtype=torch.long, device=dev)
    rec: StepRecorder | None = None
    t_decode = t0
    for i in range(max_new_tokens):
        if i > 0:
            logits = target(step, cache=cache, logits="last").logits[:, -1]
            gen.target_forwards += 1
        scores = logits.float()
        top = scores.topk(2, dim=-1)
        top_v[i], top_i[i] = top.values[0], top.indices[0]
        nxt = scores.argmax(dim=-1)
        tok, finite = torch.stack([nxt[0], torch.isfinite(scores).all().long()]).tolist()
        if rec is None:
            t_decode = time.perf_counter()
            gen.prefill_s = t_decode - t0
            rec = StepRecorder(gen, stop_ids, on_tokens, t_decode)
        if not finite:
            gen.overflow = "logits"
            break
        rec.add([tok], step=False)
        if i == 0:
            gen.step_s.pop()  # the first token comes with the prefill
        if gen.stopped:
            break
        step[0, 0] = tok
    gen.decode_s = now(dev) - t_decode
    n = len(gen.tokens)
    gen.top2_values = top_v[:n].tolist()
    gen.top2_ids = top_i[:n].tolist()
    return gen


def draft_block(
    draft: DFlashDraft,
    context: torch.Tensor,
    block_ids: torch.Tensor,
    size: int,
    *,
    embed_w: torch.Tensor,
    head_w: torch.Tensor,
    cache: Any,
    block: int | None = None,
    first_slot: int = 1,
) -> torch.Tensor:
    """Fill ``block_ids[0, 1:size]`` with the draft's tokens for the block ``[anchor, mask...]``
    (its first ``block`` slots, default all) given the tapped ``context`` features of the tokens
    accepted since the last call; the drafts are the outputs at slots ``first_slot`` onwards (1
    for 1+N, 0 for anchor-first, whose verify block is one wider than the draft's). Returns
    whether the fused context is finite (a device bool, read with the step's one sync)."""
    fused = draft.fuse(context)
    width = block or block_ids.shape[1]
    hidden = draft.forward_fused(fused, draft.embed(block_ids[:, :width], embed_w), cache=cache)
    picked = hidden[:, first_slot: first_slot + size - 1]
    block_ids[0, 1:size] = draft.pick_tokens(picked, head_w, block_ids[:, :1])[0]
    return torch.isfinite(fused).all()


@dataclass
class Verified:
    """One verification's outcome, on the host."""

    drafts: list[int]
    posterior: list[int]
    accepted: int
    #: ``None``, or which values were non-finite (``tapped features``, ``fused features``).
    overflow: str | None
    #: The verify pass's tapped features (device), the next draft call's context.
    features: torch.Tensor | None = None


def verify_and_accept(target: Any, block_ids: torch.Tensor, size: int, *, cache: Any, taps: Sequence[int],
                      fused_ok: torch.Tensor) -> Verified:
    """Run ``block_ids[:, :size]`` through the target (appended to its cache) and accept: the one
    host sync of a step carries drafts, the target's argmax and the finite flags."""
    out = target(block_ids[:, :size], cache=cache, taps=taps, logits="all")
    scores = out.logits[0].float()
    posterior = scores.argmax(dim=-1)
    ok = torch.isfinite(out.features).all() & torch.isfinite(scores).all()
    host = torch.cat([block_ids[0, 1:size], posterior, ok.long()[None], fused_ok.long()[None]]).tolist()
    drafts, post = host[: size - 1], host[size - 1: 2 * size - 1]
    overflow = None if host[-2] else "tapped features"
    if overflow is None and not host[-1]:
        overflow = "fused features"
    return Verified(drafts, post, accept(drafts, post, size - 1), overflow, out.features)


@torch.inference_mode()
def dflash_decode(
    target: Any,
    draft: DFlashDraft,
    prompt_ids: Sequence[int],
    *,
    max_new_tokens: int,
    stop_ids: Sequence[int] = (),
    target_cache: Any = None,
    draft_cache: Any = None,
    block_size: int | None = None,
    on_tokens: Callable[[int], None] | None = None,
    proposer: Proposer | None = None,
) -> Generation:
    """Greedy DFlash speculative decoding; the output equals ``decode``'s up to logit ties.

    Each step drafts a block ``[last token, mask * (B-1)]`` conditioned on the tapped features
    of the tokens accepted since the previous step (``draft_block``; B-1 drafts from slots 1..B-1
    in the 1+N layout, B from slots 0..B-1 anchor-first: ``draft.args.block_layout``), verifies it with one
    target forward and keeps the longest prefix of drafts equal to the target's argmax plus the
    target's bonus token (``verify_and_accept``), and crops the target cache. Near the token
    budget the block is verified only as far as needed.
    """
    args = draft.args
    dev = target.device
    block = block_size or args.block_size
    first_slot = args.block_layout.first_draft_slot
    width = args.block_layout.verify_width(block)  # B (1+N) or B+1 (anchor-first)
    taps = list(args.target_layer_ids)
    gen = Generation()
    prompt = torch.tensor([list(prompt_ids)], dtype=torch.long, device=dev)
    block_ids = torch.full((1, width), args.mask_token_id, dtype=torch.long, device=dev)
    embed_w, head_w = target.embed_tokens.weight, target.lm_head.weight
    draft_cache.reset()

    t0 = now(dev)
    logits, context = prefill(target, prompt, target_cache, taps)
    started = start_dflash(gen, logits, context, t0, stop_ids, on_tokens)
    if started is None:
        return gen
    rec, first = started
    start = len(prompt_ids)  # position of the last token, not yet run through the target
    last = first
    while not gen.stopped and len(gen.tokens) < max_new_tokens:
        size = min(width, max_new_tokens - len(gen.tokens))
        block_ids.fill_(args.mask_token_id)
        block_ids[0, 0] = last
        fused_ok = torch.ones((), dtype=torch.bool, device=dev)
        if size > 1:
            if proposer is not None:
                proposal = list(proposer(start, last, size - 1))
                block_ids[0, 1:size] = torch.tensor(proposal, dtype=torch.long, device=dev)
            else:
                fused_ok = draft_block(draft, context, block_ids, size, embed_w=embed_w, head_w=head_w,
                                       cache=draft_cache, block=block, first_slot=first_slot)
                gen.draft_forwards += 1
        v = verify_and_accept(target, block_ids, size, cache=target_cache, taps=taps, fused_ok=fused_ok)
        gen.target_forwards += 1
        if v.overflow:
            gen.overflow = v.overflow
            break
        new = rec.add(v.drafts[: v.accepted] + [v.posterior[v.accepted]])
        # Positions start..start+accepted now hold verified tokens; the bonus is not yet run.
        target_cache.crop(start + v.accepted + 1)
        context = v.features[:, : v.accepted + 1]
        start += v.accepted + 1
        last = new[-1]
    gen.decode_s = now(dev) - rec.t_decode
    return gen


@torch.inference_mode()
def teacher_forced(target: Any, prompt_ids: Sequence[int], tokens: Sequence[int], *, cache: Any = None,
                   forward_all: Callable[[Sequence[int]], torch.Tensor] | None = None,
                   ) -> tuple[list[int], list[list[float]], list[list[int]]]:
    """The target's greedy choice for each of ``tokens`` given the prompt and the tokens before
    it, from ONE forward over ``prompt + tokens[:-1]``: argmax, top-2 logits and their ids.

    Greedy decoding reproduces ``tokens`` exactly when every argmax equals its token, so this
    checks a DFlash output against target-only decoding without decoding a second time.
    ``forward_all(ids)``: the logits ``[1, n, V]`` of another path (the static one) instead.
    """
    if not tokens:
        return [], [], []
    scores = teacher_forced_logits(target, prompt_ids, tokens, cache=cache, forward_all=forward_all).float()
    top = scores.topk(2, dim=-1)
    return scores.argmax(dim=-1).tolist(), top.values.tolist(), top.indices.tolist()


@torch.inference_mode()
def teacher_forced_logits(target: Any, prompt_ids: Sequence[int], tokens: Sequence[int], *, cache: Any = None,
                          forward_all: Callable[[Sequence[int]], torch.Tensor] | None = None) -> torch.Tensor:
    """The target's logits ``[len(tokens), V]`` (its dtype, on its device) for each of
    ``tokens`` given the prompt and the tokens before it: ONE forward over ``prompt +
    tokens[:-1]``, the input of the lossless judge (``runtime/judge.py``). ``forward_all(ids)``:
    the logits ``[1, n, V]`` of another path (the static one) instead."""
    seq = list(prompt_ids) + list(tokens[:-1])
    start = len(prompt_ids) - 1
    if forward_all is not None:
        logits = forward_all(seq)
    else:
        ids = torch.tensor([seq], dtype=torch.long, device=target.device)
        if cache is not None:
            cache.reset()
        logits = target(ids, cache=cache, logits="all").logits
    return logits[0, start:]
