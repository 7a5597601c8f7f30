"""The engines as they are now (issue 41 item 3): draft architectures registered by vLLM 0.33/0.34
and speculators 0.9.0 are known (no DF140) with what each engine does with them; exllamav3 1.6.5's
``tap_shift`` and learned ``mask_embedding`` tensor; SGLang's ``unquant`` draft quantization beside
a quantized target; TensorRT-LLM's attention-backend and RoPE-uniformity limits. Sources:
shared/ecosystem-2026-12.md sections 1.3-1.5 and 3 (rows 4, 6, 7)."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT
from dflash_ckpt.checks.engines.architectures import ARCHITECTURES, REFUSES, RUNS, UNKNOWN
from dflash_ckpt.checks.engines.launch import ServeFacts
from dflash_ckpt.checks.engines.registry import BY_KEY
from dflash_ckpt.checks.engines.tensorrt_llm import rope_differs
from dflash_ckpt.draftspec.architectures import DFLASH2_ARCHITECTURES, NEW_DSPARK_ARCHITECTURES, XPRESS_ARCHITECTURES
from dflash_ckpt.draftspec.specs import build_spec, read_draft_spec, read_target_spec
from dflash_ckpt.sources.resolve import open_source

TINY = ROOT / "fixtures" / "tiny-pair"


def draft_copy(tmp: Path, edit: dict[str, Any] | None = None, *, drop: tuple[str, ...] = (),
               extra: dict[str, tuple[int, ...]] | None = None) -> Path:
    """The tiny draft with ``edit`` merged into its config (``None`` values delete, ``dflash_config``
    merged key by key) and ``extra`` bf16 tensors appended to its safetensors."""
    out = tmp / "draft"
    shutil.copytree(TINY / "draft", out)
    cfg = json.loads((out / "config.json").read_text())
    for key, value in (edit or {}).items():
        if key == "dflash_config":
            cfg["dflash_config"].update(value)
        elif value is None:
            cfg.pop(key, None)
        else:
            cfg[key] = value
    for key in drop:
        cfg.pop(key, None)
    (out / "config.json").write_text(json.dumps(cfg))
    if extra:
        add_tensors(out / "model.safetensors", extra)
    return out


def add_tensors(path: Path, extra: dict[str, tuple[int, ...]]) -> None:
    """Append zero bf16 tensors to a safetensors file (header rewritten, data kept)."""
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = bytearray(raw[8 + n:])
    for name, shape in extra.items():
        size = 2
        for d in shape:
            size *= d
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [len(data), len(data) + size]}
        data += bytes(size)
    blob = json.dumps(header).encode()
    blob += b" " * (-len(blob) % 8)
    path.write_bytes(struct.pack("<Q", len(blob)) + blob + bytes(data))


def inspect(cli: Any, draft: Path, target: Path = TINY / "target") -> dict[str, Any]:
    return cli("inspect", str(draft), "--target", str(target), "--json").result()


def codes(result: dict[str, Any]) -> list[str]:
    return [f["code"] for f in result["findings"]]


# -- architectures ----------------------------------------------------------------------------------


def test_every_new_architecture_has_a_status_for_every_engine() -> None:
    names = XPRESS_ARCHITECTURES | NEW_DSPARK_ARCHITECTURES | (DFLASH2_ARCHITECTURES - {"DFlash2DraftModel"})
    assert names <= set(ARCHITECTURES) | {"DFlashSpeculator"}
    for arch, facts in ARCHITECTURES.items():
        assert facts.engines["vllm"][0] in (RUNS, REFUSES), arch  # every one read in vLLM's registry
        assert facts.other[0] in (RUNS, REFUSES, UNKNOWN) and facts.other[1], arch


@pytest.mark.parametrize("arch", ["Qwen3XPressModel", "DFlashQwen3XPressModel", "DFlashSpeculator"])
def test_dflash_backbones_are_known(cli: Any, tmp_path: Path, arch: str) -> None:
    res = inspect(cli, draft_copy(tmp_path, {"architectures": [arch]}))
    assert "DF140" not in codes(res) and res["generation"] == "DFlash"
    vllm = res["readers"]["vllm"]
    assert vllm["loads"] and arch in vllm["reason"]
    assert "unverified" in res["readers"]["sglang"]["reason"]


def test_xpress_head_is_its_own_and_speculators_xpress_is_refused_by_vllm(cli: Any, tmp_path: Path) -> None:
    draft = draft_copy(tmp_path, {"architectures": ["XPressSpeculator"]}, extra={"xpress_head.proj.weight": (4, 128)})
    res = inspect(cli, draft)
    assert "DF140" not in codes(res) and "DF214" not in codes(res)
    assert not res["readers"]["vllm"]["loads"] and "not xpress" in res["readers"]["vllm"]["reason"]
    assert res["readers"]["speculators"]["loads"]
    plain = inspect(cli, draft_copy(tmp_path / "b", extra={"xpress_head.proj.weight": (4, 128)}))
    assert "DF214" in codes(plain)  # the same tensor on a DFlash draft is unexpected


@pytest.mark.parametrize("arch", sorted(DFLASH2_ARCHITECTURES - {"DFlash2DraftModel"}))
def test_dflash2_variants_are_dflash2(tmp_path: Path, arch: str) -> None:
    spec = read_draft_spec(open_source(str(draft_copy(tmp_path, {"architectures": [arch]}))))
    assert spec.generation == "DFlash2"


@pytest.mark.parametrize("arch", sorted(NEW_DSPARK_ARCHITECTURES))
def test_new_dspark_drafts_are_dspark(tmp_path: Path, arch: str) -> None:
    spec = read_draft_spec(open_source(str(draft_copy(tmp_path, {"architectures": [arch]}))))
    assert spec.family == "DSpark" and spec.block_layout.layout == "anchor-first"


# -- exllamav3 1.6.5 ----------------------------------------------------------------------------------


def exl(cli: Any, tmp: Path, edit: dict[str, Any] | None = None, **kw: Any) -> dict[str, Any]:
    return inspect(cli, draft_copy(tmp, edit, **kw))["readers"]["exllamav3"]


def test_tap_shift_nested_top_and_default(cli: Any, tmp_path: Path) -> None:
    """``tap_shift`` nested then top, default 1 (architecture/dflash.py:23-26, 69-74), added to every tap."""
    default = exl(cli, tmp_path / "a")
    assert default["loads"] and default["reason"] == "loads as is"  # +1 by default: docs/engines.md
    nested = exl(cli, tmp_path / "b", {"dflash_config": {"tap_shift": 0}, "tap_shift": 2})
    assert nested["loads"] and "taps target_layer_ids + 0 (dflash_config.tap_shift)" in nested["reason"]  # nested wins
    top = exl(cli, tmp_path / "c", {"tap_shift": 2})
    assert top["loads"] and "taps target_layer_ids + 2 (tap_shift" in top["reason"]
    bad = exl(cli, tmp_path / "d", {"tap_shift": "one"})
    assert not bad["loads"] and "tap_shift is not an integer" in bad["reason"]
    beyond = exl(cli, tmp_path / "e", {"dflash_config": {"tap_shift": 3}})
    assert not beyond["loads"] and "[4, 6, 8] leave the target's 8 layers" in beyond["reason"]
    last = exl(cli, tmp_path / "g", {"dflash_config": {"target_layer_ids": [1, 3, 7]}})
    assert not last["loads"] and "+ 1 (its default) = [2, 4, 8]" in last["reason"]  # the default shift, last layer
    # only exllamav3 reads it
    res = inspect(cli, draft_copy(tmp_path / "f", {"tap_shift": 2}))
    assert "tap_shift" not in res["readers"]["vllm"]["reason"]


def test_learned_mask_embedding(cli: Any, tmp_path: Path) -> None:
    """A ``mask_embedding`` tensor of hidden_size (architecture/dflash.py:97-99) is no DF214; every
    serving engine but exllamav3 loads the draft without it (DF150)."""
    res = inspect(cli, draft_copy(tmp_path / "a", extra={"mask_embedding": (128,)}))
    assert "DF214" not in codes(res)
    (df150,) = [f for f in res["findings"] if f["code"] == "DF150"]
    assert "mask_embedding" in df150["message"] and "applied by exllamav3" in df150["message"]
    assert "mask_embedding" not in res["readers"]["exllamav3"]["reason"]
    assert "ignores the mask_embedding tensor" in res["readers"]["vllm"]["reason"]
    assert "mask_embedding" not in res["readers"]["speculators"]["reason"]  # serves nothing
    wrong = inspect(cli, draft_copy(tmp_path / "b", extra={"mask_embedding": (2, 64)}))
    assert any(f["code"] == "DF213" and "mask_embedding is [2, 64], expected [128]" in f["message"]
               for f in wrong["findings"])


def test_exllamav3_loads_laguna_now() -> None:
    assert "Laguna" in BY_KEY["exllamav3"].families and "Laguna" not in BY_KEY["exllamav3-legacy"].families


# -- SGLang: the draft's quantization --------------------------------------------------------------------


def facts(tmp: Path, *, target_q: bool, draft_q: bool) -> ServeFacts:
    target = tmp / "target"
    shutil.copytree(TINY / "target", target)
    cfg = json.loads((target / "config.json").read_text())
    if target_q:
        cfg["quantization_config"] = {"quant_method": "fp8", "ignored_layers": ["lm_head"]}
    (target / "config.json").write_text(json.dumps(cfg))
    draft = draft_copy(tmp, {"quantization_config": {"quant_method": "fp8"}} if draft_q else None)
    spec = read_draft_spec(open_source(str(draft)))
    return ServeFacts(spec, read_target_spec(open_source(str(target))), 8, 7, False, "D", "T", None, None)


@pytest.mark.parametrize(("target_q", "draft_q", "flag"), [(True, False, True), (False, False, False), (True, True, False)])
def test_sglang_keeps_the_draft_unquantized_beside_a_quantized_target(tmp_path: Path, target_q: bool, draft_q: bool,
                                                                       flag: bool) -> None:
    line = BY_KEY["sglang"].serve(facts(tmp_path, target_q=target_q, draft_q=draft_q))
    assert (["--speculative-draft-model-quantization", "unquant"] == line[line.index("--speculative-num-draft-tokens") + 2:][:2]) is flag
    assert ("unquant" in line) is flag


# -- TensorRT-LLM ------------------------------------------------------------------------------------


def test_trtllm_refuses_dflash2_under_its_default_attention_backend(tmp_path: Path) -> None:
    f = facts(tmp_path, target_q=False, draft_q=False)
    spec = read_draft_spec(open_source(str(draft_copy(tmp_path / "b", {"architectures": ["DFlash2DraftModel"]}))))
    verdict = BY_KEY["tensorrt-llm"].judge(spec, None)
    assert "refuses DFlash2 drafters under attn_backend TRTLLM" in verdict.reason
    script = BY_KEY["tensorrt-llm"].serve(f._replace(spec=spec))[2]
    assert "attn_backend: FLASHINFER" in script
    assert "attn_backend" not in BY_KEY["tensorrt-llm"].serve(f)[2]


MIXED = {"layer_types": ["sliding_attention", "full_attention"], "rope_theta": 10000.0}


@pytest.mark.parametrize(("extra", "differs"), [
    ({}, False),
    ({"rope_local_base_freq": 10000.0}, False),
    ({"rope_local_base_freq": 1000.0}, True),
    ({"rope_parameters": {"sliding_attention": {"rope_theta": 1e4}, "full_attention": {"rope_theta": 1e6}}}, True),
    ({"no_rope_layers": [1, 0]}, True),
])
def test_trtllm_rope_uniformity(extra: dict[str, Any], differs: bool) -> None:
    assert (rope_differs(build_spec({**MIXED, **extra}, label="d")) is not None) is differs
    uniform = build_spec({**MIXED, "layer_types": ["full_attention"] * 2, **extra}, label="d")
    assert rope_differs(uniform) is None  # uniform layers: fine


def test_trtllm_row_fails_on_mixed_rope(cli: Any, tmp_path: Path) -> None:
    draft = draft_copy(tmp_path, {"layer_types": ["sliding_attention", "full_attention"], "sliding_window": 16,
                                  "use_sliding_window": True, "rope_local_base_freq": 1000.0})
    row = inspect(cli, draft)["readers"]["tensorrt-llm"]
    assert not row["loads"] and "effective RoPE differ (rope_local_base_freq 1000.0 against rope_theta 10000.0" in row["reason"]
