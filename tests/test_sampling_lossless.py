"""Lossless under sampling, as a statement about distributions (issue 29).

A speculative rule is lossless when the tokens it emits have the target's distribution. These
tests check it the way it can be checked: for a fixed context, many seeded runs, and Pearson's
chi-square of the emitted tokens against the target's processed softmax, at significance
``ALPHA`` = 1e-3 (a correct rule fails a given test one time in a thousand at most, and each test
is seeded, so a pass is reproducible); expected counts under 5 are pooled. Power is shown by the
same check failing (p < ALPHA) for deliberately biased verifiers.

The world is a bigram "model" over a small vocabulary: the target's logits for the next token
depend on the previous token only (``T[prev]``), and the draft's argmax chain comes from a noisy
copy ``D``. So the verify logits of a block ``[b, d1, d2]`` are ``T[[b, d1, d2]]`` exactly as a
real target would give them, and the joint distribution of the first three emitted tokens,
``p(t1 | s) p(t2 | t1) p(t3 | t2)``, is known in closed form. Three tokens with block 3 cover every
path: accepted drafts, the token at a rejection, the bonus after a full accept, and the next
step's tokens. 20,000 runs are one batched tensor computation (< 1 s each test).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

torch = pytest.importorskip("torch")

from chi_square import chi_square_gof  # noqa: E402
from dflash_ckpt.runtime.sampling import (  # noqa: E402
    PAD, Verification, make_generator, processed_probs, sample_from, verify, verify_greedy, verify_match,
    verify_rejection)

pytestmark = pytest.mark.usefixtures("one_thread")  # small tensors: one thread is fastest, on a shared CPU too
ALPHA = 1e-3
V, BLOCK, K, RUNS, START = 6, 3, 3, 20_000, 0
SETTINGS = [(0.6, 0.95, 0), (1.0, 1.0, 0), (0.7, 0.9, 4)]
Rule = Callable[..., Verification]


def world(seed: int = 7) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    target = torch.randn(V, V, generator=g) * 1.5
    draft = target + torch.randn(V, V, generator=g) * 0.8  # agrees with the target often, not always
    return target, draft


def decode(rule: Rule, target: torch.Tensor, draft: torch.Tensor, temperature: float, top_p: float, top_k: int,
           seed: int, *, sampled_drafts: bool = False) -> torch.Tensor:
    """``RUNS`` independent speculative decodes of ``K`` tokens from ``START``: ``[RUNS, K]``."""
    gen = make_generator(seed)
    out = torch.full((RUNS, K), PAD, dtype=torch.long)
    filled = torch.zeros(RUNS, dtype=torch.long)
    last = torch.full((RUNS,), START, dtype=torch.long)
    while bool((filled < K).any()):
        chain, qs, prev = [], [], last
        for _ in range(BLOCK - 1):
            if sampled_drafts:  # a drafter that samples from q: the general form of the rule
                q = processed_probs(draft[prev], temperature, top_p, top_k)
                prev = sample_from(q, gen)
                qs.append(q)
            else:  # DFlash: the draft's argmax
                prev = draft[prev].argmax(dim=-1)
            chain.append(prev)
        drafts = torch.stack(chain, dim=1)
        logits = target[torch.cat([last.unsqueeze(1), drafts], dim=1)]  # [RUNS, BLOCK, V]
        if sampled_drafts:
            res = rule(logits, drafts, temperature, top_p, top_k, gen, draft_probs=torch.stack(qs, dim=1))
        else:
            res = rule(logits, drafts, temperature, top_p, top_k, gen)
        lengths = res.lengths
        active = filled < K
        for j in range(BLOCK):
            pos = filled + j
            put = active & (j < lengths) & (pos < K)
            out[put, pos[put]] = res.tokens[put, j]
        last = torch.where(active, res.tokens.gather(1, (lengths - 1).unsqueeze(1)).squeeze(1), last)
        filled = torch.where(active, filled + lengths, filled)
    return out


def joint_probs(target: torch.Tensor, temperature: float, top_p: float, top_k: int) -> torch.Tensor:
    """p(t1, t2, t3 | START) over the V**3 cells, in ``t1 * V*V + t2 * V + t3`` order."""
    p = processed_probs(target, temperature, top_p, top_k).double()  # [prev, next]
    return (p[START][:, None, None] * p[:, :, None] * p[None, :, :]).reshape(-1)


def gof(tokens: torch.Tensor, probs: torch.Tensor):
    cells = tokens[:, 0] * V * V + tokens[:, 1] * V + tokens[:, 2]
    counts = torch.bincount(cells, minlength=V**3)
    return chi_square_gof(counts.tolist(), probs.tolist())


@pytest.mark.parametrize("rule", ["match", "rejection"])
@pytest.mark.parametrize(("temperature", "top_p", "top_k"), SETTINGS)
def test_three_tokens_follow_the_target(rule: str, temperature: float, top_p: float, top_k: int) -> None:
    target, draft = world()
    fn = verify_match if rule == "match" else verify_rejection
    tokens = decode(fn, target, draft, temperature, top_p, top_k, seed=11)
    assert bool((tokens >= 0).all())
    res = gof(tokens, joint_probs(target, temperature, top_p, top_k))
    assert res.cells > 20, res  # the test has resolution: many cells, not a pooled two
    assert res.p_value >= ALPHA, res


@pytest.mark.parametrize(("temperature", "top_p", "top_k"), SETTINGS[:2])
def test_rejection_with_a_sampling_drafter_follows_the_target(temperature: float, top_p: float, top_k: int) -> None:
    """The general form (q not one-hot): min(1, p/q) and the residual max(0, p - q)."""
    target, draft = world()
    tokens = decode(verify_rejection, target, draft, temperature, top_p, top_k, seed=12, sampled_drafts=True)
    res = gof(tokens, joint_probs(target, temperature, top_p, top_k))
    assert res.p_value >= ALPHA, res


# -- the check has power: biased verifiers fail it ---------------------------------------------------


def _biased_rejection(scale: float, keep_draft_in_residual: bool) -> Rule:
    """A rejection rule with one deliberate mistake (one-hot q): accepting with min(1, scale * p)
    or resampling from p instead of the residual p - q."""

    def rule(logits: torch.Tensor, drafts: torch.Tensor, temperature: float, top_p: float, top_k: int,
             gen: torch.Generator) -> Verification:
        p = processed_probs(logits, temperature, top_p, top_k)
        p_x = p[:, :-1].gather(-1, drafts.unsqueeze(-1)).squeeze(-1)
        u = torch.rand(p_x.shape, dtype=torch.float64, generator=gen)
        ok = u < (scale * p_x.double()).clamp(max=1.0)
        q = torch.zeros_like(p[:, :-1]).scatter_(-1, drafts.unsqueeze(-1), 1.0)
        residual = p[:, :-1] if keep_draft_in_residual else (p[:, :-1] - q).clamp_min(0)
        residual = torch.where(residual.sum(-1, keepdim=True) > 0, residual, p[:, :-1])
        last = torch.cat([sample_from(residual, gen), sample_from(p[:, -1], gen).unsqueeze(1)], dim=1)
        accepted = ok.long().cumprod(dim=1).sum(dim=1)
        slot = torch.arange(BLOCK).expand(len(drafts), BLOCK)
        padded = torch.cat([drafts, torch.full((len(drafts), 1), PAD)], dim=1)
        a = accepted.unsqueeze(1)
        tokens = torch.where(slot < a, padded, torch.where(slot == a, last, torch.full_like(last, PAD)))
        return Verification(tokens, accepted)

    return rule


def _biased_match(logits: torch.Tensor, drafts: torch.Tensor, temperature: float, top_p: float, top_k: int,
                  gen: torch.Generator) -> Verification:
    """The match rule with the token at the first mismatch taken as the target's argmax instead
    of its sample (a plausible slip: 'the correction is the greedy token')."""
    res = verify_match(logits, drafts, temperature, top_p, top_k, gen)
    best = logits.argmax(dim=-1)
    slot = torch.arange(BLOCK).expand(len(drafts), BLOCK)
    fix = (slot == res.accepted.unsqueeze(1)) & (res.accepted < BLOCK - 1).unsqueeze(1)
    return Verification(torch.where(fix, best, res.tokens), res.accepted)


@pytest.mark.parametrize("name", ["accept-1.5x", "accept-1.05x", "residual-keeps-draft", "match-argmax-correction"])
def test_a_biased_verifier_fails_the_same_check(name: str) -> None:
    """Gross slips fail with p ~ 0; even accepting 5% too often fails (p ~ 1e-9 at this seed)."""
    target, draft = world()
    rule = {"accept-1.5x": _biased_rejection(1.5, False), "accept-1.05x": _biased_rejection(1.05, False),
            "residual-keeps-draft": _biased_rejection(1.0, True),
            "match-argmax-correction": _biased_match}[name]
    tokens = decode(rule, target, draft, 1.0, 1.0, 0, seed=13)
    res = gof(tokens, joint_probs(target, 1.0, 1.0, 0))
    assert res.p_value < ALPHA, res


@pytest.mark.parametrize(("temperature", "top_p", "top_k"), SETTINGS)
def test_the_world_exercises_every_path(temperature: float, top_p: float, top_k: int) -> None:
    """The first block accepts 0, 1 and 2 drafts each in at least a tenth of the runs, so the
    distribution tests above cover rejections at both slots and the bonus token."""
    target, draft = world()
    d1 = int(draft[START].argmax())
    d2 = int(draft[d1].argmax())
    logits = target[torch.tensor([START, d1, d2])].expand(RUNS, BLOCK, V)
    drafts = torch.tensor([d1, d2]).expand(RUNS, BLOCK - 1)
    for rule in ("match", "rejection"):
        res = verify(rule, logits, drafts, temperature, top_p, top_k, make_generator(1))
        assert min(torch.bincount(res.accepted, minlength=BLOCK).tolist()) > RUNS // 10


def test_the_unbiased_twin_of_the_biased_rejection_passes() -> None:
    """The harness's own control: scale 1, true residual, i.e. the biased code path made right."""
    target, draft = world()
    tokens = decode(_biased_rejection(1.0, False), target, draft, 1.0, 1.0, 0, seed=13)
    assert gof(tokens, joint_probs(target, 1.0, 1.0, 0)).p_value >= ALPHA


# -- greedy stays exact; processing as the engines do it --------------------------------------------


def test_temperature_zero_is_the_greedy_rule_for_both_and_draws_nothing() -> None:
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(50, BLOCK, V, generator=g)
    drafts = logits[:, :-1].argmax(-1)
    drafts[::3, 1] = (drafts[::3, 1] + 1) % V  # some rejections
    want = verify_greedy(logits, drafts)
    for rule in ("match", "rejection"):
        gen = make_generator(5)
        before = gen.get_state().clone()
        got = verify(rule, logits, drafts, 0.0, 0.9, 3, gen)
        assert torch.equal(got.tokens, want.tokens) and torch.equal(got.accepted, want.accepted)
        assert torch.equal(gen.get_state(), before)
    assert want.accepted.tolist()[:3] == [1, 2, 2]
    assert want.tokens[0].tolist() == [int(drafts[0, 0]), int(logits[0, 1].argmax()), PAD]


def test_greedy_probs_are_one_hot_at_the_first_maximum() -> None:
    probs = processed_probs(torch.tensor([[1.0, 3.0, 3.0, 0.0]]), 0.0)
    assert probs.tolist() == [[0.0, 1.0, 0.0, 0.0]]


def test_top_k_and_top_p_by_hand() -> None:
    logits = torch.tensor([0.0, 1.0, 2.0, 3.0])
    assert (processed_probs(logits, 1.0, top_k=2) > 0).tolist() == [False, False, True, True]
    # softmax = [0.032, 0.087, 0.237, 0.644]: 0.644 < 0.8 <= 0.644 + 0.237 keeps two tokens
    assert (processed_probs(logits, 1.0, top_p=0.8) > 0).tolist() == [False, False, True, True]
    assert (processed_probs(logits, 1.0, top_p=0.5) > 0).tolist() == [False, False, False, True]
    assert (processed_probs(logits, 1.0, top_p=0.9) > 0).tolist() == [False, True, True, True]
    # ties at the k-th value are kept, as vLLM and Hugging Face keep them
    assert (processed_probs(torch.tensor([1.0, 2.0, 2.0, 0.0]), 1.0, top_k=1) > 0).tolist() == [False, True, True, False]
    half = processed_probs(logits, 0.5)
    assert torch.allclose(half, torch.softmax(logits / 0.5, dim=-1))
    assert torch.allclose(processed_probs(logits, 1.0, top_p=0.8)[2:].sum(), torch.tensor(1.0))


def test_processing_matches_hugging_face_warpers() -> None:
    """Temperature, then top-k, then top-p, as transformers' warpers apply them (and vLLM)."""
    tf = pytest.importorskip("transformers")
    g = torch.Generator().manual_seed(9)
    logits = torch.randn(8, 300, generator=g) * 3
    for temperature, top_p, top_k in [(0.6, 0.95, 20), (1.0, 0.9, 0), (0.7, 1.0, 5)]:
        x = tf.TemperatureLogitsWarper(temperature)(None, logits.clone())
        if top_k:
            x = tf.TopKLogitsWarper(top_k)(None, x)
        if top_p < 1:
            x = tf.TopPLogitsWarper(top_p)(None, x)
        want = torch.softmax(x, dim=-1)
        assert torch.allclose(processed_probs(logits, temperature, top_p, top_k), want, atol=1e-6)


def test_sample_from_follows_its_probs_and_never_draws_a_zero() -> None:
    probs = torch.tensor([0.0, 0.5, 0.0, 0.2, 0.3, 0.0])
    draws = sample_from(probs.expand(RUNS, V), make_generator(1))
    counts = torch.bincount(draws, minlength=V)
    assert int(counts[probs == 0].sum()) == 0
    assert chi_square_gof(counts.tolist(), probs.tolist()).p_value >= ALPHA


def test_a_seed_reproduces_a_verification() -> None:
    g = torch.Generator().manual_seed(4)
    logits = torch.randn(64, BLOCK, V, generator=g)
    drafts = logits[:, :-1].argmax(-1)
    for rule in ("match", "rejection"):
        a = verify(rule, logits, drafts, 0.8, 0.95, 0, make_generator(21))
        b = verify(rule, logits, drafts, 0.8, 0.95, 0, make_generator(21))
        assert torch.equal(a.tokens, b.tokens)


@pytest.mark.parametrize("rule", ["match", "rejection"])
def test_with_one_hot_drafts_both_rules_accept_by_the_same_law(rule: str) -> None:
    """With DFlash's argmax drafts (q one-hot) the two rules coincide in law: ``match`` accepts
    x when the target's sample is x (probability p(x)) and then emits a sample of p given "not
    x"; ``rejection`` accepts with min(1, p(x) / 1) = p(x) and then emits from normalize(p - q),
    which is p without x. So the accepted count is ``P(a >= 1) = p0(d1)``,
    ``P(a >= 2) = p0(d1) p1(d2)`` under both, and an engine's acceptance can be compared with
    ours under either (the report still names the rule that ran)."""
    target, draft = world()
    d1 = int(draft[START].argmax())
    d2 = int(draft[d1].argmax())
    logits = target[torch.tensor([START, d1, d2])].expand(RUNS, BLOCK, V)
    drafts = torch.tensor([d1, d2]).expand(RUNS, BLOCK - 1)
    p = processed_probs(target, 1.0).double()
    law = [1 - p[START, d1], p[START, d1] * (1 - p[d1, d2]), p[START, d1] * p[d1, d2]]
    res = verify(rule, logits, drafts, 1.0, generator=make_generator(2))
    counts = torch.bincount(res.accepted, minlength=BLOCK)
    assert chi_square_gof(counts.tolist(), [float(x) for x in law]).p_value >= ALPHA


def test_shapes_are_checked() -> None:
    with pytest.raises(ValueError, match="want target_logits"):
        verify_match(torch.zeros(2, 3, V), torch.zeros(2, 3, dtype=torch.long), 1.0)
    with pytest.raises(ValueError, match="unknown verification rule"):
        verify("typical", torch.zeros(2, 3, V), torch.zeros(2, 2, dtype=torch.long), 1.0)
