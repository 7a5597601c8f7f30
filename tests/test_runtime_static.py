"""The static decoding path (runtime/static.py) against the generic one, and what makes it fast:
padded blocks and contexts that change nothing, one host read per step, fused projections,
no torch._dynamo at load."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import tiny_models as tm
from conftest import ROOT
from dflash_ckpt.runtime.generate import decode
from loop_oracles import dflash_decode, static_dflash, teacher_forced
from dflash_ckpt.runtime.static import StaticRunner, supports_static

PROMPT = [1, 87, 85, 263, 201, 74, 75, 2, 1, 30, 40, 50, 60]

pytestmark = pytest.mark.usefixtures("one_thread")


def oracle(full: list[int], corrupt: float, seed: int):
    rng = random.Random(seed)

    def propose(start: int, anchor: int, k: int) -> list[int]:
        assert anchor == full[start]
        out = []
        for j in range(k):
            tok = full[start + 1 + j] if start + 1 + j < len(full) else 0
            out.append((tok + 1) % tm.VOCAB if rng.random() < corrupt else tok)
        return out

    return propose


@pytest.mark.slow
@pytest.mark.parametrize("block", [2, 5, 8, 16])
def test_static_padded_loop_gives_the_generic_tokens_and_acceptance(fp32, block: int) -> None:
    """Fixed-width verification (last block padded), block-wide padded draft contexts and
    device-side acceptance: the same tokens, acceptance lengths and pass counts as the generic
    loop, with the real draft and with proposals of every quality."""
    target, draft, tc, dc = fp32
    runner = StaticRunner(target, draft, 256, block_size=block)
    n = 61  # not a multiple of any block: the last block is padded
    ref = decode(target, PROMPT, max_new_tokens=n, cache=tc)
    assert runner.decode(PROMPT, max_new_tokens=n).tokens == ref.tokens
    generic = dflash_decode(target, draft, PROMPT, max_new_tokens=n, target_cache=tc, draft_cache=dc, block_size=block)
    static = runner.dflash(PROMPT, max_new_tokens=n)
    assert static.tokens == generic.tokens == ref.tokens
    assert static.acceptance_lengths == generic.acceptance_lengths
    assert (static.target_forwards, static.draft_forwards) == (generic.target_forwards, generic.draft_forwards)
    full = PROMPT + ref.tokens
    for corrupt in (0.0, 0.2, 1.0):
        g = dflash_decode(target, draft, PROMPT, max_new_tokens=n, target_cache=tc, draft_cache=dc, block_size=block,
                          proposer=oracle(full, corrupt, 3))
        s = static_dflash(runner, PROMPT, max_new_tokens=n, proposer=oracle(full, corrupt, 3))
        assert s.tokens == g.tokens == ref.tokens
        assert s.acceptance_lengths == g.acceptance_lengths
        if corrupt == 0.0:
            assert s.acceptance_lengths[:-1] == [block] * (len(s.acceptance_lengths) - 1)


def test_static_loop_stops_where_the_generic_one_does(fp32) -> None:
    target, draft, tc, dc = fp32
    runner = StaticRunner(target, draft, 256, block_size=draft.args.block_size)
    free = decode(target, PROMPT, max_new_tokens=60, cache=tc).tokens
    stop = free[17]
    full = PROMPT + free
    ref = runner.decode(PROMPT, max_new_tokens=60, stop_ids=[stop])
    assert ref.tokens == free[: free.index(stop) + 1] and ref.stopped
    for proposer in (None, oracle(full, 0.0, 0)):
        got = static_dflash(runner, PROMPT, max_new_tokens=60, stop_ids=[stop], proposer=proposer)
        assert got.tokens == ref.tokens and got.stopped
    one = runner.dflash(PROMPT, max_new_tokens=1)
    assert one.tokens == free[:1] and one.acceptance_lengths == [] and one.target_forwards == 1


def test_padded_draft_context_is_invisible(fp32) -> None:
    """A context padded with garbage rows to the block width gives the block the same hidden
    states as the unpadded context: padding is written, then overwritten by the block."""
    _, draft, _, _ = fp32
    g = torch.Generator().manual_seed(0)
    width = 3 * 64
    first, second = torch.randn(1, 9, width, generator=g), torch.randn(1, 3, width, generator=g)
    block = torch.randn(1, 8, 64, generator=g)
    with torch.inference_mode():
        cache = draft.new_cache(64)
        draft.forward(first, block, cache=cache)
        want = draft.forward(second, block, cache=cache)
        static = draft.new_cache(64)
        pos = torch.arange(8)
        draft.forward_static(draft.fuse(first), block, torch.arange(9), 9 + pos, static)
        padded = torch.cat([second, 100 * torch.randn(1, 5, width, generator=g)], dim=1)
        got = draft.forward_static(draft.fuse(padded), block, 9 + pos, 12 + pos, static)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_one_host_read_per_step(fp32, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every device-to-host read goes through these methods; a DFlash step makes one (the
    prefill one more), a target-only token one."""
    target, draft, _, _ = fp32
    runner = StaticRunner(target, draft, 256, block_size=draft.args.block_size)
    reads = {"n": 0}
    for name in ("tolist", "item", "__bool__", "__int__", "__float__"):
        real = getattr(torch.Tensor, name)

        def counted(self, *a, _real=real, **k):
            reads["n"] += 1
            return _real(self, *a, **k)

        monkeypatch.setattr(torch.Tensor, name, counted)
    got = runner.dflash(PROMPT, max_new_tokens=40)
    assert reads["n"] == 1 + len(got.acceptance_lengths)
    reads["n"] = 0
    ref = runner.decode(PROMPT, max_new_tokens=40)
    assert reads["n"] == len(ref.tokens)


def test_teacher_forced_check_equals_decoding(fp32) -> None:
    target, draft, tc, _ = fp32
    runner = StaticRunner(target, draft, 256, block_size=draft.args.block_size)
    ref = decode(target, PROMPT, max_new_tokens=50, cache=tc, top2=True)
    for kw in ({"cache": tc}, {"forward_all": runner.forward_all}):
        argmax, values, ids = teacher_forced(target, PROMPT, ref.tokens, **kw)
        assert argmax == ref.tokens
        assert [i[0] for i in ids] == ref.tokens
        torch.testing.assert_close(torch.tensor(values), torch.tensor(ref.top2_values), rtol=1e-4, atol=1e-4)
    wrong = list(ref.tokens)
    wrong[7] = (wrong[7] + 1) % tm.VOCAB
    argmax, _, _ = teacher_forced(target, PROMPT, wrong, forward_all=runner.forward_all)
    assert argmax[:8] == ref.tokens[:8]  # the target's choice at the corrupted position is the real one


def test_cuda_graphs_are_refused_off_cuda_and_native_targets_only(fp32) -> None:
    target, draft, _, _ = fp32
    assert supports_static(target, draft) and not supports_static(object())
    from dflash_ckpt.runtime.draft import DFlashDraft

    class Picker(DFlashDraft):  # only the token choice changes: the static path still applies
        def pick_tokens(self, hidden, head_w, anchor):  # type: ignore[no-untyped-def]
            return super().pick_tokens(hidden, head_w, anchor)

    class Reshaped(DFlashDraft):  # its own forward and no forward_static: generic only
        def forward_fused(self, *a, **k):  # type: ignore[no-untyped-def]
            return super().forward_fused(*a, **k)

    for cls, want in ((Picker, True), (Reshaped, False)):
        other = cls.__new__(cls)
        other.__dict__.update(draft.__dict__)
        assert supports_static(target, other) is want, cls
    with pytest.raises(ValueError, match="CUDA"):
        StaticRunner(target, draft, 64, graphs=True, block_size=draft.args.block_size)


def test_projections_are_fused_without_a_second_copy(fp32) -> None:
    target, draft, _, _ = fp32
    attn, mlp = target.layers[0].self_attn, target.layers[0].mlp
    assert attn.qkv is not None and attn.q_proj.weight.data_ptr() == attn.qkv.data_ptr()
    assert mlp.up_proj.weight.data_ptr() == mlp.gate_up[mlp.gate_proj.weight.shape[0]:].data_ptr()
    assert draft.layers[0].self_attn.k_proj.weight.data_ptr() == draft.layers[0].self_attn.kv.data_ptr()
    assert not any(k.endswith(("qkv", "gate_up", ".kv")) for k in target.state_dict())
    ids = torch.tensor([PROMPT])
    with torch.inference_mode():
        fused = target(ids, taps=[1]).logits
    plain = target(ids, taps=[1]).logits  # grad mode with trainable weights: the separate projections
    torch.testing.assert_close(plain.detach(), fused, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_loading_does_not_import_dynamo(pair: tuple[Path, Path]) -> None:
    """torch._dynamo costs about a second and 70 MB; building modules on the meta device used
    to import it (nn.Embedding's random init)."""
    code = (
        "import sys; from pathlib import Path; sys.path.insert(0, 'tests'); import tiny_models as tm, torch; "
        f"t, d = tm.load_runtime_pair(Path({str(pair[0])!r}), Path({str(pair[1])!r}), draft_dtype='bfloat16'); "
        "from dflash_ckpt.runtime.static import StaticRunner; "
        "StaticRunner(t, d, 64, block_size=d.args.block_size).dflash([1, 2, 3], max_new_tokens=12); "
        "sys.exit(3 if 'torch._dynamo' in sys.modules else 0)"
    )
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT).returncode == 0


@pytest.mark.parametrize("mask_shape", [(5, 11), (1, 11), (1, 1, 5, 11)])
def test_folded_grouped_query_attention_equals_expanded_keys(mask_shape: tuple[int, ...]) -> None:
    """The CUDA static path folds each KV group's queries into one axis (no K/V copy, plain
    SDPA for graph capture); on any device it must equal attention over expanded K/V."""
    from dflash_ckpt.runtime.layers import folded_gqa_attention

    g = torch.Generator().manual_seed(0)
    q, k, v = torch.randn(1, 8, 5, 4, generator=g), torch.randn(1, 2, 11, 4, generator=g), torch.randn(1, 2, 11, 4, generator=g)
    mask = torch.rand(mask_shape, generator=g) > 0.4
    mask[..., 0] = True
    want = torch.nn.functional.scaled_dot_product_attention(
        q, k.repeat_interleave(4, 1), v.repeat_interleave(4, 1), attn_mask=mask, scale=0.5)
    torch.testing.assert_close(folded_gqa_attention(q.transpose(1, 2).contiguous().transpose(1, 2), k, v, mask, 0.5), want)


def test_steps_are_capturable_no_host_values_no_dynamic_shapes(fp32) -> None:
    """What CUDA graph capture needs, checked where it can be on a CPU: the three step
    functions dispatch no op that reads a value to the host or sizes its output by the data."""
    from torch.utils._python_dispatch import TorchDispatchMode

    target, draft, _, _ = fp32
    runner = StaticRunner(target, draft, 128, block_size=draft.args.block_size)
    seen: set[str] = set()

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            seen.add(func.name())
            return func(*args, **(kwargs or {}))

    with torch.inference_mode():
        runner._prefill(PROMPT, runner.taps)
        runner.t_pos.fill_(len(PROMPT))
        with Record():
            for step in runner.steps.values():
                for span in runner.spans:  # every span bucket a graph is captured for
                    step(span)
    banned = {"aten::_local_scalar_dense", "aten::item", "aten::nonzero", "aten::masked_select", "aten::unique",
              "aten::_unique2", "aten::is_nonzero", "aten::repeat_interleave"}
    assert "aten::index_copy_" in seen and "aten::scaled_dot_product_attention" in seen
    assert not seen & banned, seen & banned
