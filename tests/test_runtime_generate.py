"""Greedy decoding: DFlash reproduces target-only output whatever the draft proposes."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

import tiny_models as tm
from dflash_ckpt.runtime.generate import decode
from loop_oracles import dflash_decode

PROMPT = [1, 87, 85, 263, 201, 74, 75, 2, 1, 30, 40, 50, 60]


pytestmark = pytest.mark.usefixtures("one_thread")


def reference(fp32, n: int = 120, prompt: list[int] = PROMPT, stops: tuple[int, ...] = ()):
    target, _, tc, _ = fp32
    return decode(target, prompt, max_new_tokens=n, cache=tc, stop_ids=stops, top2=True)


def test_random_draft_output_equals_target_only(fp32) -> None:
    target, draft, tc, dc = fp32
    ref = reference(fp32)
    got = dflash_decode(target, draft, PROMPT, max_new_tokens=120, target_cache=tc, draft_cache=dc, block_size=draft.args.block_size)
    assert got.tokens == ref.tokens and len(got.tokens) == 120
    assert len(set(ref.tokens)) > 20  # a varied continuation, not a repeated token
    assert got.overflow is None
    assert got.draft_forwards == len(got.acceptance_lengths) - 1  # the last step has one token left: no draft
    assert sum(got.acceptance_lengths) + 1 == len(got.tokens)  # the first token comes from prefill
    assert got.target_forwards == 1 + len(got.acceptance_lengths)
    assert ref.target_forwards == 120
    assert min(v[0] - v[1] for v in ref.top2_values) > 1e-3  # the comparison is not decided by ties


@pytest.mark.parametrize("corrupt", [0.0, 0.05, 0.3, 1.0])
def test_any_proposal_gives_the_target_output(fp32, corrupt: float) -> None:
    """An oracle proposer with a share of wrong tokens: acceptance varies, the output does not."""
    target, draft, tc, dc = fp32
    ref = reference(fp32)
    full = PROMPT + ref.tokens
    rng = random.Random(int(corrupt * 100))

    def proposer(start: int, anchor: int, k: int) -> list[int]:
        assert anchor == full[start]  # the block's anchor is the last accepted token, at its position
        out = []
        for j in range(k):
            tok = full[start + 1 + j] if start + 1 + j < len(full) else 0
            out.append((tok + 1) % tm.VOCAB if rng.random() < corrupt else tok)
        return out

    got = dflash_decode(target, draft, PROMPT, max_new_tokens=120, target_cache=tc, draft_cache=dc, proposer=proposer, block_size=draft.args.block_size)
    assert got.tokens == ref.tokens
    lengths = got.acceptance_lengths
    block = draft.args.block_size
    assert all(1 <= n <= block for n in lengths)
    if corrupt == 0.0:
        assert lengths[:-1] == [block] * (len(lengths) - 1)  # every draft accepted
        assert got.target_forwards == 1 + len(lengths) == 1 + -(-119 // block)
    if corrupt == 1.0:
        assert set(lengths) == {1}


def test_stop_tokens_end_both_decoders_at_the_same_place(fp32) -> None:
    target, draft, tc, dc = fp32
    free = reference(fp32, 60).tokens
    stop = free[17]
    first = free.index(stop)
    ref = reference(fp32, 60, stops=(stop,))
    assert ref.tokens == free[: first + 1] and ref.stopped
    full = PROMPT + free

    def oracle(start: int, anchor: int, k: int) -> list[int]:
        return [full[start + 1 + j] if start + 1 + j < len(full) else 0 for j in range(k)]

    for proposer in (None, oracle):
        got = dflash_decode(target, draft, PROMPT, max_new_tokens=60, target_cache=tc, draft_cache=dc,
                            stop_ids=[stop], proposer=proposer, block_size=draft.args.block_size)
        assert got.tokens == ref.tokens and got.stopped


def test_token_budget_is_exact_and_block_size_can_be_overridden(fp32) -> None:
    target, draft, tc, dc = fp32
    ref = reference(fp32, 13)
    full = PROMPT + ref.tokens

    def oracle(start: int, anchor: int, k: int) -> list[int]:
        return [full[start + 1 + j] for j in range(k)]

    for block in (2, 5, 8, 16):
        got = dflash_decode(target, draft, PROMPT, max_new_tokens=13, target_cache=tc, draft_cache=dc,
                            block_size=block, proposer=oracle)
        assert got.tokens == ref.tokens
        assert max(got.acceptance_lengths) <= block
    one = dflash_decode(target, draft, PROMPT, max_new_tokens=1, target_cache=tc, draft_cache=dc, block_size=draft.args.block_size)
    assert one.tokens == ref.tokens[:1] and one.acceptance_lengths == [] and one.target_forwards == 1


def test_bf16_draft_runs_against_fp16_target(pair: tuple[Path, Path]) -> None:
    target, draft = tm.load_runtime_pair(*pair, draft_dtype="bfloat16", target_dtype="float16")
    assert target.dtype == torch.float16 and draft.dtype == torch.bfloat16
    tc, dc = target.new_cache(256), draft.new_cache(256)
    ref = decode(target, PROMPT, max_new_tokens=40, cache=tc, top2=True)
    got = dflash_decode(target, draft, PROMPT, max_new_tokens=40, target_cache=tc, draft_cache=dc, block_size=draft.args.block_size)
    assert got.overflow is None and ref.overflow is None
    from dflash_ckpt.runtime.measure import TIE_TOLERANCE
    from loop_oracles import compare_outputs

    verdict = compare_outputs(ref.tokens, got.tokens, ref.top2_values, ref.top2_ids, TIE_TOLERANCE[torch.float16])
    assert verdict.status in ("identical", "tie")


def test_overflow_in_the_fused_features_is_detected(tmp_path: Path) -> None:
    """Qwen3-like outliers (20000, finite in fp16) summed by fc overflow an fp16 draft; bf16 holds."""
    target_dir = tm.make_target(tmp_path / "t", dtype="float16", outlier=[(0, 20000.0), (4, -20000.0)], tokenizer=False)
    draft_dir = tm.make_draft(tmp_path / "d", fc_outlier=(5, 2.0))
    for draft_dtype, want in (("float16", "fused features"), ("bfloat16", None)):
        target, draft = tm.load_runtime_pair(draft_dir, target_dir, draft_dtype=draft_dtype, target_dtype="float16")
        tc, dc = target.new_cache(128), draft.new_cache(128)
        got = dflash_decode(target, draft, PROMPT, max_new_tokens=20, target_cache=tc, draft_cache=dc, block_size=draft.args.block_size)
        assert got.overflow == want
        if want:
            assert got.tokens == got.tokens[:1]  # stopped at the first draft call, no garbage drafted on
        else:
            assert got.tokens == decode(target, PROMPT, max_new_tokens=20, cache=tc).tokens


def test_overflow_in_the_target_is_detected(tmp_path: Path) -> None:
    target_dir = tm.make_target(tmp_path / "t", dtype="float16", outlier=[(0, 40000.0), (1, 40000.0)], tokenizer=False)
    draft_dir = tm.make_draft(tmp_path / "d")
    target, draft = tm.load_runtime_pair(draft_dir, target_dir, draft_dtype="bfloat16", target_dtype="float16")
    tc, dc = target.new_cache(128), draft.new_cache(128)
    assert dflash_decode(target, draft, PROMPT, max_new_tokens=10, target_cache=tc, draft_cache=dc, block_size=draft.args.block_size).overflow == "tapped features"
    ref = decode(target, PROMPT, max_new_tokens=10, cache=tc)
    assert ref.overflow == "logits" and ref.tokens == []
    # The same weights in float32 do not overflow.
    target32, draft32 = tm.load_runtime_pair(draft_dir, target_dir, draft_dtype="bfloat16", target_dtype="float32")
    ok = dflash_decode(target32, draft32, PROMPT, max_new_tokens=10, target_cache=target32.new_cache(64),
                       draft_cache=draft32.new_cache(64), block_size=draft32.args.block_size)
    assert ok.overflow is None and len(ok.tokens) == 10


def test_draft_sees_the_features_of_exactly_the_accepted_tokens(fp32, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run the real draft forward, but let its logits be right most of the time; the contexts
    it was given, concatenated, must be the target's tapped features of positions 0..start-1."""
    target, draft, tc, dc = fp32
    ref = reference(fp32, 80)
    full = PROMPT + ref.tokens
    rng = random.Random(5)
    contexts: list[torch.Tensor] = []
    starts: list[int] = []
    fuse, logits = draft.fuse, draft.logits

    def spy_fuse(features: torch.Tensor) -> torch.Tensor:
        contexts.append(features.clone())
        return fuse(features)

    def oracle_logits(hidden: torch.Tensor, head: torch.Tensor) -> torch.Tensor:
        start = dc.length  # the draft cache ends where the block starts
        starts.append(start)
        out = torch.zeros(1, hidden.shape[1], tm.VOCAB)
        for j in range(hidden.shape[1]):
            tok = full[start + 1 + j] if start + 1 + j < len(full) else 0
            out[0, j, (tok + 1) % tm.VOCAB if rng.random() < 0.15 else tok] = 1.0
        logits(hidden, head)  # the real head still runs
        return out

    monkeypatch.setattr(draft, "fuse", spy_fuse)
    monkeypatch.setattr(draft, "logits", oracle_logits)
    got = dflash_decode(target, draft, PROMPT, max_new_tokens=80, target_cache=tc, draft_cache=dc, block_size=draft.args.block_size)
    assert got.tokens == ref.tokens
    assert max(got.acceptance_lengths) > 3  # real acceptance happened
    seen = torch.cat(contexts, dim=1)
    with torch.no_grad():
        want = target(torch.tensor([full[: starts[-1]]]), taps=list(draft.args.target_layer_ids), logits="none").features
    assert seen.shape == want.shape
    torch.testing.assert_close(seen, want, rtol=1e-4, atol=1e-4)
    lengths = [c.shape[1] for c in contexts]
    assert lengths[0] == len(PROMPT) and lengths[1:] == got.acceptance_lengths[: len(lengths) - 1]


def test_top2_is_kept_only_when_asked(fp32) -> None:
    """A measured decode keeps its tokens only; the self-check and the oracles ask for the top-2."""
    target, _, tc, _ = fp32
    plain = decode(target, PROMPT, max_new_tokens=8, cache=tc)
    asked = decode(target, PROMPT, max_new_tokens=8, cache=tc, top2=True)
    assert plain.tokens == asked.tokens and plain.top2_values == plain.top2_ids == []
    assert [ids[0] for ids in asked.top2_ids] == asked.tokens and len(asked.top2_values) == 8
