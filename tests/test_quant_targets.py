"""Quantized targets (issue 30): dequantized on load, judged against the dequantized target.

The fixtures under fixtures/tiny-quant/ are the tiny target quantized by
fixtures/make_quantized.py (vLLM's quantizer, the formats' own packers). Here: each format
dequantizes to weights close to the bf16 originals (and excluded layers stay exactly as stored),
smoke-run passes the trained tiny draft on each with the report saying what ran, and bad input
(a contradicting config, a missing scale, an unknown format) is one coded line, exit 2.
The independent oracle (transformers, compressed-tensors, vLLM's reference) is
tests/test_quant_oracle.py.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file

from conftest import error_line, no_traceback, smoke
from dflash_ckpt.draftspec.quant import read_scheme
from dflash_ckpt.errors import InputError
from tiny_models import load_target_only

ROOT = Path(__file__).resolve().parents[1]
QUANT = ROOT / "fixtures" / "tiny-quant"
SOURCE = ROOT / "fixtures" / "tiny-pair" / "target"
DRAFT = str(ROOT / "fixtures" / "tiny-pair" / "draft")
EXCLUDED = "layers.0.mlp.down_proj"
#: Relative Frobenius error of a dequantized layer against the bf16 weight it was made from.
BOUNDS = {"fp8-block": 0.06, "fp8-dynamic": 0.06, "awq": 0.15, "gptq": 0.15, "gptq8": 0.01, "w4a16": 0.15}


def _weights(model: Any) -> dict[str, torch.Tensor]:
    return {k: v.detach().float().clone() for k, v in model.named_parameters() if "proj" in k}


@pytest.fixture(scope="module")
def source_weights() -> dict[str, torch.Tensor]:
    return _weights(load_target_only(SOURCE))


@pytest.mark.parametrize("variant", sorted(BOUNDS))
def test_dequantized_weights_are_close_to_the_originals(variant: str, source_weights: dict[str, torch.Tensor]) -> None:
    cfg = json.loads((QUANT / variant / "config.json").read_text())
    from dflash_ckpt.draftspec.target_settings import TargetSettings
    from dflash_ckpt.runtime.loading import load_target

    scheme = read_scheme(cfg, "config.json")
    assert scheme is not None
    model = load_target(QUANT / variant, TargetSettings.from_config(cfg, "config.json"), dtype=torch.float32,
                        device=torch.device("cpu"), scheme=scheme)
    got = _weights(model)
    assert got.keys() == source_weights.keys()
    stored = load_file(str(QUANT / variant / "model.safetensors"))
    for name, want in source_weights.items():
        err = float((got[name] - want).norm() / want.norm())
        if EXCLUDED in name and variant in ("awq", "w4a16"):
            torch.testing.assert_close(got[name], stored[f"model.{EXCLUDED}.weight"].float(), rtol=0, atol=0)
            continue
        assert 0 < err < BOUNDS[variant], (variant, name, err)  # 0 would mean nothing was quantized


@pytest.mark.parametrize("variant", ["fp8-block", "awq", "gptq", "w4a16", "llmc-w4a16"])
def test_smoke_run_passes_the_quantized_target_and_says_what_ran(cli: Any, variant: str) -> None:
    res = smoke(cli, (DRAFT, str(QUANT / variant)), "-n", "24", "--json")
    assert res.code == 0, res.stdout
    doc = json.loads(res.stdout)
    result = doc["results"][0]
    q = result["quantization"]
    assert q["dequantized"] is True and q["lossless_against"] == "the dequantized target"
    assert q["format"] == {"fp8-block": "fp8", "awq": "awq", "gptq": "gptq"}.get(variant, "compressed-tensors")
    assert q["bits"] == (8 if variant == "fp8-block" else 4)
    assert q["quantized_layers"] == (55 if variant in ("awq", "w4a16") else 56)
    if variant in ("awq", "w4a16"):
        assert f"model.{EXCLUDED}" in q["unquantized_modules"]
    assert q["dequantized_to"] == result["settings"]["target_dtype"]
    assert result["overall"]["tau"] >= 2.0
    assert all(p["lossless"]["status"] in ("identical", "tie") for p in result["prompts"])


def test_the_report_names_the_format_and_the_verdict_says_dequantized(cli: Any) -> None:
    res = smoke(cli, (DRAFT, str(QUANT / "gptq")), "-n", "16")
    assert res.code == 0, res.stdout
    assert "target quantized: gptq, 4-bit, group 64, act-order, symmetric; 56 layers dequantized to float16" in res.stdout
    assert "(against the dequantized target)" in res.stdout


def test_an_unquantized_target_reports_no_quantization(cli: Any) -> None:
    res = smoke(cli, (DRAFT, str(SOURCE)), "-n", "8", "--json")
    assert res.result()["quantization"] is None


# -- bad input -----------------------------------------------------------------------------------


def _copy(tmp_path: Path, variant: str) -> Path:
    dst = tmp_path / variant
    shutil.copytree(QUANT / variant, dst)
    return dst


def _edit_config(folder: Path, **quant: Any) -> None:
    cfg = json.loads((folder / "config.json").read_text())
    cfg["quantization_config"].update(quant)
    (folder / "config.json").write_text(json.dumps(cfg))


def _refused(cli: Any, folder: Path, code: str, *parts: str) -> str:
    res = smoke(cli, (DRAFT, str(folder)), "-n", "4")
    assert res.code == 2, res.stdout
    line = error_line(res)
    assert f" {code} " in line and str(folder) in line, line
    for part in parts:
        assert part in line, line
    return line


def test_bits_contradicting_the_tensors(cli: Any, tmp_path: Path) -> None:
    folder = _copy(tmp_path, "gptq")
    _edit_config(folder, bits=8)
    _refused(cli, folder, "DF181", "quantization_config", "bits 8", "qweight")


def test_group_size_contradicting_the_tensors(cli: Any, tmp_path: Path) -> None:
    folder = _copy(tmp_path, "awq")
    _edit_config(folder, group_size=32)
    _refused(cli, folder, "DF181", "group_size 32", "scales")


def test_block_size_contradicting_the_scales(cli: Any, tmp_path: Path) -> None:
    folder = _copy(tmp_path, "fp8-block")
    _edit_config(folder, weight_block_size=[128, 128])
    _refused(cli, folder, "DF181", "weight_block_size", "weight_scale_inv")


def test_a_missing_scale_tensor(cli: Any, tmp_path: Path) -> None:
    folder = _copy(tmp_path, "w4a16")
    state = load_file(str(folder / "model.safetensors"))
    del state["model.layers.3.self_attn.o_proj.weight_scale"]
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    _refused(cli, folder, "DF182", "'model.layers.3.self_attn.o_proj.weight_scale' is missing")


def test_an_fp8_weight_without_a_quantization_config(cli: Any, tmp_path: Path) -> None:
    folder = _copy(tmp_path, "fp8-block")
    cfg = json.loads((folder / "config.json").read_text())
    del cfg["quantization_config"]
    (folder / "config.json").write_text(json.dumps(cfg))
    _refused(cli, folder, "DF182", "F8_E4M3", "no quantization_config")


@pytest.mark.parametrize(("edit", "key"), [
    ({"quant_method": "bitsandbytes"}, "quant_method"),
    ({"version": "gemv"}, "version"),
    ({"checkpoint_format": "marlin"}, "checkpoint_format"),
])
def test_a_format_not_read(cli: Any, tmp_path: Path, edit: dict[str, Any], key: str) -> None:
    folder = _copy(tmp_path, "awq" if key == "version" else "gptq")
    _edit_config(folder, **edit)
    line = _refused(cli, folder, "DF180", f"quantization_config.{key}")
    assert "supported:" in line


def test_a_config_naming_quantization_the_tensors_lack(cli: Any, tmp_path: Path) -> None:
    folder = tmp_path / "plain"
    shutil.copytree(SOURCE, folder)
    cfg = json.loads((folder / "config.json").read_text())
    cfg["quantization_config"] = {"quant_method": "awq", "bits": 4, "group_size": 64, "version": "gemm"}
    (folder / "config.json").write_text(json.dumps(cfg))
    _refused(cli, folder, "DF181", "no tensor is stored that way")


def test_read_scheme_names_the_compressed_tensors_scheme() -> None:
    cfg = json.loads((QUANT / "w4a16" / "config.json").read_text())
    scheme = read_scheme(cfg, "w4a16/config.json")
    assert scheme is not None
    assert (scheme.format, scheme.bits, scheme.group_size, scheme.symmetric) == ("pack-quantized", 4, 64, True)
    cfg["quantization_config"]["config_groups"]["group_0"]["weights"]["num_bits"] = 3
    with pytest.raises(InputError) as err:
        read_scheme(cfg, "w4a16/config.json")
    assert err.value.code == "DF180"


def test_inspect_pairs_a_quantized_target_by_its_config(cli: Any) -> None:
    """hidden size, depth and vocab come from the config, not from packed shapes."""
    for variant in ("awq", "gptq", "w4a16", "fp8-block"):
        res = cli("inspect", DRAFT, "--target", str(QUANT / variant), "--json")
        no_traceback(res)
        assert res.code == 0, res.stdout
        found = {f["code"] for f in res.result()["findings"]}
        assert not {c for c in found if c.startswith("DF3")}, found


# -- fp16 targets beside a bf16 draft (item 6) ------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["native", "transformers"])
def test_fp16_target_tensors_enter_the_bf16_draft_cast(cli: Any, monkeypatch: pytest.MonkeyPatch, backend: str) -> None:
    """The two boundaries where target tensors enter the draft, the block embeddings and the
    tapped features, receive fp16 and hand the draft bf16, on both backends; the run is lossless."""
    if backend == "transformers":
        pytest.importorskip("transformers")
    from dflash_ckpt.runtime.draft import DFlashDraft

    seen: dict[str, set[tuple[torch.dtype, torch.dtype]]] = {"embed": set(), "fuse": set()}
    embed, fuse = DFlashDraft.embed, DFlashDraft.fuse

    def rec_embed(self: Any, ids: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        out = embed(self, ids, weight)
        seen["embed"].add((weight.dtype, out.dtype))
        return out

    def rec_fuse(self: Any, features: torch.Tensor) -> torch.Tensor:
        out = fuse(self, features)
        seen["fuse"].add((features.dtype, out.dtype))
        return out

    monkeypatch.setattr(DFlashDraft, "embed", rec_embed)
    monkeypatch.setattr(DFlashDraft, "fuse", rec_fuse)
    res = smoke(cli, (DRAFT, str(SOURCE)), "-n", "16", "--target-dtype", "float16", "--backend", backend, "--json")
    assert res.code == 0, res.stdout
    result = res.result()
    assert (result["settings"]["target_dtype"], result["settings"]["draft_dtype"]) == ("float16", "bfloat16")
    assert seen == {"embed": {(torch.float16, torch.bfloat16)}, "fuse": {(torch.float16, torch.bfloat16)}}
    assert all(p["lossless"]["status"] in ("identical", "tie") for p in result["prompts"])


def test_the_transformers_backend_points_a_quantized_target_to_native(cli: Any) -> None:
    res = smoke(cli, (DRAFT, str(QUANT / "awq")), "-n", "4", "--backend", "transformers")
    assert res.code == 2
    assert "--backend native" in error_line(res)


def test_a_sharded_quantized_target_loads_the_same(tmp_path: Path) -> None:
    """A layer's packed weight and its scales may sit in different shards (the index names them)."""
    from dflash_ckpt.draftspec.target_settings import TargetSettings
    from dflash_ckpt.runtime.loading import load_target

    folder = _copy(tmp_path, "gptq")
    state = load_file(str(folder / "model.safetensors"))
    (folder / "model.safetensors").unlink()
    names = sorted(state)
    shards = {"model-00001-of-00002.safetensors": [n for n in names if not n.endswith(".scales")],
              "model-00002-of-00002.safetensors": [n for n in names if n.endswith(".scales")]}
    for file, keys in shards.items():
        save_file({k: state[k] for k in keys}, str(folder / file), metadata={"format": "pt"})
    index = {"metadata": {}, "weight_map": {k: f for f, keys in shards.items() for k in keys}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    cfg = json.loads((folder / "config.json").read_text())

    def weights(where: Path) -> dict[str, torch.Tensor]:
        return _weights(load_target(where, TargetSettings.from_config(cfg, "config.json"), dtype=torch.float32,
                                    device=torch.device("cpu"), scheme=read_scheme(cfg, "config.json")))

    got, want = weights(folder), weights(QUANT / "gptq")
    assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want)
