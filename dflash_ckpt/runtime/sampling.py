"""The two verification rules of one DFlash block under sampling, as pure functions over tensors.

A DFlash step drafts ``B-1`` tokens ``d1..d{B-1}`` (the draft's argmax at block slots 1..B-1) and
the target verifies the block ``[b, d1, ..., d{B-1}]`` in one forward, giving ``B`` rows of
logits: row ``i`` is the target's distribution for the token after block token ``i``. Everything
here is batched over a leading dimension ``N`` (one row per independent step: 1 in the runtime,
20,000 in the statistical tests), never reads a value on the host and never sizes a tensor by
data, so it can sit inside the static loop's step (a CUDA graph capture needs the run's generator
registered with the graph as a graph-safe generator; not yet tried on a GPU).

``match`` (the z-lab reference's ``dflash_generate`` and its benchmark, hence the paper's
temperature-1 tables): the target samples every row of its processed distribution; draft ``di``
is accepted while it equals the sample of row ``i-1``; the output is the target's own sample path
(the accepted drafts, which are those samples, then the sample at the first mismatch, or the
last row's sample as the bonus). Lossless by construction: every output token is a sample of the
target conditioned on the tokens before it.

``rejection`` (speculative sampling, Leviathan et al. 2023 / Chen et al. 2023, as vLLM runs it):
draft ``x`` at row ``i`` is accepted with probability ``min(1, p(x) / q(x))``; on the first
rejection the token is drawn from ``normalize(max(0, p - q))``; after a full accept the bonus is a
sample of the last row. What vLLM does for DFlash drafts, read in
``vllm/v1/sample/rejection_sampler.py`` at commit 7f6fc1c5ce8d02f473b1b923debbfef3fa0b7a6a (and
0097a7bbf1d91c71f03e35dc6c6fe978b88181f5) and ``vllm/v1/worker/gpu_model_runner.py`` (the V1
runner, which vLLM's CPU build runs), which calls the sampler with ``None  # draft_probs`` for
every proposer (EAGLE, DFlash, n-gram alike):

- ``p`` is the target's *processed* distribution: the logits are divided by the temperature,
  top-k and then top-p are applied (``apply_sampling_constraints`` -> ``apply_top_k_top_p``), then
  softmax in float32; the ratio and the residual use that ``p``, and the bonus token is drawn by
  the ordinary sampler with the same processing.
- ``q`` is one-hot at the drafted token (``NO_DRAFT_PROBS``: ``draft_prob = 1``), so a draft is
  accepted with probability ``p(x)`` and the residual is ``p`` with ``x`` removed,
  renormalised. The V2 runner (``vllm/v1/worker/gpu/spec_decode/rejection_sampler_utils.py``)
  does the same when it has no draft logits ("One-hot draft: q(token) = 1").
- Greedy requests (temperature 0) take the target's argmax at each row and accept while it equals
  the draft: the same as ``match`` at temperature 0, and no random numbers are drawn.

Where we differ in form, not in distribution: vLLM accepts when ``p/q >= u`` with ``u`` uniform on
[0, 1), and draws float64 uniforms so that ``u == 0`` (which would accept a token ``p`` forbids) is
rare; we accept when ``u < p/q``, which has the same probability and never accepts ``p(x) == 0``.
vLLM draws recovered tokens by the exponential race (``argmax(prob / Exp(1))``); we invert the
CDF. General draft distributions ``q`` (a drafter that samples) are accepted too, for the tests
and for a future sampling drafter; a DFlash draft's tokens are its argmax, so ``q`` is one-hot.

With a one-hot ``q`` the two rules have the same law: both accept ``x`` with probability ``p(x)``
and on a miss emit a token of ``p`` without ``x`` (``match``: the sample, given that it is not
``x``; ``rejection``: the residual). So an acceptance measured under one estimates the other's
too; they differ in their random streams (a seed reproduces a run under its own rule only).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

#: The pad of ``Verification.tokens`` past a step's output.
PAD = -1


def processed_logits(logits: torch.Tensor, temperature: float, top_p: float = 1.0, top_k: int = 0) -> torch.Tensor:
    """float32 logits after temperature, then top-k, then top-p (vLLM's and Hugging Face's order);
    masked entries are ``-inf``. ``temperature`` must be > 0 (greedy never gets here).

    top-k keeps every logit equal to the k-th largest (ties kept, as both engines do); top-p keeps
    the most probable tokens while the mass *above* each is under ``top_p`` (the smallest set whose
    mass reaches ``top_p``; the engines' "drop where the ascending cumulative mass is at most
    ``1 - top_p``" in other words), and always the most probable one. Both become a threshold on
    the logit, so tokens tied at the boundary are all kept (the engines keep whichever of them
    their sort puts first), and with top-k only the k candidates are sorted, not the vocabulary."""
    x = logits.float() / temperature
    vocab = x.shape[-1]
    limited = 0 < top_k < vocab
    if limited:
        candidates = torch.topk(x, top_k, dim=-1).values  # descending
        x = x.masked_fill(x < candidates[..., -1:], float("-inf"))
    if top_p < 1.0:
        if not limited:
            candidates = torch.sort(x, dim=-1, descending=True).values
        mass = torch.exp(candidates - torch.logsumexp(x, dim=-1, keepdim=True))
        above = mass.cumsum(dim=-1) - mass
        kept = (above < top_p).sum(dim=-1, keepdim=True).clamp_min(1)
        x = x.masked_fill(x < candidates.gather(-1, kept - 1), float("-inf"))
    return x


def processed_probs(logits: torch.Tensor, temperature: float, top_p: float = 1.0, top_k: int = 0) -> torch.Tensor:
    """The distribution a token is drawn from, float32 over the last dimension.

    ``temperature == 0`` is greedy: one-hot at ``argmax`` (the first maximum, as ``torch.argmax``
    and the greedy loops pick it), so a rule fed these probabilities reduces to the greedy rule
    exactly."""
    if temperature == 0.0:
        hot = torch.zeros(logits.shape, dtype=torch.float32, device=logits.device)
        return hot.scatter_(-1, logits.argmax(dim=-1, keepdim=True), 1.0)
    return torch.softmax(processed_logits(logits, temperature, top_p, top_k), dim=-1)


def sample_from(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """One token per row of ``probs`` (``[..., V]``, non-negative, any positive total) by inverting
    the CDF with one uniform per row: batched, data-independent shapes, seeded by ``generator``.

    A token of probability 0 is never drawn (the CDF does not rise there); the CDF is summed in
    float64 so a 150k-token vocabulary does not lose the tail to rounding."""
    cdf = probs.double().cumsum(dim=-1)
    total = cdf[..., -1:]
    u = torch.rand(total.shape, dtype=torch.float64, device=probs.device, generator=generator)
    idx = torch.searchsorted(cdf, u * total, right=True)
    # u * total can round up to total itself; fall back to the last token with mass then.
    last = torch.where(probs > 0, torch.arange(probs.shape[-1], device=probs.device), 0).amax(dim=-1, keepdim=True)
    return torch.minimum(idx, last).squeeze(-1)


@dataclass
class Verification:
    """One verification of ``N`` blocks.

    ``tokens`` ``[N, B]``: each step's output (``accepted[n] + 1`` tokens, then ``PAD``);
    ``accepted`` ``[N]``: drafts accepted (0..B-1), so the acceptance length (tau's unit, bonus
    included) is ``accepted + 1``."""

    tokens: torch.Tensor
    accepted: torch.Tensor

    @property
    def lengths(self) -> torch.Tensor:
        return self.accepted + 1


def _require_shapes(target_logits: torch.Tensor, drafts: torch.Tensor) -> None:
    if target_logits.dim() != 3 or drafts.dim() != 2 or drafts.shape != (target_logits.shape[0], target_logits.shape[1] - 1):
        raise ValueError(f"want target_logits [N, B, V] and drafts [N, B-1], got {tuple(target_logits.shape)} "
                         f"and {tuple(drafts.shape)}")


def _assemble(drafts: torch.Tensor, accepted: torch.Tensor, last: torch.Tensor) -> Verification:
    """``[d1..d_a, last[a], PAD...]`` per row: the accepted drafts, then the row's final token
    (``last`` ``[N, B]``: the token to emit if the first rejection is at slot ``a``)."""
    n, width = last.shape
    slot = torch.arange(width, device=last.device).expand(n, width)
    padded = torch.cat([drafts, drafts.new_full((n, 1), PAD)], dim=1)
    a = accepted.unsqueeze(1)
    tokens = torch.where(slot < a, padded, torch.where(slot == a, last, torch.full_like(last, PAD)))
    return Verification(tokens, accepted)


def _prefix(ok: torch.Tensor) -> torch.Tensor:
    """The length of each row's leading run of ``True``."""
    return ok.long().cumprod(dim=1).sum(dim=1)


def verify_greedy(target_logits: torch.Tensor, drafts: torch.Tensor) -> Verification:
    """Temperature 0, both rules: accept while the draft is the target's argmax; the argmax after
    the accepted prefix is the bonus. No random number is drawn."""
    _require_shapes(target_logits, drafts)
    best = target_logits.argmax(dim=-1)
    return _assemble(drafts, _prefix(drafts == best[:, :-1]), best)


def verify_match(target_logits: torch.Tensor, drafts: torch.Tensor, temperature: float, top_p: float = 1.0,
                 top_k: int = 0, generator: torch.Generator | None = None) -> Verification:
    """The ``match`` rule: the target samples every row; accepted = the drafts equal to those
    samples, in order; the output is the samples up to and including the first mismatch."""
    if temperature == 0.0:
        return verify_greedy(target_logits, drafts)
    _require_shapes(target_logits, drafts)
    samples = sample_from(processed_probs(target_logits, temperature, top_p, top_k), generator)
    return _assemble(drafts, _prefix(drafts == samples[:, :-1]), samples)


def verify_rejection(target_logits: torch.Tensor, drafts: torch.Tensor, temperature: float, top_p: float = 1.0,
                     top_k: int = 0, generator: torch.Generator | None = None,
                     draft_probs: torch.Tensor | None = None) -> Verification:
    """The ``rejection`` rule (speculative sampling as vLLM runs it; module docstring).

    ``draft_probs`` ``[N, B-1, V]`` is the draft's distribution at each slot, or ``None`` for
    one-hot at the drafted tokens (a DFlash draft: its tokens are its argmax). Random numbers are
    drawn in a fixed order (acceptance uniforms, then one recovery draw per slot, then the bonus)
    whatever is accepted, so a seed gives the same stream on every device and batch size."""
    if temperature == 0.0:
        return verify_greedy(target_logits, drafts)
    _require_shapes(target_logits, drafts)
    p = processed_probs(target_logits, temperature, top_p, top_k)  # [N, B, V]
    p_slots = p[:, :-1]
    if draft_probs is None:
        q = torch.zeros_like(p_slots).scatter_(-1, drafts.unsqueeze(-1), 1.0)
    else:
        q = draft_probs.float()
    p_x = p_slots.gather(-1, drafts.unsqueeze(-1)).squeeze(-1)
    q_x = q.gather(-1, drafts.unsqueeze(-1)).squeeze(-1)
    u = torch.rand(p_x.shape, dtype=torch.float64, device=p.device, generator=generator)
    ok = (q_x > 0) & (u * q_x.double() < p_x.double())  # u < p/q without dividing by q
    residual = (p_slots - q).clamp_min(0.0)
    # An empty residual (p <= q everywhere, so p == q) cannot be reached by a rejection in exact
    # arithmetic; sample p there, so rounding can never yield a NaN or a forbidden token.
    residual = torch.where(residual.sum(dim=-1, keepdim=True) > 0, residual, p_slots)
    recovered = sample_from(residual, generator)  # [N, B-1]
    bonus = sample_from(p[:, -1], generator)  # [N]
    return _assemble(drafts, _prefix(ok), torch.cat([recovered, bonus.unsqueeze(1)], dim=1))


def verify(rule: str, target_logits: torch.Tensor, drafts: torch.Tensor, temperature: float, top_p: float = 1.0,
           top_k: int = 0, generator: torch.Generator | None = None) -> Verification:
    """The rule by name (``run/sampling_settings.RULES``), with DFlash's one-hot drafts."""
    if rule == "match":
        return verify_match(target_logits, drafts, temperature, top_p, top_k, generator)
    if rule == "rejection":
        return verify_rejection(target_logits, drafts, temperature, top_p, top_k, generator)
    raise ValueError(f"unknown verification rule {rule!r} (match, rejection)")


@dataclass
class Sampler:
    """One sampled run's settings and its one generator, as the loops use them: ``sample`` draws
    a token from one row of logits (the prefill's, a target-only step's), ``verify`` runs the rule
    on one verify pass. Greedy runs have no sampler (the loops' own argmax path, bit for bit)."""

    temperature: float
    top_p: float
    top_k: int
    rule: str
    generator: torch.Generator

    @classmethod
    def of(cls, settings: object, device: torch.device | str) -> Sampler:
        """From ``sampling_settings.SamplingSettings`` (not greedy), seeded on ``device``."""
        s = settings
        return cls(s.temperature, s.top_p, s.top_k, s.rule, make_generator(s.seed, device))  # type: ignore[attr-defined]

    def sample(self, logits: torch.Tensor) -> torch.Tensor:
        """Tokens ``[...]`` for logits ``[..., V]``, after temperature, top-k and top-p."""
        return sample_from(processed_probs(logits, self.temperature, self.top_p, self.top_k), self.generator)

    def verify(self, logits: torch.Tensor, drafts: torch.Tensor) -> Verification:
        """The rule on one block: ``logits`` ``[size, V]`` of the verify pass, ``drafts`` ``[size - 1]``."""
        return verify(self.rule, logits[None], drafts[None], self.temperature, self.top_p, self.top_k, self.generator)


def make_generator(seed: int, device: torch.device | str = "cpu") -> torch.Generator:
    """The run's one generator: every sampled token of a run comes from it, in step order, so a
    run is reproducible from ``--seed`` on the same device (CPU and CUDA streams differ)."""
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    return gen
