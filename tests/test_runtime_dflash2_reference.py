"""The DFlash2 draft against a float64 transcription of its published semantics.

``naive_forward`` and ``naive_select`` below are written from docs/DESIGN.md sections 1, 6 and 9
(and the z-lab / vLLM sources they summarise) with loops over positions, taps, groups and
candidates, reading the safetensors file directly: none of ``dflash_ckpt.runtime`` is used, so a
mistake in the runtime cannot be mirrored here.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

import tiny_models as tm
from conftest import no_traceback, run_cli
from dflash_ckpt.errors import InputError
from dflash_ckpt.draftspec.draft_settings import DraftSettings
from dflash_ckpt.sources.local import LocalSource
from dflash_ckpt.draftspec.specs import read_draft_spec as read_draft

H = 64

pytestmark = pytest.mark.usefixtures("one_thread")


# -- the float64 reference -------------------------------------------------------------------------


def _weights(folder: Path) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    cfg = json.loads((folder / "config.json").read_text())
    return cfg, {k: v.double() for k, v in load_file(str(folder / "model.safetensors")).items()}


def naive_conv(x: torch.Tensor, coeffs: torch.Tensor, base: torch.Tensor, group: int, starts: list[int]) -> torch.Tensor:
    """``out[t, c] = sum_j (base[j, c] + coeffs[t, j, c // group]) * x[t - j, c]``, the term
    dropped when ``t - j`` is before the start of ``t``'s block (``starts``: block first rows)."""
    n, h = x.shape
    out = torch.zeros_like(x)
    for t in range(n):
        first = max(s for s in starts if s <= t)
        for j in range(base.shape[0]):
            if t - j < first:
                continue
            for c in range(h):
                out[t, c] += (base[j, c] + coeffs[t, j, c // group]) * x[t - j, c]
    return out


def naive_forward(folder: Path, feats: torch.Tensor, block: torch.Tensor, ctx_pos: torch.Tensor, blk_pos: torch.Tensor,
                  starts: list[int] | None = None, mask: torch.Tensor | None = None) -> torch.Tensor:
    """A DFlash2 draft's final hidden states: v1's layer (fused context as extra keys/values,
    k_norm on both, RoPE at absolute positions) with each sublayer between the two sides of its
    conv, whose coefficients come from the sublayer's normalised input."""
    cfg, w = _weights(folder)
    dc = cfg["dflash_config"]
    ks, g = dc["conv_kernel_size"], dc["conv_group_size"]
    starts = starts or [0]
    nh, nkv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    freq = torch.tensor([1.0 / cfg["rope_theta"] ** (i / hd) for i in range(0, hd, 2)], dtype=torch.float64)
    fused = tm.ref_rms(feats.double() @ w["fc.weight"].T, w["hidden_norm.weight"])
    c, n = fused.shape[0], block.shape[0]
    kpos = torch.cat([ctx_pos, blk_pos])
    h = block.double()

    def conv_pair(p: str, x: torch.Tensor, sublayer: Any) -> torch.Tensor:
        d = (x @ w[p + "kernel_projection.weight"].T).view(n, 2, ks, -1)
        inner = naive_conv(x, d[:, 0], w[p + "base_kernel"][0], g, starts)
        return naive_conv(sublayer(inner), d[:, 1], w[p + "base_kernel"][1], g, starts)

    for i, kind in enumerate(cfg["layer_types"]):
        p = f"layers.{i}."
        causal = cfg.get("is_causal") if cfg.get("is_causal") is not None else kind == "sliding_attention"
        window = cfg["sliding_window"] if kind == "sliding_attention" else None

        def attn(x: torch.Tensor) -> torch.Tensor:
            kv_in = torch.cat([fused, x])
            q = tm.ref_rms((x @ w[p + "self_attn.q_proj.weight"].T).view(n, nh, hd), w[p + "self_attn.q_norm.weight"])
            k = tm.ref_rms((kv_in @ w[p + "self_attn.k_proj.weight"].T).view(c + n, nkv, hd), w[p + "self_attn.k_norm.weight"])
            v = (kv_in @ w[p + "self_attn.v_proj.weight"].T).view(c + n, nkv, hd)
            heads = []
            for j in range(nh):
                grp = j // (nh // nkv)
                scores = tm.ref_rope(q[:, j], blk_pos, freq) @ tm.ref_rope(k[:, grp], kpos, freq).T / math.sqrt(hd)
                for a in range(n):
                    for b in range(c + n):
                        qp, kp = int(blk_pos[a]), int(kpos[b])
                        ok = (not causal or kp <= qp) and (window is None or (qp - kp < window and (causal or kp - qp < window)))
                        if not ok or (mask is not None and not mask[a, b]):
                            scores[a, b] = float("-inf")
                heads.append(torch.softmax(scores, -1) @ v[:, grp])
            return torch.cat(heads, -1) @ w[p + "self_attn.o_proj.weight"].T

        def mlp(y: torch.Tensor) -> torch.Tensor:
            gate, up = y @ w[p + "mlp.gate_proj.weight"].T, y @ w[p + "mlp.up_proj.weight"].T
            return (gate * torch.sigmoid(gate) * up) @ w[p + "mlp.down_proj.weight"].T

        h = h + conv_pair(p + "attention_conv.", tm.ref_rms(h, w[p + "input_layernorm.weight"]), attn)
        h = h + conv_pair(p + "mlp_conv.", tm.ref_rms(h, w[p + "post_attention_layernorm.weight"]), mlp)
    return tm.ref_rms(h, w["norm.weight"])


def naive_select(folder: Path, hidden: torch.Tensor, head: torch.Tensor, anchor: int) -> tuple[list[int], list[list[float]]]:
    """Greedy left to right: at each position the top-k logits, each scored ``logit +
    sum_r pred[prev, r] * proj[r] * succ[cand, r]``, the best kept (first in logit order on a
    tie); ``prev`` starts at the anchor. Returns the path and every position's scores."""
    cfg, w = _weights(folder)
    k = cfg["dflash_config"]["selector_top_k"]
    pred, succ = w["candidate_selector.predecessor_codebook"], w["candidate_selector.successor_codebook"]
    proj_w = w["candidate_selector.hidden_projection.weight"]
    prev, path, all_scores = anchor, [], []
    for t in range(hidden.shape[0]):
        logits = head.double() @ hidden[t].double()
        order = sorted(range(len(logits)), key=lambda v: -float(logits[v]))[:k]
        proj = proj_w @ hidden[t].double()
        scores = [float(logits[cand]) + sum(float(pred[prev, r] * proj[r] * succ[cand, r]) for r in range(len(proj)))
                  for cand in order]
        best = max(range(k), key=lambda i: (scores[i], -i))
        prev = order[best]
        path.append(prev)
        all_scores.append(scores)
    return path, all_scores


# -- helpers -------------------------------------------------------------------------------------


# -- forward ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["published-shape", "three-taps", "small-groups", "sliding"])
def test_forward_matches_the_float64_reference(tmp_path: Path, kind: str) -> None:
    kw: dict[str, Any] = {}
    if kind == "three-taps":
        kw = {"conv_kernel_size": 3}
    if kind == "small-groups":
        kw = {"conv_group_size": 4}
    if kind == "sliding":
        kw = {"layer_types": ["sliding_attention", "full_attention"], "sliding_window": 5}
    folder = tm.make_draft2(tmp_path / kind, store_dtype="float32", **kw)
    feats, block = tm.draft_inputs(9, 8)
    ctx_pos, blk_pos = torch.arange(9), torch.arange(9, 17)
    want = naive_forward(folder, feats, block, ctx_pos, blk_pos)
    got = tm.load_draft_only(folder)(feats[None], block[None])[0]
    torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-4)
    # the conv matters: the same weights without it (a v1 draft) give something else
    v1 = tm.make_draft(tmp_path / f"{kind}-v1", store_dtype="float32", **{k: v for k, v in kw.items() if "conv" not in k})
    assert not torch.allclose(tm.load_draft_only(v1)(feats[None], block[None])[0], got, atol=1e-2)


def test_bf16_draft_stays_close_to_the_reference(tmp_path: Path) -> None:
    folder = tm.make_draft2(tmp_path / "b", store_dtype="bfloat16")
    feats, block = tm.draft_inputs(7, 8, seed=2)
    want = naive_forward(folder, feats, block, torch.arange(7), torch.arange(7, 15))
    got = tm.load_draft_only(folder, torch.bfloat16)(feats[None], block[None].to(torch.bfloat16))[0]
    assert (got.double() - want).abs().max() < 0.1 * want.abs().max()


def test_conv_shift_is_zero_at_the_block_start(tmp_path: Path) -> None:
    """Block position 0 (the anchor) sees no earlier row through the conv: only attention
    reaches the context. With attention cut to the block itself, the anchor's output does not
    depend on the context at all, but position 1's depends on position 0 through the conv even
    in causal layers."""
    folder = tm.make_draft2(tmp_path / "z", store_dtype="float32",
                            layer_types=["sliding_attention"] * 2, sliding_window=64, extra_config={"is_causal": True})
    draft = tm.load_draft_only(folder)
    feats, block = tm.draft_inputs(6, 8, seed=4)
    only_block = torch.zeros(8, 14, dtype=torch.bool)
    only_block[:, 6:] = True
    base = draft(feats[None], block[None], attention_mask=only_block)[0]
    other = draft((feats * -2)[None], block[None], attention_mask=only_block)[0]
    torch.testing.assert_close(base, other)
    # causal attention and a causal conv: position 0 does not see position 1 ...
    changed = block.clone()
    changed[1] += 1.0
    out = draft(feats[None], changed[None])[0]
    torch.testing.assert_close(out[0], draft(feats[None], block[None])[0][0])
    # ... and the reference agrees on the whole block
    want = naive_forward(folder, feats, changed, torch.arange(6), torch.arange(6, 14))
    torch.testing.assert_close(out.double(), want, rtol=1e-4, atol=1e-4)


def test_training_layout_restarts_the_conv_at_each_anchor(tmp_path: Path) -> None:
    """Two anchors in one pass with ``block_len``: each block equals its own separate call, and
    equals the reference run on the packed layout (the conv restarting at each block start)."""
    folder = tm.make_draft2(tmp_path / "t", store_dtype="float32")
    draft = tm.load_draft_only(folder)
    feats, _ = tm.draft_inputs(10, 1, seed=7)
    g = torch.Generator().manual_seed(8)
    blocks = torch.randn(2, 8, H, generator=g)
    anchors = [4, 7]
    separate = [draft(feats[None, :a], blocks[i][None], block_positions=torch.arange(a, a + 8))[0]
                for i, a in enumerate(anchors)]
    ctx_pos = torch.arange(10)
    blk_pos = torch.cat([torch.arange(a, a + 8) for a in anchors])
    mask = torch.zeros(16, 26, dtype=torch.bool)
    for i, a in enumerate(anchors):
        rows = slice(8 * i, 8 * i + 8)
        mask[rows, :a] = True
        mask[rows, 10 + 8 * i: 10 + 8 * i + 8] = True
    joint = draft(feats[None], blocks.reshape(1, 16, H), context_positions=ctx_pos, block_positions=blk_pos,
                  attention_mask=mask, block_len=8)[0]
    torch.testing.assert_close(joint[:8], separate[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(joint[8:], separate[1], rtol=1e-5, atol=1e-5)
    want = naive_forward(folder, feats, blocks.reshape(16, H), ctx_pos, blk_pos, starts=[0, 8], mask=mask)
    torch.testing.assert_close(joint.double(), want, rtol=1e-4, atol=1e-4)
    # without block_len the second block's first row would read the first block's last one
    leaky = draft(feats[None], blocks.reshape(1, 16, H), context_positions=ctx_pos, block_positions=blk_pos,
                  attention_mask=mask)[0]
    assert not torch.allclose(leaky[8:], separate[1], atol=1e-3)


def test_cached_calls_equal_one_full_call(tmp_path: Path) -> None:
    """Context over three cached calls (cropped to the context each time) equals one full call."""
    folder = tm.make_draft2(tmp_path / "c", store_dtype="float32",
                            layer_types=["sliding_attention", "full_attention"], sliding_window=6)
    draft = tm.load_draft_only(folder)
    feats, block = tm.draft_inputs(14, 8, seed=3)
    cache = draft.new_cache(64)
    draft.forward_fused(draft.fuse(feats[None, :6]), block[None], cache=cache)
    assert cache.length == 6
    draft.forward_fused(draft.fuse(feats[None, 6:11]), (block * 0.5)[None], cache=cache)
    got = draft.forward_fused(draft.fuse(feats[None, 11:]), block[None], cache=cache)
    want = draft(feats[None], block[None])
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert cache.length == 14


def test_draft_is_differentiable(tmp_path: Path) -> None:
    draft = tm.load_draft_only(tm.make_draft2(tmp_path / "g", store_dtype="float32")).requires_grad_(True)
    feats, block = tm.draft_inputs(5, 8)
    hidden = draft(feats[None], block[None], block_len=8)
    logits = draft.logits(hidden, torch.randn(tm.VOCAB, H))
    sel = draft.candidate_selector
    unary, cand = sel.candidates(logits.detach())
    prev = torch.randint(tm.VOCAB, (1, 8))
    sel.scores(hidden, unary, cand, prev).logsumexp(-1).sum().backward()
    for name in ("layers.0.attention_conv.base_kernel", "layers.1.mlp_conv.kernel_projection.weight",
                 "candidate_selector.hidden_projection.weight", "candidate_selector.successor_codebook"):
        grad = dict(draft.named_parameters())[name].grad
        assert grad is not None and grad.abs().sum() > 0, name


# -- the selector ----------------------------------------------------------------------------------


def test_selector_matches_the_reference_and_is_not_the_argmax(tmp_path: Path) -> None:
    folder = tm.make_draft2(tmp_path / "s", store_dtype="float32", codebook_scale=3.0)
    draft = tm.load_draft_only(folder)
    g = torch.Generator().manual_seed(11)
    head = torch.randn(tm.VOCAB, H, generator=g) / 4
    differs = 0
    for trial in range(4):
        hidden = torch.randn(1, 7, H, generator=g)
        anchor = int(torch.randint(tm.VOCAB, (1,), generator=g))
        want, scores = naive_select(folder, hidden[0], head, anchor)
        got = draft.pick_tokens(hidden, head, torch.tensor([anchor]))
        assert got.shape == (1, 7) and got[0].tolist() == want
        assert draft.pick_tokens(hidden, head, torch.tensor([[anchor]]))[0].tolist() == want  # [1, 1] anchor
        argmax = (hidden[0] @ head.T).argmax(-1).tolist()
        differs += sum(a != b for a, b in zip(argmax, want))
        # the runtime's teacher-forced scores equal the reference's along the path
        sel = draft.candidate_selector
        unary, cand = sel.candidates(draft.logits(hidden, head))
        prev = torch.tensor([[anchor, *want[:-1]]])
        torch.testing.assert_close(sel.scores(hidden, unary, cand, prev)[0].double(), torch.tensor(scores, dtype=torch.float64),
                                   rtol=1e-4, atol=1e-4)
    assert differs > 0, "the selector never overruled the logits: the test would not notice a plain argmax"


def test_selector_top_k_one_is_the_argmax(tmp_path: Path) -> None:
    draft = tm.load_draft_only(tm.make_draft2(tmp_path / "k1", store_dtype="float32", selector_top_k=1, codebook_scale=3.0))
    hidden, head = torch.randn(1, 7, H), torch.randn(tm.VOCAB, H)
    assert draft.pick_tokens(hidden, head, torch.tensor([3])).tolist() == (hidden @ head.T).argmax(-1).tolist()


def test_v1_pick_tokens_is_the_argmax(tmp_path: Path) -> None:
    draft = tm.load_draft_only(tm.make_draft(tmp_path / "v1", store_dtype="float32"))
    hidden, head = torch.randn(1, 5, H), torch.randn(tm.VOCAB, H)
    assert draft.pick_tokens(hidden, head, torch.tensor([3])).tolist() == draft.logits(hidden, head).argmax(-1).tolist()


# -- config and loading ------------------------------------------------------------------------------


def test_args_and_loader_use_the_published_names(tmp_path: Path) -> None:
    from dflash_ckpt.runtime.draft2 import DFlash2Draft

    folder = tm.make_draft2(tmp_path / "n", conv_kernel_size=3, selector_rank=12, selector_top_k=5)
    args = DraftSettings.from_spec(read_draft(LocalSource(folder)))
    assert args.generation == "DFlash2" and args.dflash2 is not None
    assert (args.dflash2.conv_kernel_size, args.dflash2.conv_group_size, args.dflash2.selector_rank,
            args.dflash2.selector_top_k) == (3, 16, 12, 5)
    draft = tm.load_draft_only(folder)
    assert isinstance(draft, DFlash2Draft)
    stored = load_file(str(folder / "model.safetensors"))
    assert set(dict(draft.named_parameters())) == set(stored)
    for name, t in stored.items():
        torch.testing.assert_close(dict(draft.named_parameters())[name], t.float())
    v1 = DraftSettings.from_spec(read_draft(LocalSource(tm.make_draft(tmp_path / "v1"))))
    assert v1.generation == "DFlash" and v1.dflash2 is None


def test_codebooks_with_a_weight_suffix_do_not_load(tmp_path: Path) -> None:
    folder = tm.make_draft2(tmp_path / "w", codebook_suffix=".weight")
    with pytest.raises(InputError, match=r"tensor 'candidate_selector\.\w+_codebook' is missing"):
        tm.load_draft_only(folder)


@pytest.mark.parametrize("edit, text", [
    ({"conv_kernel_size": None}, "conv_kernel_size' must be an integer >= 1"),
    ({"selector_rank": 0}, "selector_rank' must be an integer >= 1"),
    ({"conv_group_size": 24}, "conv_group_size' (24) must divide hidden_size (64)"),
])
def test_bad_dflash2_keys_are_refused_naming_the_key(tmp_path: Path, edit: dict[str, Any], text: str) -> None:
    folder = tm.make_draft2(tmp_path / "bad")
    cfg = json.loads((folder / "config.json").read_text())
    for key, value in edit.items():
        if value is None:
            del cfg["dflash_config"][key]
        else:
            cfg["dflash_config"][key] = value
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(InputError, match=re_escape(text)) as err:
        DraftSettings.from_spec(read_draft(LocalSource(folder)))
    assert err.value.code == "DF146" and "config.json" in err.value.message


def re_escape(text: str) -> str:
    import re

    return re.escape(text)


# -- decoding --------------------------------------------------------------------------------------


def test_dflash_decoding_with_a_dflash2_draft_is_lossless(tmp_path: Path) -> None:
    from dflash_ckpt.runtime.generate import decode
    from dflash_ckpt.runtime.eager_dflash import dflash_decode

    target_dir = tm.make_target(tmp_path / "target")
    draft_dir = tm.make_draft2(tmp_path / "draft", store_dtype="float32", codebook_scale=3.0)
    target, draft = tm.load_runtime_pair(draft_dir, target_dir)
    picks: list[torch.Tensor] = []
    original = draft.pick_tokens

    def spy(hidden: torch.Tensor, head_w: torch.Tensor, anchor: torch.Tensor) -> torch.Tensor:
        out = original(hidden, head_w, anchor)
        picks.append(out)
        return out

    draft.pick_tokens = spy  # type: ignore[method-assign]
    tcache, dcache = target.new_cache(128), draft.new_cache(128)
    prompt = [5, 17, 33, 8, 90, 12]
    ref = decode(target, prompt, max_new_tokens=40, cache=tcache)
    spec = dflash_decode(target, draft, prompt, max_new_tokens=40, target_cache=tcache, draft_cache=dcache, block_size=draft.args.block_size)
    assert spec.tokens == ref.tokens
    assert len(picks) == spec.draft_forwards > 0, "the loop picks draft tokens through pick_tokens"
    assert sum(spec.acceptance_lengths) == len(spec.tokens) - 1


@pytest.mark.slow
def test_smoke_run_accepts_a_dflash2_draft(tmp_path: Path) -> None:
    target = tm.make_target(tmp_path / "t")
    draft = tm.make_draft2(tmp_path / "d2")
    res = run_cli("smoke-run", str(draft), "--target", str(target), "-n", "24", "--min-acceptance", "0", "--json")
    no_traceback(res)
    assert res.code == 0, res.stderr
    doc = res.merged()
    assert doc["ok"] and all(p["lossless"]["status"] == "identical" for p in doc["prompts"]), doc["prompts"]
