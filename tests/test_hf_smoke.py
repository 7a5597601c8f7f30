"""``smoke-run --backend``: the transformers backend through the CLI, parity with the native one,
backend selection, and its refusals (one line, exit 2)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")

import hf_tiny  # noqa: E402
import tiny_models as tm  # noqa: E402
from conftest import no_traceback, one_error_line  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "fixtures" / "tiny-pair"
FP32 = ["--draft-dtype", "float32", "--target-dtype", "float32"]


@pytest.fixture(scope="module")
def hf_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("hfsmoke")
    tm.make_draft(root / "draft", hidden=64, taps=(0, 2, 3), num_target_layers=4)
    for fam in ("qwen3_moe", "qwen3_5", "gpt_oss", "llama"):
        hf_tiny.make_hf_target(root / fam, fam)
    hf_tiny.make_kimi_target(root / "kimi_k25")
    return root


def smoke(cli, draft: Path | str, target: Path | str, *args: str) -> Any:
    res = cli("smoke-run", str(draft), "--target", str(target), *args)
    no_traceback(res)
    return res


@pytest.mark.slow
def test_transformers_backend_matches_native_on_the_tiny_pair(cli) -> None:
    """Same tokens and the same acceptance length at every step, fp32, on the trained pair."""
    docs = {}
    for backend in ("native", "transformers"):
        res = smoke(cli, TINY / "draft", TINY / "target", *FP32, "-n", "48", "--json", "--backend", backend)
        assert res.code == 0, res.stdout
        docs[backend] = res.merged()
        assert docs[backend]["settings"]["backend"] == backend
    nat, hf = docs["native"], docs["transformers"]
    for a, b in zip(nat["prompts"], hf["prompts"], strict=True):
        assert a["target_output_ids"] == b["target_output_ids"]
        assert a["output_ids"] == b["output_ids"] == a["target_output_ids"]
        assert a["acceptance_lengths"] == b["acceptance_lengths"]
    assert nat["overall"]["tau"] == hf["overall"]["tau"] > 3  # a trained draft: long, varied acceptances


@pytest.mark.slow
def test_auto_picks_native_where_it_can_and_transformers_otherwise(cli, hf_root: Path) -> None:
    res = smoke(cli, TINY / "draft", TINY / "target", *FP32, "-n", "4", "--json")
    assert res.merged()["settings"]["backend"] == "native"
    res = smoke(cli, hf_root / "draft", hf_root / "qwen3_moe", *FP32, "-n", "24", "--min-acceptance", "0")
    assert res.code == 0, res.stdout
    assert "backend transformers" in res.stdout and "smoke-run, transformers backend" in res.stdout
    assert "3/3 same" in res.stdout


@pytest.mark.slow
@pytest.mark.parametrize("family", ["qwen3_5", "gpt_oss", "kimi_k25"])
def test_smoke_run_on_published_families_is_lossless(cli, hf_root: Path, family: str) -> None:
    """A random draft on a Qwen3.5 wrapper (Gated DeltaNet, text_config), gpt-oss (sliding window 6
    under ~30-token prompts, sinks, MoE) and a Kimi-K2.5 wrapper (MLA + MoE): output == greedy."""
    res = smoke(cli, hf_root / "draft", hf_root / family, *FP32, "-n", "24", "--min-acceptance", "0", "--json")
    assert res.code == 0, res.stdout
    doc = res.merged()
    assert doc["settings"]["backend"] == "transformers"
    for p in doc["prompts"]:
        assert p["output_ids"] == p["target_output_ids"] and len(p["output_ids"]) == 24
        assert p["lossless"]["status"] == "identical"
        assert len(p["input_ids"]) > hf_tiny.WINDOW


def _edited(src: Path, dst: Path, **changes: Any) -> Path:
    shutil.copytree(src, dst)
    cfg = json.loads((dst / "config.json").read_text())
    cfg.update(changes)
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


def test_refusals_name_what_is_supported(cli, hf_root: Path, tmp_path: Path) -> None:
    draft, moe = hf_root / "draft", hf_root / "qwen3_moe"
    err = one_error_line(smoke(cli, draft, moe, "--backend", "native"))
    assert "dense Qwen3" in err and "--backend transformers (or auto) runs this target" in err
    custom = _edited(moe, tmp_path / "custom", model_type="my_custom_lm",
                     auto_map={"AutoModelForCausalLM": "modeling_my.MyLM"})
    err = one_error_line(smoke(cli, draft, custom, "--backend", "transformers"))
    assert "'my_custom_lm' is not implemented by transformers" in err and "auto_map" in err
    assert "'gpt_oss'" in err and "'qwen3_5_text' (in qwen3_5)" in err
    fp8 = _edited(moe, tmp_path / "fp8", quantization_config={"quant_method": "fp8"})
    err = one_error_line(smoke(cli, draft, fp8, "--backend", "transformers"))
    assert "quant_method 'fp8'" in err
    err = one_error_line(smoke(cli, draft, moe, "--backend", "onnx"))
    assert "DF004 error: Invalid value for '--backend': 'onnx' is not one of 'auto', 'native', 'transformers'" in err


def test_unverified_transformers_family_is_refused(cli, hf_root: Path, tmp_path: Path) -> None:
    mistral = _edited(hf_root / "qwen3_moe", tmp_path / "mistral", model_type="mistral")
    err = one_error_line(smoke(cli, hf_root / "draft", mistral, "--backend", "transformers"))
    assert "'mistral'" in err and "not one the transformers backend was verified on" in err


def test_a_target_too_big_for_the_device_is_refused_before_loading(cli, hf_root: Path, monkeypatch) -> None:
    import dflash_ckpt.runtime.memory as memory

    monkeypatch.setattr(memory, "memory_limits", lambda device: {"MemAvailable": 1000})
    loaded = []
    import dflash_ckpt.runtime.hf_target as hf_target

    monkeypatch.setattr(hf_target, "load_hf_target", lambda *a, **k: loaded.append(1))
    err = one_error_line(smoke(cli, hf_root / "draft", hf_root / "gpt_oss", *FP32))
    assert "only 0.00 GiB (1000 bytes) are free (MemAvailable)" in err and "bytes) at its peak on cpu (weights" in err
    assert not loaded


def test_without_transformers_the_refusal_says_how_to_install_it(cli, hf_root: Path, monkeypatch) -> None:
    import dflash_ckpt.runtime.backend as sb

    monkeypatch.setattr(sb, "hf_available", lambda: False)
    err = one_error_line(smoke(cli, hf_root / "draft", hf_root / "qwen3_moe"))
    assert "transformers backend" in err and '".[run,hf]"' in err
    err = one_error_line(smoke(cli, hf_root / "draft", hf_root / "qwen3_moe", "--backend", "transformers"))
    assert "needs transformers, which is not installed" in err
    res = smoke(cli, TINY / "draft", TINY / "target", *FP32, "-n", "4", "--json")  # native needs none
    assert res.code == 0 and res.merged()["settings"]["backend"] == "native"


def test_auto_hands_a_native_family_with_an_unimplemented_setting_to_transformers(cli, hf_root: Path,
                                                                                  tmp_path: Path) -> None:
    """A Llama with dynamic rope scaling: native refuses it (naming the way out), auto runs it."""
    dyn = _edited(hf_root / "llama", tmp_path / "dyn",
                  rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0})
    err = one_error_line(smoke(cli, hf_root / "draft", dyn, "--backend", "native", *FP32))
    assert "rope_type 'dynamic'" in err and "--backend transformers (or auto) runs this target" in err
    res = smoke(cli, hf_root / "draft", dyn, *FP32, "-n", "16", "--min-acceptance", "0", "--json")
    assert res.code == 0, res.stdout
    doc = res.merged()
    assert doc["settings"]["backend"] == "transformers"
    assert all(p["lossless"]["status"] == "identical" for p in doc["prompts"])
