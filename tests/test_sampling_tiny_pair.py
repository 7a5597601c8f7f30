"""Lossless under sampling on the committed tiny pair's target (fixtures/tiny-pair/target).

tests/test_sampling_lossless.py proves the rules on a bigram world; this runs them on a real
model's logits over its real 768-token vocabulary. For a fixed context ending in the anchor
``b``, the target verifies a block of drafts (its own greedy chain with the second draft replaced
by the runner-up, so that both slots reject often enough); a run that emitted only one token
``t1`` takes a second step from ``context + b + t1`` with the same draft tokens (any drafts will
do, and these cost no forward). The first two
emitted tokens must follow ``p(t1 | ctx) p(t2 | ctx, t1)``, the target's processed softmax, by
Pearson's chi-square at ``ALPHA`` = 1e-3 over 5,000 seeded runs (expected counts under 5
pooled). Any draft tokens are allowed: losslessness is a property of the verification rule,
whatever was drafted. Every forward is a teacher-forced pass of the target (one per block), on
logits in float32.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import tiny_models as tm  # noqa: E402
from chi_square import chi_square_gof  # noqa: E402
from dflash_ckpt.stats.confidence import ChiSquare  # noqa: E402
from dflash_ckpt.runtime.generate import teacher_forced_logits  # noqa: E402
from dflash_ckpt.runtime.sampling import (  # noqa: E402
    Verification, make_generator, processed_probs, verify_match, verify_rejection)

ROOT = Path(__file__).resolve().parents[1]
TARGET = ROOT / "fixtures" / "tiny-pair" / "target"
ALPHA = 1e-3
RUNS, BLOCK = 5_000, 3  # 5,000 runs over the real vocabulary: validity here, power in test_sampling_lossless
pytestmark = pytest.mark.usefixtures("one_thread")  # a tiny model: one thread is fastest
CONTEXT = [11, 42, 97, 300, 5, 77, 123, 64, 9]  # any fixed ids of the vocabulary; the last is b


@pytest.fixture(scope="module")
def target():
    return tm.load_target_only(TARGET)


def block_logits(target, prefix: list[int], drafts: list[int]) -> torch.Tensor:
    """The verify logits ``[BLOCK, V]`` of ``[b, d1..]`` after ``prefix`` (which ends with b)."""
    return teacher_forced_logits(target, prefix, [*drafts, 0]).float()


def drafts_for(target, prefix: list[int]) -> list[int]:
    """The target's greedy chain after ``prefix``, its second token swapped for the runner-up.
    (top-k keeps the first token's support to about 20 tokens: one forward each.)"""
    chain: list[int] = []
    for k in range(BLOCK - 1):
        row = teacher_forced_logits(target, prefix + chain, [0]).float()[0]
        chain.append(int(row.topk(2).indices[1 if k == 1 else 0]))
    return chain


def two_token_gof(target, rule: Callable[..., Verification], temperature: float, top_p: float, top_k: int) -> ChiSquare:
    """The chi-square of the first two emitted tokens against the target (module docstring)."""
    gen = make_generator(17)
    drafts = drafts_for(target, CONTEXT)
    first = block_logits(target, CONTEXT, drafts)
    res = rule(first.expand(RUNS, BLOCK, -1), torch.tensor(drafts).expand(RUNS, BLOCK - 1),
                 temperature, top_p, top_k, gen)
    t1, t2 = res.tokens[:, 0].clone(), res.tokens[:, 1].clone()  # t2 is PAD where one token came out
    p1 = processed_probs(first[0], temperature, top_p, top_k).double()
    # the cells: every t1 worth a count (p1 * RUNS >= 1) by every t2, and one cell for the rest
    support = [int(v) for v in torch.nonzero(p1 * RUNS >= 1).flatten()]
    cond: dict[int, torch.Tensor] = {}
    for v in support:
        if v == drafts[0]:  # t1 = d1 was accepted: t2 came from row 1 of the same block
            cond[v] = processed_probs(first[1], temperature, top_p, top_k).double()
            continue
        nxt = drafts
        second = block_logits(target, [*CONTEXT, v], nxt)
        cond[v] = processed_probs(second[0], temperature, top_p, top_k).double()
        rows = torch.nonzero((t1 == v) & (t2 < 0)).flatten()
        if len(rows):
            again = rule(second.expand(len(rows), BLOCK, -1), torch.tensor(nxt).expand(len(rows), BLOCK - 1),
                           temperature, top_p, top_k, gen)
            t2[rows] = again.tokens[:, 0]
    vocab = p1.shape[0]
    index = {v: i for i, v in enumerate(support)}
    probs = torch.cat([torch.stack([p1[v] * cond[v] for v in support]).flatten(),
                       (1 - p1[support].sum()).reshape(1).clamp_min(0)])
    counts = torch.zeros(len(support) * vocab + 1, dtype=torch.long)
    for v, i in index.items():
        counts[i * vocab: (i + 1) * vocab] = torch.bincount(t2[t1 == v], minlength=vocab)
    counts[-1] = int(sum(int((t1 == v).sum()) for v in range(vocab) if v not in index))
    assert bool((t2 >= 0).all())
    return chi_square_gof(counts.tolist(), probs.tolist())


@pytest.mark.parametrize("rule", [verify_match, verify_rejection])
@pytest.mark.parametrize(("temperature", "top_p", "top_k"), [(1.0, 1.0, 20), (0.8, 0.95, 40)])
def test_two_tokens_follow_the_tiny_target(target, rule: Callable[..., Verification], temperature: float, top_p: float,
                                           top_k: int) -> None:
    got = two_token_gof(target, rule, temperature, top_p, top_k)
    assert got.cells > 20, got
    assert got.p_value >= ALPHA, got


def test_a_biased_verifier_fails_on_the_tiny_target_too(target) -> None:
    """Accepting drafts with min(1, 1.5 p) instead of p: the same check rejects it."""
    from test_sampling_lossless import _biased_rejection

    assert two_token_gof(target, _biased_rejection(1.5, False), 1.0, 1.0, 20).p_value < ALPHA
