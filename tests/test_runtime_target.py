"""The target: loading layouts, tapped features against a plain float64 forward, the KV cache."""

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
from dflash_ckpt.draftspec.target_settings import TargetSettings
from dflash_ckpt.draftspec.families import Unsupported


pytestmark = pytest.mark.usefixtures("one_thread")


# -- an independent reference: the HF forward written out in float64 ----------------------------


def _rms(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return w * (x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps))


def _rot(x: torch.Tensor, pos: torch.Tensor, freq: torch.Tensor) -> torch.Tensor:
    ang = pos[:, None] * freq[None, :]
    c, s = torch.cos(ang), torch.sin(ang)
    a, b = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat([a * c - b * s, b * c + a * s], dim=-1)


def naive_hidden_states(folder: Path, ids: list[int], freq: torch.Tensor | None = None) -> tuple[list[torch.Tensor], torch.Tensor]:
    """HF ``hidden_states`` (embeddings, each layer's output, the last one after the final norm)
    and the logits, from the safetensors tensors by name, in float64 with explicit loops."""
    cfg = json.loads((folder / "config.json").read_text())
    cfg = cfg.get("text_config", cfg)
    w = {k: v.double() for k, v in load_file(str(folder / "model.safetensors")).items()}
    p = "model.language_model." if "model.language_model.embed_tokens.weight" in w else "model."
    nh, nkv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    if freq is None:
        freq = torch.tensor([1.0 / cfg["rope_theta"] ** (i / hd) for i in range(0, hd, 2)], dtype=torch.float64)
    n = len(ids)
    pos = torch.arange(n, dtype=torch.float64)
    x = w[p + "embed_tokens.weight"][ids]
    states = [x]
    for i in range(cfg["num_hidden_layers"]):
        q_ = f"{p}layers.{i}."

        def lin(name: str, h: torch.Tensor) -> torch.Tensor:
            out = h @ w[q_ + name + ".weight"].T
            return out + w[q_ + name + ".bias"] if q_ + name + ".bias" in w else out

        h = _rms(x, w[q_ + "input_layernorm.weight"])
        q = lin("self_attn.q_proj", h).view(n, nh, hd)
        k = lin("self_attn.k_proj", h).view(n, nkv, hd)
        v = lin("self_attn.v_proj", h).view(n, nkv, hd)
        if q_ + "self_attn.q_norm.weight" in w:
            q = _rms(q, w[q_ + "self_attn.q_norm.weight"])
            k = _rms(k, w[q_ + "self_attn.k_norm.weight"])
        heads = []
        for j in range(nh):
            kv = j // (nh // nkv)
            qj, kj = _rot(q[:, j], pos, freq), _rot(k[:, kv], pos, freq)
            scores = qj @ kj.T / math.sqrt(hd)
            scores = scores.masked_fill(torch.triu(torch.ones(n, n, dtype=torch.bool), 1), float("-inf"))
            heads.append(torch.softmax(scores, -1) @ v[:, kv])
        x = x + lin("self_attn.o_proj", torch.cat(heads, -1))
        h = _rms(x, w[q_ + "post_attention_layernorm.weight"])
        gate, up = lin("mlp.gate_proj", h), lin("mlp.up_proj", h)
        x = x + lin("mlp.down_proj", gate * torch.sigmoid(gate) * up)
        states.append(x)
    states[-1] = _rms(x, w[p + "norm.weight"])
    head = w.get("lm_head.weight", w[p + "embed_tokens.weight"]) if not cfg.get("tie_word_embeddings") else w[p + "embed_tokens.weight"]
    return states, states[-1] @ head.T


# -- fixtures ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tm.make_target(tmp_path_factory.mktemp("qwen3"), tokenizer=False)


IDS = [3, 17, 250, 42, 8, 99, 123, 7, 300, 11, 64, 5]


def test_tapped_features_are_hf_hidden_states_plus_one(qwen3: Path) -> None:
    """Tap ``i`` = HF ``hidden_states[i+1]``: the raw output of layer i, the last one normed."""
    model = tm.load_target_only(qwen3)
    states, logits = naive_hidden_states(qwen3, IDS)
    taps = [0, 2, 5]
    with torch.no_grad():
        out = model(torch.tensor([IDS]), taps=taps)
    feats = out.features[0].double()
    for j, layer in enumerate(taps):
        torch.testing.assert_close(feats[:, j * 64:(j + 1) * 64], states[layer + 1], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(out.logits[0].double(), logits, rtol=1e-4, atol=1e-3)
    # The last layer's tap is normalised: its RMS is the norm weight's, not the residual's.
    norm_rms = model.norm.weight.detach().double().pow(2).mean().sqrt().item()
    assert feats[:, -64:].pow(2).mean(-1).sqrt().mean().item() == pytest.approx(norm_rms, rel=0.2)
    assert feats[:, 64:128].pow(2).mean(-1).sqrt().mean().item() > 1.5 * norm_rms  # raw residual grows


def test_cached_decoding_equals_full_recomputation(qwen3: Path) -> None:
    """Prefill, one-token steps and a verified block cropped back give a full forward's results."""
    model = tm.load_target_only(qwen3).requires_grad_(False)
    full = model(torch.tensor([IDS]), taps=[1, 3])
    cache = model.new_cache(32)
    a = model(torch.tensor([IDS[:5]]), cache=cache, taps=[1, 3])
    b = model(torch.tensor([IDS[5:6]]), cache=cache, taps=[1, 3])
    # A block with three wrong tokens at the end: verify, then crop to the two right ones.
    c = model(torch.tensor([IDS[6:8] + [1, 2, 3]]), cache=cache, taps=[1, 3])
    cache.crop(8)
    d = model(torch.tensor([IDS[8:]]), cache=cache, taps=[1, 3])
    logits = torch.cat([a.logits, b.logits, c.logits[:, :2], d.logits], dim=1)
    feats = torch.cat([a.features, b.features, c.features[:, :2], d.features], dim=1)
    # fp32, summed in another order than the full forward: an AVX2-only CPU's kernels part by up
    # to 1.3e-5 here (AVX-512 ones by less than 1e-5); a cache bug is off by whole units.
    torch.testing.assert_close(logits, full.logits, rtol=1e-5, atol=5e-5)
    torch.testing.assert_close(feats, full.features, rtol=1e-5, atol=5e-5)
    assert cache.length == len(IDS)
    last = model(torch.tensor([IDS[:5]]), start=0, logits="last")
    torch.testing.assert_close(last.logits[0, 0], full.logits[0, 4], rtol=1e-5, atol=5e-5)
    with pytest.raises(ValueError, match="capacity"):
        model(torch.tensor([[1] * 30]), cache=cache)


def test_cache_is_preallocated_and_cropping_does_not_reallocate(qwen3: Path) -> None:
    model = tm.load_target_only(qwen3)
    cache = model.new_cache(16)
    ptr = cache.k.data_ptr()
    model(torch.tensor([IDS[:6]]), cache=cache)
    cache.crop(3)
    model(torch.tensor([IDS[3:9]]), cache=cache)
    assert cache.k.data_ptr() == ptr and cache.length == 9
    with pytest.raises(ValueError):
        cache.crop(10)


def test_target_forward_is_differentiable_for_training(qwen3: Path) -> None:
    model = tm.load_target_only(qwen3)
    out = model(torch.tensor([IDS, IDS[::-1]]), taps=[1, 3])  # batch 2, no cache
    assert out.features.shape == (2, len(IDS), 128)
    out.features.sum().backward()
    assert model.layers[0].self_attn.q_proj.weight.grad is not None


def test_llama_target_with_llama3_rope(tmp_path: Path) -> None:
    folder = tm.make_target(tmp_path / "llama", model_type="llama", rope_scaling=tm.LLAMA3_ROPE,
                            rope_theta=500000.0, tie=False, tokenizer=False)
    model = tm.load_target_only(folder)
    assert model.layers[0].self_attn.q_norm is None  # Llama has no q_norm/k_norm
    from test_runtime_rope import scalar_llama3

    freq = torch.tensor(scalar_llama3(500000.0, 16, 8.0, 1.0, 4.0, 64), dtype=torch.float64)
    states, logits = naive_hidden_states(folder, IDS * 6, freq)  # 72 positions, past the original 64
    out = model(torch.tensor([IDS * 6]), taps=[2])
    torch.testing.assert_close(out.features[0].double(), states[3], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(out.logits[0].double(), logits, rtol=1e-4, atol=1e-3)
    plain, _ = naive_hidden_states(folder, IDS * 6)  # without the scaling the result must differ
    assert not torch.allclose(out.features[0].double(), plain[3], atol=1e-3)


def test_text_config_wrapper_and_shards(tmp_path: Path) -> None:
    folder = tm.make_target(tmp_path / "wrapped", text_config=True, tokenizer=False)
    model = tm.load_target_only(folder)
    states, _ = naive_hidden_states(folder, IDS)
    out = model(torch.tensor([IDS]), taps=[1])
    torch.testing.assert_close(out.features[0].double(), states[2], rtol=1e-4, atol=1e-4)
    sharded = tm.make_target(tmp_path / "sharded", shards=3, tokenizer=False)
    plain = tm.make_target(tmp_path / "plain", tokenizer=False)
    a = tm.load_target_only(sharded)(torch.tensor([IDS])).logits
    b = tm.load_target_only(plain)(torch.tensor([IDS])).logits
    assert torch.equal(a, b)


def test_loading_errors_name_the_file_and_tensor(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    folder = tm.make_target(tmp_path / "t", tokenizer=False)
    tensors = load_file(str(folder / "model.safetensors"))
    del tensors["model.layers.2.self_attn.k_norm.weight"]
    save_file(tensors, str(folder / "model.safetensors"))
    with pytest.raises(InputError, match=r"tensor 'model.layers.2.self_attn.k_norm.weight' is missing"):
        tm.load_target_only(folder)

    untied = tm.make_target(tmp_path / "u", tokenizer=False)
    tensors = load_file(str(untied / "model.safetensors"))
    del tensors["lm_head.weight"]
    save_file(tensors, str(untied / "model.safetensors"))
    with pytest.raises(InputError, match="no lm_head.weight tensor .* tie_word_embeddings"):
        tm.load_target_only(untied)

    shaped = tm.make_target(tmp_path / "s", tokenizer=False)
    cfg = json.loads((shaped / "config.json").read_text())
    cfg["intermediate_size"] = 96  # valid settings that do not match the weights
    (shaped / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(InputError, match=r"model.safetensors: tensor 'model.layers.0.mlp.gate_proj.weight' has "
                                         r"shape \[128, 64\] but .*config.json implies \[96, 64\]"):
        tm.load_target_only(shaped)
    cfg["head_dim"] = 7
    with pytest.raises(InputError, match="head_dim"):
        TargetSettings.from_config(cfg, "c.json")


def test_tied_embeddings_share_the_table(tmp_path: Path) -> None:
    folder = tm.make_target(tmp_path / "tied", tie=True, tokenizer=False)
    model = tm.load_target_only(folder)
    assert model.lm_head.weight is model.embed_tokens.weight
    _, logits = naive_hidden_states(folder, IDS)
    with torch.no_grad():
        torch.testing.assert_close(model(torch.tensor([IDS])).logits[0].double(), logits, rtol=1e-4, atol=1e-3)


def test_unsupported_targets() -> None:
    base: dict[str, Any] = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 8, "vocab_size": 10}
    for cfg, what in (
        ({**base, "model_type": "qwen3_moe"}, "model_type 'qwen3_moe'"),
        ({**base, "model_type": "gpt_oss"}, "model_type 'gpt_oss'"),
        ({"model_type": "qwen3_5", "text_config": {**base, "model_type": "qwen3_5_text"}}, "'qwen3_5_text'"),
        ({**base, "model_type": "qwen3", "use_sliding_window": True}, "use_sliding_window"),
        ({**base, "model_type": "llama", "hidden_act": "gelu"}, "hidden_act 'gelu'"),
    ):
        with pytest.raises(Unsupported, match=f"not supported by the reference runtime: .*{what}.*dense Qwen3"):
            TargetSettings.from_config(cfg, "config.json")
