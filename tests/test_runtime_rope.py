"""Rotary embeddings: each rope type against a scalar transcription of its formula, both config forms."""

from __future__ import annotations

import math

import pytest
import torch

from dflash_ckpt.errors import InputError
from dflash_ckpt.draftspec.rope_spec import RopeSpec, rope_specs
from dflash_ckpt.draftspec.families import Unsupported
from dflash_ckpt.runtime.rope import RotaryTable, apply_rope, inv_freq

DIM = 64


def scalar_llama3(theta: float, dim: int, factor: float, low: float, high: float, orig: int) -> list[float]:
    """Llama 3.1's published scaling, one frequency at a time."""
    out = []
    for i in range(0, dim, 2):
        f = 1.0 / theta ** (i / dim)
        wavelen = 2 * math.pi / f
        if wavelen < orig / high:
            out.append(f)
        elif wavelen > orig / low:
            out.append(f / factor)
        else:
            smooth = (orig / wavelen - low) / (high - low)
            out.append((1 - smooth) * f / factor + smooth * f)
    return out


def scalar_yarn(theta: float, dim: int, factor: float, orig: int, beta_fast: float = 32, beta_slow: float = 1) -> tuple[list[float], float]:
    def corr(rot: float) -> float:
        return dim * math.log(orig / (rot * 2 * math.pi)) / (2 * math.log(theta))

    lo, hi = max(math.floor(corr(beta_fast)), 0), min(math.ceil(corr(beta_slow)), dim - 1)
    out = []
    for j in range(dim // 2):
        base = theta ** (2 * j / dim)
        ramp = min(max((j - lo) / (hi - lo), 0.0), 1.0)
        extrap = 1 - ramp
        out.append((1 / (factor * base)) * (1 - extrap) + (1 / base) * extrap)
    return out, 0.1 * math.log(factor) + 1.0


def test_default_is_theta_power() -> None:
    freq, scale = inv_freq(RopeSpec("default", 10000.0, 4096), DIM)
    want = torch.tensor([1.0 / 10000.0 ** (i / DIM) for i in range(0, DIM, 2)])
    assert scale == 1.0
    torch.testing.assert_close(freq, want, rtol=1e-6, atol=0)


def test_linear_divides_by_factor() -> None:
    base, _ = inv_freq(RopeSpec("default", 10000.0, 4096), DIM)
    freq, _ = inv_freq(RopeSpec("linear", 10000.0, 4096, factor=4.0), DIM)
    torch.testing.assert_close(freq, base / 4)


def test_llama3_matches_scalar_formula_and_touches_three_bands() -> None:
    spec = RopeSpec("llama3", 500000.0, 131072, factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                    original_max_position_embeddings=8192)
    freq, scale = inv_freq(spec, 128)
    want = torch.tensor(scalar_llama3(500000.0, 128, 8.0, 1.0, 4.0, 8192))
    torch.testing.assert_close(freq, want, rtol=1e-5, atol=0)
    base, _ = inv_freq(RopeSpec("default", 500000.0, 131072), 128)
    ratio = base / freq
    assert scale == 1.0
    assert (ratio[:10] == 1).all()  # high frequencies untouched
    assert torch.allclose(ratio[-10:], torch.full((10,), 8.0))  # low frequencies divided by factor
    assert ((ratio > 1.01) & (ratio < 7.99)).any()  # a smoothed band in between


def test_yarn_matches_scalar_formula_and_scales_cos_sin() -> None:
    spec = RopeSpec("yarn", 1000000.0, 131072, factor=4.0, original_max_position_embeddings=32768)
    freq, scale = inv_freq(spec, 128)
    want, want_scale = scalar_yarn(1000000.0, 128, 4.0, 32768)
    torch.testing.assert_close(freq, torch.tensor(want), rtol=1e-5, atol=0)
    assert scale == pytest.approx(want_scale)
    table = RotaryTable(spec, 128, capacity=8)
    assert table.cos[0].max().item() == pytest.approx(want_scale)  # cos(0) * attention factor


def test_yarn_attention_factor_from_mscale() -> None:
    spec = RopeSpec("yarn", 10000.0, 4096, factor=40.0, original_max_position_embeddings=4096, mscale=1.0, mscale_all_dim=0.707)
    _, scale = inv_freq(spec, 64)
    m = lambda s, k: 0.1 * k * math.log(s) + 1.0  # noqa: E731
    assert scale == pytest.approx(m(40, 1.0) / m(40, 0.707))


def test_table_rotates_by_absolute_position() -> None:
    spec = RopeSpec("default", 10000.0, 4096)
    table = RotaryTable(spec, 8)
    cos, sin = table.lookup(torch.tensor([0, 5, 100]), torch.float32)
    freq, _ = inv_freq(spec, 8)
    assert torch.allclose(cos[2, :4], torch.cos(100 * freq))
    assert torch.allclose(sin[1, 4:], torch.sin(5 * freq))
    # Rotating a vector preserves its norm, and position 0 is the identity.
    x = torch.randn(1, 1, 3, 8)
    y = apply_rope(x, cos, sin)
    assert torch.allclose(y.norm(dim=-1), x.norm(dim=-1), atol=1e-5)
    assert torch.allclose(y[..., 0, :], x[..., 0, :])
    c2, s2 = table.span(5, 1, torch.float32)
    assert torch.equal(c2[0], cos[1]) and torch.equal(s2[0], sin[1])


def test_both_config_forms_give_the_same_rope() -> None:
    old = {"rope_theta": 500000.0, "max_position_embeddings": 131072,
           "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                            "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}
    new = {"max_position_embeddings": 131072,
           "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                               "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}
    a, b = rope_specs(old, "old.json"), rope_specs(new, "new.json")
    assert a == b and a["full_attention"].rope_type == "llama3"
    legacy_key = {"rope_theta": 10000, "rope_scaling": {"type": "linear", "factor": 2}}
    assert rope_specs(legacy_key, "x")["full_attention"].factor == 2.0
    assert rope_specs({"rope_theta": 5.0, "rope_scaling": None}, "x")["full_attention"] == RopeSpec("default", 5.0, 32768)


def test_rope_per_layer_type() -> None:
    cfg = {"rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
                               "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}}
    specs = rope_specs(cfg, "x")
    assert specs["full_attention"].theta == 1000000.0 and specs["sliding_attention"].theta == 10000.0


def test_unsupported_and_invalid_rope() -> None:
    with pytest.raises(Unsupported, match="not supported by the reference runtime: .*rope_type 'longrope'"):
        rope_specs({"rope_scaling": {"rope_type": "longrope", "factor": 2}}, "cfg.json")
    with pytest.raises(InputError, match=r"cfg.json: key 'rope_scaling.factor' must be a positive number"):
        rope_specs({"rope_scaling": {"rope_type": "yarn", "factor": "big"}}, "cfg.json")
    with pytest.raises(InputError, match="original_max_position_embeddings"):
        rope_specs({"rope_scaling": {"rope_type": "llama3", "factor": 8, "low_freq_factor": 1, "high_freq_factor": 4}}, "cfg.json")
