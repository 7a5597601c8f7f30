"""The one DFlash host loop (docs/DESIGN.md section 6), over interchangeable executors.

What a step decides is written once, here: the block's size near the token budget, which drafts
are accepted (greedy: the longest prefix equal to the target's argmax, plus the target's bonus
token; sampled runs: the executor applies the run's rule, ``sampling.Sampler``, and reports the
accepted count and the step's last token the same way),
the step's record (new tokens cut after a stop token, acceptance length, time, progress), and
when the loop ends (a stop token, the budget, a non-finite value, ``max_steps``). How a step is
computed is the executor's:

- ``eager_dflash.EagerExecutor``: any target and draft on the generic path (caches cropped);
- ``static.StaticExecutor``: native pairs with fixed shapes and device-side state, captured as
  CUDA graphs on GPU (acceptance computed on the device, read back with the step's one sync);
- ``probe.RecordedExecutor``: ``probe-taps``' replay, whose verification is a comparison with
  the target's recorded continuation and whose context is sliced from recorded features.

So every path yields the same tokens and acceptance lengths by construction, and the eager
executor stays the oracle the others are tested against.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

import torch

from dflash_ckpt.runtime.generate import Generation, StepRecorder, now


def accept(drafts: Sequence[int], posterior: Sequence[int], limit: int) -> int:
    """Accepted drafts: the longest prefix of ``drafts`` (at most ``limit``) equal to the
    target's argmax at the position before each (``posterior[i]`` predicts ``drafts[i]``)."""
    n = 0
    while n < limit and drafts[n] == posterior[n]:
        n += 1
    return n


@dataclass
class Verified:
    """One verification's outcome, on the host."""

    drafts: list[int]
    #: The target's argmax at each verified slot (``posterior[accepted]`` is the bonus token);
    #: under sampling, the step's output row (only ``posterior[accepted]`` is read: the token
    #: the rule emits after the accepted drafts).
    posterior: list[int]
    accepted: int
    #: ``None``, or which values were non-finite (``tapped features``, ``fused features``).
    overflow: str | None
    #: The verify pass's tapped features (device), the next draft call's context (eager only).
    features: torch.Tensor | None = None


class Executor(Protocol):
    """The per-step operations of one DFlash path; ``run_dflash`` calls them in this order:
    ``prefill`` once, then per step ``draft`` (when the block holds a draft), ``verify``, ``commit``."""

    device: torch.device
    #: Slots verified per step: ``block_size`` (1+N) or one more (anchor-first), from the plan.
    width: int

    def prefill(self, prompt_ids: Sequence[int]) -> tuple[int, bool]:
        """Run the prompt: the first new token and whether the tapped features and logits are
        finite, read in one host sync."""
        ...

    def draft(self, start: int, last: int, size: int) -> None:
        """Draft ``size - 1`` tokens for the block anchored by ``last`` at position ``start``."""
        ...

    def verify(self, start: int, last: int, size: int) -> Verified:
        """Verify the block's first ``size`` slots and accept (at most ``size - 1`` drafts)."""
        ...

    def commit(self, start: int, accepted: int) -> None:
        """Keep positions ``start..start+accepted`` (caches rolled back past them) and the
        context the next draft call reads."""
        ...


def first_token(logits: torch.Tensor, feats: torch.Tensor | None,
                pick: Callable[[torch.Tensor], torch.Tensor] | None = None) -> tuple[int, bool]:
    """The prefill's argmax (or ``pick``'s token: a sampled run's ``Sampler.sample``), and whether
    the logits and tapped ``feats`` are finite: one host sync."""
    scores = logits.float()
    ok = torch.isfinite(scores).all()
    if feats is not None:
        ok = ok & torch.isfinite(feats).all()
    token = scores.argmax(dim=-1) if pick is None else pick(torch.nan_to_num(scores))
    first, finite = torch.stack([token[0], ok.long()]).tolist()
    return int(first), bool(finite)


def run_dflash(ex: Executor, prompt_ids: Sequence[int], *, max_new_tokens: int, stop_ids: Sequence[int] = (),
               on_tokens: Callable[[int], None] | None = None, max_steps: int | None = None) -> Generation:
    """DFlash decoding with ``ex``; greedy, the output equals target-only decoding up to logit
    ties (an executor with a sampler samples: its output is a sample of the target's distribution).

    Each step drafts a block ``[last token, mask...]`` conditioned on the tapped features of
    the tokens accepted since the previous step, verifies it with one target pass, keeps the
    longest prefix of drafts equal to the target's argmax plus the target's bonus token, and
    rolls the caches back past them. Near the token budget the block is verified only as far as
    needed. ``max_steps`` ends the loop after that many steps (the probe's give-up bound).
    """
    gen = Generation()
    t0 = now(ex.device)
    first, finite = ex.prefill(prompt_ids)
    gen.target_forwards = 1
    t_decode = time.perf_counter()
    gen.prefill_s = t_decode - t0
    if not finite:
        gen.overflow = "tapped features"
        return gen
    rec = StepRecorder(gen, stop_ids, on_tokens, t_decode)
    rec.add([first], step=False)  # the first token comes with the prefill: no step
    gen.step_s.clear()
    start, last = len(prompt_ids), first  # the last token's position: not yet run through the target
    while not gen.stopped and len(gen.tokens) < max_new_tokens:
        if max_steps is not None and len(gen.acceptance_lengths) >= max_steps:
            break
        size = min(ex.width, max_new_tokens - len(gen.tokens))
        if size > 1:
            ex.draft(start, last, size)
            gen.draft_forwards += 1
        v = ex.verify(start, last, size)
        gen.target_forwards += 1
        if v.overflow:
            gen.overflow = v.overflow
            break
        new = rec.add(v.drafts[: v.accepted] + [v.posterior[v.accepted]])
        ex.commit(start, v.accepted)
        start += v.accepted + 1
        last = new[-1]
    gen.decode_s = now(ex.device) - rec.t_decode
    return gen
