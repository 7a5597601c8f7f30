"""probe-taps' search: exhaustive where small, a local search that finds planted taps where not.

The deep test builds, at test time, a random 32-layer target (the real runtime's ``TargetModel``)
and a draft whose proposals are right exactly as far as the tap layers it is fed are the planted
ones: block position i is drafted correctly when at least ``ceil(i * k / (B-1))`` of its k
feature slices equal the planted layers' outputs at that position, so tau grows with every
planted layer found and is highest only for the planted set. It speaks the public draft protocol,
so ``runtime.probe.measure`` and ``generate.dflash_decode`` both run it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

import tiny_models as tm
from dflash_ckpt.run.probe_search import DEFAULT_SEARCH_BUDGET, EXHAUSTIVE_MAX, Measured, search_taps, valid
from dflash_ckpt.runtime.eager_dflash import dflash_decode
from dflash_ckpt.runtime.probe import measure, reading_taps, record
from dflash_ckpt.draftspec.layout import BlockLayout, resolve_layout

pytestmark = pytest.mark.usefixtures("one_thread")

DEPTH, PLANTED, BLOCK = 32, (4, 13, 21, 27), 8
MASK = tm.MASK_ID


# -- pure search -------------------------------------------------------------------------------


def test_small_spaces_are_measured_exhaustively_once_each() -> None:
    seen: list[tuple[int, ...]] = []

    def score(ids: tuple[int, ...], floor: float | None = None) -> float:
        seen.append(ids)
        return -sum(abs(a - b) for a, b in zip(ids, (1, 3, 5)))

    res = search_taps(8, 3, score, configured=(2, 4, 6))
    assert res.method == "exhaustive" and res.space == math.comb(8, 3) <= EXHAUSTIVE_MAX
    assert seen[0] == (2, 4, 6), "the configured ids are measured first"
    assert len(seen) == len(set(seen)) == res.evaluated == 56
    assert res.ranked()[0] == ((1, 3, 5), 0)


def test_budget_caps_the_candidates_and_every_candidate_is_valid() -> None:
    seen: list[tuple[int, ...]] = []

    def score(ids: tuple[int, ...], floor: float | None = None) -> float:
        seen.append(ids)
        return float(sum(ids))

    res = search_taps(36, 5, score, budget=50)
    assert res.method == "search" and res.budget_exhausted and res.evaluated == len(seen) == 50
    assert all(valid(ids, 36) and len(ids) == 5 for ids in seen)
    res = search_taps(8, 3, score, budget=10)  # a small space, but the budget rules
    assert res.method == "search" and res.evaluated <= 10


def test_without_a_budget_a_search_stops_at_its_default() -> None:
    res = search_taps(40, 6, lambda ids, floor: float(hash(ids) % 997))
    assert res.method == "search" and res.evaluated <= DEFAULT_SEARCH_BUDGET


# -- a deep synthetic pair ---------------------------------------------------------------------


@dataclass(frozen=True)
class SynthArgs:
    block_size: int
    mask_token_id: int
    target_layer_ids: tuple[int, ...]
    block_layout: BlockLayout = resolve_layout({})  # 1+N, as the probe's DFlash loop reads it


class _Cache:
    def __init__(self) -> None:
        self.length = 0

    def reset(self) -> None:
        self.length = 0


class PlantedDraft:
    """Drafts the true continuation as far as its features come from the planted layers."""

    def __init__(self, truth: dict[tuple[int, ...], tuple[list[int], torch.Tensor]], hidden: int, vocab: int) -> None:
        # prompt -> (prompt + continuation, features of every layer along it [n, depth, H])
        self.truth, self.hidden, self.vocab = truth, hidden, vocab
        self.args = SynthArgs(BLOCK, MASK, PLANTED)
        self.device = torch.device("cpu")
        self.calls = 0
        #: The sequence being decoded (found on the first call after a reset).
        self.current: tuple[list[int], torch.Tensor] = next(iter(truth.values()))

    def new_cache(self, capacity: int) -> _Cache:
        return _Cache()

    def fuse(self, features: torch.Tensor) -> torch.Tensor:
        return features.float()

    def embed(self, ids: torch.Tensor, embed_w: torch.Tensor) -> torch.Tensor:
        return ids.clone()

    def forward_fused(self, fused: torch.Tensor, block: torch.Tensor, *, cache: _Cache) -> torch.Tensor:
        self.calls += 1
        if cache.length == 0:  # a new decode: which prompt, from its first position's features
            first = fused[0, 0].view(-1, self.hidden)[0]
            self.current = next(v for v in self.truth.values()
                                if any(torch.allclose(first, f, rtol=1e-4, atol=1e-4) for f in v[1][0]))
        pos = cache.length + fused.shape[1] - 1  # the last context position
        cache.length += fused.shape[1]
        seq, feats = self.current
        slices = fused[0, -1].view(-1, self.hidden)
        matches = sum(bool(torch.allclose(slices[j], feats[pos, layer], rtol=1e-4, atol=1e-4)) for j, layer in enumerate(PLANTED))
        out = block.clone()
        k = len(PLANTED)
        for i in range(1, block.shape[1]):
            good = matches >= math.ceil(i * k / (BLOCK - 1)) and pos + 1 + i < len(seq)
            true = seq[pos + 1 + i] if pos + 1 + i < len(seq) else 0
            out[0, i] = true if good else (true + 1) % self.vocab
        return out

    def logits(self, hidden: torch.Tensor, head_w: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.one_hot(hidden, self.vocab).float()

    def pick_tokens(self, hidden: torch.Tensor, head_w: torch.Tensor, anchor: torch.Tensor) -> torch.Tensor:
        return self.logits(hidden, head_w).argmax(dim=-1)


@pytest.fixture(scope="module")
def deep(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tm.make_target(tmp_path_factory.mktemp("deep") / "target", layers=DEPTH, hidden=32, heads=2, kv_heads=1,
                            head_dim=16, intermediate=64, seed=3, tokenizer=False)
    target = tm.load_target_only(folder)
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(5, 300, (12,), generator=gen).tolist() for _ in range(2)]
    n = 40
    cache = target.new_cache(64 + n + BLOCK)
    recs = [record(target, p, depth=DEPTH, max_new_tokens=n, cache=cache) for p in prompts]
    hidden = recs[0].hidden_size
    truth = {tuple(p): (p + r.tokens, r.features[0].view(-1, DEPTH, hidden)) for p, r in zip(prompts, recs)}
    draft = PlantedDraft(truth, hidden, target.args.dims.vocab_size)
    return {"target": target, "draft": draft, "recs": recs, "prompts": prompts, "cache": cache, "truth": truth}


def _measure(deep: dict[str, Any], ids: tuple[int, ...], floor: float | None = None) -> Any:
    """``runtime.probe.measure``, the evaluation probe-taps runs, on the deep pair."""
    target, draft = deep["target"], deep["draft"]
    return measure(draft, deep["recs"], ids, floor=floor, embed_w=target.embed_tokens.weight,
                   head_w=target.lm_head.weight, draft_cache=draft.new_cache(0), block_size=BLOCK)


def test_simulated_tau_is_what_the_dflash_loop_measures(deep: dict[str, Any]) -> None:
    target, draft = deep["target"], deep["draft"]
    for ids in (PLANTED, (4, 13, 22, 27), (0, 1, 2, 3)):
        lengths: list[int] = []
        with reading_taps(draft, ids):
            for p in deep["prompts"]:
                gen = dflash_decode(target, draft, p, max_new_tokens=40, target_cache=deep["cache"],
                                    draft_cache=draft.new_cache(0), block_size=BLOCK)
                assert gen.tokens == deep["truth"][tuple(p)][0][len(p):]
                lengths += gen.acceptance_lengths
        m = _measure(deep, ids)
        assert m.exact and m.tau == pytest.approx(sum(lengths) / len(lengths), abs=1e-12), ids
    assert draft.args.target_layer_ids == PLANTED, "reading_taps restores the draft's ids"


@pytest.mark.slow
def test_search_finds_the_planted_taps_far_below_the_exhaustive_count(deep: dict[str, Any]) -> None:
    space = math.comb(DEPTH, len(PLANTED))
    calls = {"n": 0}

    def evaluate(ids: tuple[int, ...], floor: float | None) -> Measured:
        m = _measure(deep, ids, floor)
        calls["n"] += m.draft_forwards
        return Measured(m.tau, m.exact)

    res = search_taps(DEPTH, len(PLANTED), evaluate, seed=1)
    best, tau = res.ranked()[0]
    print(f"planted {PLANTED}: found {best} at tau {tau:.2f} after {res.evaluated} of {space} candidates "
          f"({len(res.bounds)} given up early) from {len(res.starts)} starts, {calls['n']} draft calls, "
          f"{res.seconds:.1f} s")
    assert res.method == "search"
    assert best == PLANTED and tau == max(res.scores.values()) == _measure(deep, PLANTED).tau
    assert tau > 5 and res.ranked()[1][1] < tau
    assert res.evaluated <= DEFAULT_SEARCH_BUDGET < space / 50
    # Giving up on losers changes no decision: the same climb measured in full ends the same.
    full = search_taps(DEPTH, len(PLANTED), lambda ids, floor: _measure(deep, ids).tau, seed=1)
    assert full.ranked()[0] == (best, tau) and full.starts == res.starts
    assert res.bounds and all(b <= tau for b in res.bounds.values())


def test_a_bound_is_below_the_floor_and_the_tau_it_bounds(deep: dict[str, Any]) -> None:
    for ids in ((0, 1, 2, 3), (4, 13, 22, 26)):
        exact = _measure(deep, ids)
        cut = _measure(deep, ids, floor=exact.tau + 0.5)
        assert not cut.exact and exact.tau < cut.tau < exact.tau + 0.5
        assert cut.draft_forwards < exact.draft_forwards
        again = _measure(deep, ids, floor=exact.tau)  # reachable: measured in full
        assert again.exact and again.tau == exact.tau
