"""Greedy decoding, batch 1: what every loop records (``Generation``, ``StepRecorder``), the
target-only loop, and the teacher-forced logits of the lossless judge (DESIGN section 6).

Plain functions over the modules, in the spirit of gpt-fast. The eager target-only path here
works with any target that implements the target protocol (``target(ids, cache=, taps=,
logits=)`` returning ``.logits``/``.features``, a cache with ``reset``/``crop``); the DFlash
loop is written once in ``dflash_loop.py`` over executors (eager ``eager_dflash.py``, static
``static.py``, the probe's replay ``probe.py``); ``loops.py`` chooses a pair's path once.

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
from typing import Any, Callable, Iterator, Sequence

import torch


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
    #: Target-only, when asked (``top2=True``: the self-check's comparison of two paths, and
    #: the tests' oracles): the top-2 logits (float32) and their ids behind each new token.
    top2_values: list[list[float]] = field(default_factory=list)
    top2_ids: list[list[int]] = field(default_factory=list)
    #: Where non-finite values appeared (``None``: nowhere); generation stops there.
    overflow: str | None = None
    stopped: bool = False

    @property
    def decode_tokens(self) -> int:
        """Tokens produced after prefill (the first token comes from prefill)."""
        return max(len(self.tokens) - 1, 0)


def now(device: torch.device) -> float:
    """Wall time after the device has finished its queued work."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


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
        cut = next((i for i, tok in enumerate(new) if tok in self.stops), None)
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


# -- the eager target-only path -----------------------------------------------------------------


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
    sampler: Any = None,
    top2: bool = False,
) -> Generation:
    """Target-only greedy decoding, one token per forward pass; with a ``sampler``
    (``sampling.Sampler``), each token is drawn from the target's processed distribution;
    ``top2`` also keeps each token's top-2 logits (``Generation.top2_values``)."""
    dev = target.device
    gen = Generation()
    prompt = torch.tensor([list(prompt_ids)], dtype=torch.long, device=dev)
    if top2:
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
        if top2:
            top = scores.topk(2, dim=-1)
            top_v[i], top_i[i] = top.values[0], top.indices[0]
        nxt = scores.argmax(dim=-1) if sampler is None else sampler.sample(torch.nan_to_num(scores))
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
    if top2:
        n = len(gen.tokens)
        gen.top2_values, gen.top2_ids = top_v[:n].tolist(), top_i[:n].tolist()
    return gen


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
