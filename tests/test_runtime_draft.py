"""The DFlash v1 draft: against a float64 transcription of its semantics, with and without cache."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

import tiny_models as tm
from dflash_ckpt.errors import InputError
from dflash_ckpt.draftspec.draft_settings import DraftSettings
from dflash_ckpt.sources.local import LocalSource
from dflash_ckpt.draftspec.specs import read_draft_spec as read_draft

H = 64


pytestmark = pytest.mark.usefixtures("one_thread")


def naive_draft(folder: Path, feats: torch.Tensor, block: torch.Tensor, ctx_pos: torch.Tensor, blk_pos: torch.Tensor) -> torch.Tensor:
    """docs/DESIGN.md section 6, literally: fused context as extra K/V of every layer, k_norm on both,
    RoPE at absolute positions, per-layer causal/window rule, final norm. Float64, loops."""
    cfg = json.loads((folder / "config.json").read_text())
    w = {k: v.double() for k, v in load_file(str(folder / "model.safetensors")).items()}
    nh, nkv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    freq = torch.tensor([1.0 / cfg["rope_theta"] ** (i / hd) for i in range(0, hd, 2)], dtype=torch.float64)
    fused = tm.ref_rms(feats.double() @ w["fc.weight"].T, w["hidden_norm.weight"])
    c, n = fused.shape[0], block.shape[0]
    kpos = torch.cat([ctx_pos, blk_pos])
    h = block.double()
    for i, kind in enumerate(cfg["layer_types"]):
        p = f"layers.{i}."
        causal = cfg.get("is_causal") if cfg.get("is_causal") is not None else kind == "sliding_attention"
        window = cfg["sliding_window"] if kind == "sliding_attention" else None
        x = tm.ref_rms(h, w[p + "input_layernorm.weight"])
        kv_in = torch.cat([fused, x])
        q = tm.ref_rms((x @ w[p + "self_attn.q_proj.weight"].T).view(n, nh, hd), w[p + "self_attn.q_norm.weight"])
        k = tm.ref_rms((kv_in @ w[p + "self_attn.k_proj.weight"].T).view(c + n, nkv, hd), w[p + "self_attn.k_norm.weight"])
        v = (kv_in @ w[p + "self_attn.v_proj.weight"].T).view(c + n, nkv, hd)
        heads = []
        for j in range(nh):
            g = j // (nh // nkv)
            qj, kj = tm.ref_rope(q[:, j], blk_pos, freq), tm.ref_rope(k[:, g], kpos, freq)
            scores = qj @ kj.T / math.sqrt(hd)
            for a in range(n):
                for b in range(c + n):
                    qp, kp = int(blk_pos[a]), int(kpos[b])
                    ok = (not causal or kp <= qp) and (window is None or (qp - kp < window and (causal or kp - qp < window)))
                    if not ok:
                        scores[a, b] = float("-inf")
            heads.append(torch.softmax(scores, -1) @ v[:, g])
        h = h + torch.cat(heads, -1) @ w[p + "self_attn.o_proj.weight"].T
        y = tm.ref_rms(h, w[p + "post_attention_layernorm.weight"])
        gate, up = y @ w[p + "mlp.gate_proj.weight"].T, y @ w[p + "mlp.up_proj.weight"].T
        h = h + (gate * torch.sigmoid(gate) * up) @ w[p + "mlp.down_proj.weight"].T
    return tm.ref_rms(h, w["norm.weight"])


@pytest.mark.parametrize("kind", ["full", "mixed", "causal-override", "sliding-bidirectional"])
def test_draft_matches_the_written_out_semantics(tmp_path: Path, kind: str) -> None:
    extra: dict[str, Any] = {}
    layer_types = ["full_attention", "full_attention"]
    window = None
    if kind == "mixed":
        layer_types, window = ["sliding_attention", "full_attention"], 5
    if kind == "causal-override":
        extra = {"is_causal": True}
    if kind == "sliding-bidirectional":  # a window both ways within the block
        layer_types, window, extra = ["sliding_attention", "sliding_attention"], 3, {"is_causal": False}
    folder = tm.make_draft(tmp_path / kind, layer_types=layer_types, sliding_window=window, store_dtype="float32", extra_config=extra)
    draft = tm.load_draft_only(folder)
    feats, block = tm.draft_inputs(9, 8)
    ctx_pos, blk_pos = torch.arange(9), torch.arange(9, 17)
    want = naive_draft(folder, feats, block, ctx_pos, blk_pos)
    got = draft(feats[None], block[None])[0]
    torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-4)


def test_cached_calls_equal_one_full_call(tmp_path: Path) -> None:
    """Context arriving over three calls (cache cropped to the context each time) gives the
    same block output as one call with the whole context."""
    folder = tm.make_draft(tmp_path / "d", layer_types=["sliding_attention", "full_attention"], sliding_window=6,
                           store_dtype="float32")
    draft = tm.load_draft_only(folder)
    feats, block = tm.draft_inputs(14, 8, seed=3)
    cache = draft.new_cache(64)
    ptr = cache.k.data_ptr()
    draft(feats[None, :6], block[None], cache=cache)
    assert cache.length == 6  # context only: the block's entries are cropped away
    draft(feats[None, 6:11], block[None], cache=cache)
    got = draft(feats[None, 11:], block[None], cache=cache)
    want = draft(feats[None], block[None])
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert cache.length == 14 and cache.k.data_ptr() == ptr


def test_sliding_window_hides_old_context_and_full_layers_are_bidirectional(tmp_path: Path) -> None:
    folder = tm.make_draft(tmp_path / "s", layer_types=["sliding_attention"] * 2, sliding_window=4, store_dtype="float32")
    draft = tm.load_draft_only(folder)
    feats, block = tm.draft_inputs(12, 8, seed=5)
    base = draft(feats[None], block[None])[0]
    far = feats.clone()
    far[:4] += 5.0  # positions 0..3; the block (12..19) sees back to 9 at most through two layers
    torch.testing.assert_close(draft(far[None], block[None])[0], base)
    near = feats.clone()
    near[11] += 5.0
    assert not torch.allclose(draft(near[None], block[None])[0], base, atol=1e-3)
    # Causal sliding layers: changing block position 5 leaves positions 0..4 alone.
    later = block.clone()
    later[5] += 1.0
    out = draft(feats[None], later[None])[0]
    torch.testing.assert_close(out[:5], base[:5])
    assert not torch.allclose(out[5:], base[5:], atol=1e-4)
    # Full attention layers: every block position sees every other (mask filling).
    full = tm.load_draft_only(tm.make_draft(tmp_path / "f", store_dtype="float32"))
    a, b = full(feats[None], block[None])[0], full(feats[None], later[None])[0]
    assert not torch.allclose(a[:5], b[:5], atol=1e-4)


def test_training_layout_two_anchors_in_one_pass(tmp_path: Path) -> None:
    """Positions and a block-sparse mask let several anchors share a forward pass."""
    draft = tm.load_draft_only(tm.make_draft(tmp_path / "t", store_dtype="float32"))
    feats, _ = tm.draft_inputs(10, 1, seed=7)
    g = torch.Generator().manual_seed(8)
    blocks = torch.randn(2, 8, H, generator=g)
    anchors = [4, 7]
    separate = [draft(feats[None, :a], blocks[i][None], block_positions=torch.arange(a, a + 8))[0] for i, a in enumerate(anchors)]
    ctx_pos = torch.arange(10)
    blk_pos = torch.cat([torch.arange(a, a + 8) for a in anchors])
    mask = torch.zeros(16, 26, dtype=torch.bool)
    for i, a in enumerate(anchors):
        rows = slice(8 * i, 8 * i + 8)
        mask[rows, :a] = True  # context strictly before the anchor
        mask[rows, 10 + 8 * i: 10 + 8 * i + 8] = True  # its own block
    joint = draft(feats[None], blocks.reshape(1, 16, H), context_positions=ctx_pos, block_positions=blk_pos, attention_mask=mask)[0]
    torch.testing.assert_close(joint[:8], separate[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(joint[8:], separate[1], rtol=1e-5, atol=1e-5)


def test_draft_is_differentiable(tmp_path: Path) -> None:
    draft = tm.load_draft_only(tm.make_draft(tmp_path / "g", store_dtype="float32")).requires_grad_(True)
    feats, block = tm.draft_inputs(6, 8)
    hidden = draft(feats[None], block[None])
    head = torch.randn(tm.VOCAB, H)
    loss = torch.nn.functional.cross_entropy(draft.logits(hidden[0, 1:], head), torch.arange(7))
    loss.backward()
    assert draft.fc.weight.grad is not None and draft.fc.weight.grad.abs().sum() > 0
    assert draft.layers[1].mlp.down_proj.weight.grad.abs().sum() > 0


def test_embedding_scale_multiplier_and_softcap(tmp_path: Path) -> None:
    plain = tm.load_draft_only(tm.make_draft(tmp_path / "p", store_dtype="float32"))
    scaled = tm.load_draft_only(tm.make_draft(tmp_path / "s", store_dtype="float32", extra_config={
        "input_embedding_scale": 2.0, "dflash_config": {"mask_token_id": tm.MASK_ID, "target_layer_ids": [1, 3, 5],
                                                       "output_multiplier": 0.5, "final_logit_softcapping": 3.0}}))
    weight = torch.randn(tm.VOCAB, H)
    ids = torch.tensor([[5, tm.MASK_ID, tm.MASK_ID]])
    torch.testing.assert_close(scaled.embed(ids, weight), 2 * plain.embed(ids, weight))
    hidden = torch.randn(1, 3, H)
    raw = plain.logits(hidden, weight)
    torch.testing.assert_close(scaled.logits(hidden, weight), torch.tanh(raw * 0.5 / 3.0) * 3.0)
    assert scaled.logits(hidden, weight).abs().max() <= 3.0


def test_dflash2_config_without_its_keys_is_refused(tmp_path: Path) -> None:
    """DFlash2 drafts run (tests/test_runtime_dflash2_reference.py); one that lacks the DFlash2 keys is
    refused naming the first missing key, not run as a v1 draft."""
    folder = tm.make_draft(tmp_path / "v2", architectures=["DFlash2DraftModel"])
    with pytest.raises(InputError, match="dflash_config.conv_kernel_size' must be an integer >= 1 in a DFlash2 draft"):
        DraftSettings.from_spec(read_draft(LocalSource(folder)))


def test_layer_types_not_derived_from_max_window_layers(tmp_path: Path) -> None:
    """Without ``layer_types`` a sliding draft is refused, as ``normalize`` refuses to write one:
    the runtime never guesses which layers slide (draftspec/layer_kinds.py)."""
    folder = tm.make_draft(tmp_path / "lt", layers=3, sliding_window=16,
                           extra_config={"layer_types": None, "use_sliding_window": True, "max_window_layers": 1})
    with pytest.raises(InputError, match=r"layer_types is missing and cannot be derived .*normalize .*--layer-types"):
        DraftSettings.from_spec(read_draft(LocalSource(folder)))
    explicit = tm.make_draft(tmp_path / "ex", layers=3, sliding_window=16, extra_config={
        "layer_types": ["full_attention", "sliding_attention", "sliding_attention"], "use_sliding_window": True})
    args = DraftSettings.from_spec(read_draft(LocalSource(explicit)))
    assert args.layer_types == ("full_attention", "sliding_attention", "sliding_attention")
    assert [args.layer_causal(i) for i in range(3)] == [False, True, True]
    assert args.layer_window(0) is None and args.layer_window(2) == 16
