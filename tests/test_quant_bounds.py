"""Quantized targets bounded before allocation (issue 39, item 5).

A 1 MB quantized target must not make the loader allocate gigabytes: a block size larger than
the weight it scales (FP8 ``weight_block_size [1, 16777216]`` with ``[out, 1]`` scales matches
the scale headers), an index tensor that is not integers (``weight_shape`` stored as NaN) are
refused from the headers, before anything is read; an act-order ``weight_g_idx`` naming a group
that does not exist (1000, or -1, which would wrap to the last group) is refused before it is
used as an index, as GPTQ's ``g_idx`` is; and the memory pre-check counts the dequantization
of the largest layer, computed from the headers. Every mutant is built here from
fixtures/tiny-quant/.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file

from conftest import one_error_line, smoke
from dflash_ckpt.draftspec.quant import DEQUANT_BYTES_PER_ELEMENT, dequant_peak_bytes, read_scheme, require_headers, stored_dims
from dflash_ckpt.draftspec.quant.packing import scale_blocks
from dflash_ckpt.draftspec.specs import target_from_config
from dflash_ckpt.runtime.memory import Shapes, estimate_run
from dflash_ckpt.sources.local import LocalSource
from dflash_ckpt.sources.weights import load_inventory

ROOT = Path(__file__).resolve().parents[1]
QUANT = ROOT / "fixtures" / "tiny-quant"
DRAFT = str(ROOT / "fixtures" / "tiny-pair" / "draft")
FAST = ("-n", "4", "--device", "cpu")

pytestmark = pytest.mark.usefixtures("one_thread")


def _mutant(tmp_path: Path, variant: str, quant: dict[str, Any] | None = None,
            edit: Any = None) -> Path:
    """A copy of ``variant`` with ``quant`` merged into its quantization_config and ``edit``
    applied to its tensors (a function of the state dict, changing it in place)."""
    folder = tmp_path / variant
    shutil.copytree(QUANT / variant, folder)
    if quant:
        cfg = json.loads((folder / "config.json").read_text())
        cfg["quantization_config"].update(quant)
        (folder / "config.json").write_text(json.dumps(cfg))
    if edit is not None:
        state = load_file(str(folder / "model.safetensors"))
        edit(state)
        save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder


@pytest.fixture
def never_dequantized(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Fails the test if any layer is dequantized (the refusal must come from the headers)."""
    import dflash_ckpt.runtime.quant as quant

    calls: list[str] = []

    def fail(scheme: Any, base: str, *args: Any) -> Any:
        calls.append(base)
        raise AssertionError(f"layer {base} was dequantized")

    monkeypatch.setattr(quant, "dequantize_layer", fail)
    return calls


def _one_scale_per_row(state: dict[str, torch.Tensor]) -> None:
    """Every FP8 layer's scales as ``[out, 1]``: what a ``[1, 2**24]`` block implies for any
    weight narrower than 2**24 columns."""
    for name in [n for n in state if n.endswith(".weight_scale_inv")]:
        rows = state[name.removesuffix("_scale_inv")].shape[0]
        state[name] = torch.full((rows, 1), float(state[name].float().mean()), dtype=torch.float32)


def test_a_block_larger_than_the_weight_is_refused_from_the_headers(cli: Any, tmp_path: Path,
                                                                     never_dequantized: list[str]) -> None:
    folder = _mutant(tmp_path, "fp8-block", {"weight_block_size": [1, 16777216]}, _one_scale_per_row)
    res = smoke(cli, (DRAFT, str(folder)), *FAST)
    one_error_line(res, "weight_block_size [1, 16777216] is larger than layer",
                   "'model.layers.0.mlp.down_proj' ([128, 256])", code="DF181",
                   path=str(folder / "config.json"))
    assert never_dequantized == []


def test_a_block_within_the_weight_with_matching_scales_still_passes_the_headers(tmp_path: Path) -> None:
    """The bound is the weight, not the fixture's block: [64, 128] fits every layer (the
    narrowest is k_proj, [64, 128]) and its scale grid is ceil(shape / block)."""
    def every_other_column(state: dict[str, torch.Tensor]) -> None:  # [64, 64] blocks -> [64, 128]
        for name in [n for n in state if n.endswith(".weight_scale_inv")]:
            state[name] = state[name][:, ::2].contiguous()

    folder = _mutant(tmp_path, "fp8-block", {"weight_block_size": [64, 128]}, every_other_column)
    cfg = json.loads((folder / "config.json").read_text())
    inv = load_inventory(LocalSource(folder))
    require_headers(read_scheme(cfg, "config.json"), inv.tensors)  # no error


def test_scale_blocks_allocates_no_more_than_the_weight() -> None:
    """The dequantizer gathers each element's scale: a [1, 2**24] block on a [3, 5] weight is a
    [3, 5] product, not [3, 2**24] repeated scales (256 MiB)."""
    weight = torch.arange(15, dtype=torch.float32).reshape(3, 5)
    scale = torch.tensor([[2.0], [3.0], [5.0]])
    assert torch.equal(scale_blocks(weight, scale, (1, 2**24)), weight * scale)
    grid = torch.tensor([[1.0, 10.0], [100.0, 1000.0]])
    out = scale_blocks(torch.ones(3, 5), grid, (2, 3))  # partial blocks at both edges
    assert out.tolist() == [[1, 1, 1, 10, 10], [1, 1, 1, 10, 10], [100, 100, 100, 1000, 1000]]


def _nan_shape(state: dict[str, torch.Tensor]) -> None:
    state["model.layers.1.self_attn.k_proj.weight_shape"] = torch.tensor([float("nan"), float("nan")])


def test_a_weight_shape_stored_as_nan_is_refused_from_the_headers(cli: Any, tmp_path: Path,
                                                                   never_dequantized: list[str]) -> None:
    folder = _mutant(tmp_path, "w4a16", edit=_nan_shape)
    res = smoke(cli, (DRAFT, str(folder)), *FAST)
    one_error_line(res, "'model.layers.1.self_attn.k_proj.weight_shape' is stored as F32", "integer tensor",
                   code="DF181")
    assert never_dequantized == []


def _act_order(bad: dict[str, int] | None = None) -> Any:
    """Add each compressed-tensors layer's ``weight_g_idx`` (column i in group i // 64, the
    fixture's group size), with ``bad`` setting column 5 of the named layer to a value."""
    def edit(state: dict[str, torch.Tensor]) -> None:
        for name in [n for n in state if n.endswith(".weight_shape")]:
            base = name.removesuffix(".weight_shape")
            columns = int(state[name][1])
            g_idx = (torch.arange(columns) // 64).to(torch.int32)
            if bad and base in bad:
                g_idx[5] = bad[base]
            state[f"{base}.weight_g_idx"] = g_idx
    return edit


LAYER = "model.layers.2.mlp.up_proj"


def _act_order_config() -> dict[str, Any]:
    """w4a16's quantization_config with activation order (``actorder: group``)."""
    groups = json.loads((QUANT / "w4a16" / "config.json").read_text())["quantization_config"]["config_groups"]
    group = groups["group_0"]
    return {"config_groups": {"group_0": {**group, "weights": {**group["weights"], "actorder": "group"}}}}


@pytest.mark.slow
@pytest.mark.parametrize("value", [1000, -1, 2])
def test_an_act_order_group_index_outside_the_groups_is_one_line(cli: Any, tmp_path: Path, value: int) -> None:
    """1000 was an IndexError traceback and -1 silently took the last group; 2 is one past the
    layer's two groups (128 columns in groups of 64)."""
    folder = _mutant(tmp_path, "w4a16", _act_order_config(), _act_order({LAYER: value}))
    res = smoke(cli, (DRAFT, str(folder)), *FAST)
    one_error_line(res, "weight_g_idx tensor names groups", f"{min(value, 0)}..{max(value, 1)}", "groups 0..1",
                   code="DF181", alone=False)  # the loading line comes first


@pytest.mark.slow
def test_a_valid_act_order_group_index_runs(cli: Any, tmp_path: Path) -> None:
    """The same act-order target with every index in range dequantizes and runs."""
    folder = _mutant(tmp_path, "w4a16", _act_order_config(), _act_order())
    res = smoke(cli, (DRAFT, str(folder)), *FAST, "--min-acceptance", "0", "--json")
    assert res.code == 0, res.stderr
    q = json.loads(res.stdout)["results"][0]["quantization"]
    assert q["act_order"] is True and q["quantized_layers"] == 55


@pytest.mark.slow
@pytest.mark.parametrize("value", [1000, -1])
def test_a_gptq_group_index_outside_the_groups_is_one_line(cli: Any, tmp_path: Path, value: int) -> None:
    def edit(state: dict[str, torch.Tensor]) -> None:
        state[f"{LAYER}.g_idx"][5] = value

    folder = _mutant(tmp_path, "gptq", edit=edit)
    res = smoke(cli, (DRAFT, str(folder)), *FAST)
    one_error_line(res, "g_idx tensor names groups", "groups 0..1", code="DF181", alone=False)


def test_the_dequantization_bound_comes_from_the_headers() -> None:
    """Every format's largest layer (the MLP's [256, 128] and [128, 256]) is found from its own
    headers; pack-quantized's input width is the packed width's bound."""
    for variant in ("fp8-block", "awq", "gptq", "w4a16", "llmc-w4a16"):
        folder = QUANT / variant
        scheme = read_scheme(json.loads((folder / "config.json").read_text()), "config.json")
        assert scheme is not None
        tensors = load_inventory(LocalSource(folder)).tensors
        assert stored_dims(scheme, "model.layers.1.mlp.up_proj", tensors) == (256, 128), variant
        assert stored_dims(scheme, "model.layers.1.mlp.down_proj", tensors) == (128, 256), variant
        assert dequant_peak_bytes(scheme, tensors) == 256 * 128 * DEQUANT_BYTES_PER_ELEMENT, variant


def test_the_memory_estimate_counts_the_dequantization() -> None:
    cfg = json.loads((QUANT / "fp8-block" / "config.json").read_text())
    common: dict[str, Any] = dict(target=Shapes.of_target(target_from_config(cfg, label="t", where="t")),
                                  target_file_bytes=1, target_dtype=torch.bfloat16, draft=None, draft_file_bytes=1, draft_dtype=torch.bfloat16, capacity=64,
                                  longest=32, block=16, backend="native", taps=5)
    plain, quantized = estimate_run(**common), estimate_run(**common, dequant_bytes=12345)
    assert quantized.parts["dequantization"] == 12345 and quantized.total == plain.total + 12345
    assert "dequantization" not in plain.parts


def test_the_pre_check_refuses_a_quantized_run_naming_its_dequantization(cli: Any, monkeypatch: pytest.MonkeyPatch,
                                                                         never_dequantized: list[str]) -> None:
    import dflash_ckpt.runtime.memory as memory

    monkeypatch.setattr(memory, "memory_limits", lambda device: {"MemAvailable": 1 << 20})
    res = smoke(cli, (DRAFT, str(QUANT / "fp8-block")), *FAST)
    dequant = 256 * 128 * DEQUANT_BYTES_PER_ELEMENT / 2**30
    one_error_line(res, f"dequantization {dequant:.2f} GiB", "MemAvailable", code="DF407")
    assert never_dequantized == []


def test_each_quantization_format_is_one_record_in_its_own_module() -> None:
    """Issue 40: ``draftspec/quant/`` holds one module per ``quant_method`` whose record reads the
    config, names and checks one layer's tensors and dequantizes it; ``read_scheme`` dispatches
    through the table, and the scheme it returns carries its record."""
    from dflash_ckpt.draftspec.quant import FORMATS, SUPPORTED

    assert list(FORMATS) == ["fp8", "awq", "gptq", "compressed-tensors"]
    files = {"fp8": "fp8", "awq": "awq", "gptq": "gptq", "compressed-tensors": "compressed"}
    for method, record in FORMATS.items():
        module = record.parse.__module__
        assert module == f"dflash_ckpt.draftspec.quant.{files[method]}"
        assert record.require_layer.__module__ in (module, "dflash_ckpt.draftspec.quant.base")
        assert record.dequantize.__module__ == module
    assert SUPPORTED == tuple(r.supported for r in FORMATS.values())
    scheme = read_scheme({"quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 128}}, "c.json")
    assert scheme is not None and scheme.record is FORMATS["gptq"] and scheme.components("l") == {
        "qweight": "l.qweight", "qzeros": "l.qzeros", "scales": "l.scales", "g_idx": "l.g_idx"}
