"""inspect's output contract: the JSON schema, -q, --strict, several drafts, rules, no torch."""

from __future__ import annotations

import pytest

import subprocess
import sys
from pathlib import Path

from conftest import run_cli
from dflash_ckpt.rules import RULES


def test_json_schema(fixtures_root: Path) -> None:
    res = run_cli("inspect", str(fixtures_root / "drafts/Qwen3.6-27B-DFlash-sharded"), "--target", str(fixtures_root / "targets/Qwen3.6-27B"), "--json")
    assert res.code == 0
    doc = res.result()
    assert {"draft", "ok", "exit_code", "error", "layout", "generation", "resolved", "sources",
            "target", "findings", "readers", "counts", "bytes_read", "normalize_command", "serve"} <= set(doc)
    assert doc["resolved"] == {"block_size": 16, "mask_token_id": 248070, "target_layer_ids": [1, 16, 31, 46, 61], "num_target_layers": 64}
    assert doc["sources"] == {"block_size": "top_level", "mask_token_id": "dflash_config", "target_layer_ids": "dflash_config", "num_target_layers": "top_level"}
    assert set(doc["readers"]) == {"zlab-legacy", "zlab", "sglang", "vllm", "lmdeploy", "speculators", "tensorrt-llm",
                                   "zlab-mlx", "mlx-vlm", "exllamav3-legacy", "exllamav3"}
    assert set(doc["serve"]) == {"vllm", "sglang", "tensorrt-llm"}  # block_size at the top: lmdeploy 0.18 fails
    for verdict in doc["readers"].values():
        assert isinstance(verdict["loads"], bool) and verdict["reason"] and isinstance(verdict["fixed_by_normalize"], bool)
    for f in doc["findings"]:
        assert set(f) == {"code", "severity", "path", "key", "message"} and f["code"] in RULES
    assert doc["target"] == {"label": str(fixtures_root / "targets/Qwen3.6-27B"), "model_type": "qwen3_5", "num_hidden_layers": 64,
                             "hidden_size": 5120, "vocab_size": 248320, "pad_token_id": None, "text_config": True}


def test_reads_headers_not_weights(fixtures_root: Path) -> None:
    """16 shards of a 27B-target draft (GBs on paper): bytes read stay proportional to the headers."""
    folder = fixtures_root / "drafts/Qwen3.6-27B-DFlash-sharded"
    doc = run_cli("inspect", str(folder), "--json").result()
    shards = sorted(folder.glob("*.safetensors"))
    assert len(shards) == 16
    headers = sum(8 + int.from_bytes(p.open("rb").read(8), "little") for p in shards)
    small_files = (folder / "config.json").stat().st_size + (folder / "model.safetensors.index.json").stat().st_size
    apparent = sum(p.stat().st_size for p in shards)
    assert apparent > 3 * 2**30
    assert doc["bytes_read"] == headers + small_files


@pytest.mark.slow
def test_quiet_prints_only_errors(fixtures_root: Path) -> None:
    clean = run_cli("inspect", "-q", str(fixtures_root / "drafts/Qwen3-4B-DFlash-b16"))
    assert clean.code == 0 and clean.stdout == ""
    bad = run_cli("inspect", "-q", str(fixtures_root / "mutants/DF212-missing-k-norm"))
    assert bad.code == 1
    lines = bad.stdout.strip().splitlines()
    where = fixtures_root / "mutants/DF212-missing-k-norm"
    assert len(lines) == 1 and lines[0].startswith(f"{where}: DF212 error: ") and "layers.1.self_attn.k_norm.weight" in lines[0]


@pytest.mark.slow
def test_strict_turns_warnings_into_failures(fixtures_root: Path) -> None:
    warn = fixtures_root / "mutants/DF216-model-prefix"
    assert run_cli("inspect", str(warn)).code == 0
    strict = run_cli("inspect", "--strict", "-q", str(warn))
    assert strict.code == 1 and "DF216 warning" in strict.stdout
    info_only = fixtures_root / "mutants/DF133-no-layer-types"
    assert run_cli("inspect", "--strict", str(info_only), "--ignore", "DF148").code == 0  # the base's top-level block_size


@pytest.mark.slow
def test_several_drafts_one_table_worst_exit(fixtures_root: Path) -> None:
    args = [str(fixtures_root / "drafts/Qwen3-4B-DFlash-b16"), str(fixtures_root / "mutants/DF213-wrong-kv-shape"),
            str(fixtures_root / "drafts/Qwen3.8-27B-DFlash2")]
    res = run_cli("inspect", *args)
    assert res.code == 1
    assert res.stdout.count("DFlash drafts") == 1
    assert "DF213 error" in res.stdout and "Resolved DFlash keys" not in res.stdout
    with_missing = run_cli("inspect", *args, str(fixtures_root / "nope"))
    assert with_missing.code == 2
    doc = run_cli("inspect", *args, "--json").json()
    assert doc["exit_code"] == 1 and doc["ok"] is False
    assert [r["ok"] for r in doc["results"]] == [True, False, True]
    assert [r["generation"] for r in doc["results"]] == ["DFlash", "DFlash", "DFlash2"]


@pytest.mark.slow
def test_from_file(fixtures_root: Path, tmp_path: Path) -> None:
    listing = tmp_path / "drafts.txt"
    listing.write_text(f"# published\n{fixtures_root / 'drafts/Qwen3-8B-DFlash-b16'}\n\n{fixtures_root / 'drafts/gpt-oss-20b-DFlash'}  # biases\n")
    doc = run_cli("inspect", "--from-file", str(listing), "--json").json()
    assert [r["draft"] for r in doc["results"]] == [str(fixtures_root / "drafts/Qwen3-8B-DFlash-b16"), str(fixtures_root / "drafts/gpt-oss-20b-DFlash")]
    assert run_cli("inspect", "--from-file", str(tmp_path / "missing.txt")).code == 2


@pytest.mark.slow
def test_rules_lists_and_explains() -> None:
    res = run_cli("rules")
    assert res.code == 0
    for code in RULES:
        assert code in res.stdout
    one = run_cli("rules", "df211")
    assert one.code == 0
    assert "fc-shape" in one.stdout and "Fix:" in one.stdout and "k = len(target_layer_ids)" in one.stdout
    doc = run_cli("rules", "--json").json()
    assert doc["schema_version"] == 2 and doc["command"] == "rules" and doc["ok"] and doc["error"] is None
    assert [r["code"] for r in doc["results"]] == list(RULES)
    assert all(r["explanation"] and r["fix"] and r["severity"] in ("error", "warning", "info") for r in doc["results"])
    single = run_cli("rules", "DF211", "--json").json()
    assert set(single) == set(doc) and single["results"] == [RULES["DF211"].to_json()]


def test_rule_codes_are_stable_and_unique() -> None:
    codes = list(RULES)
    assert len(codes) == len(set(codes))
    assert all(c.startswith("DF") and len(c) == 5 and c[2:].isdigit() for c in codes)
    assert len({r.name for r in RULES.values()}) == len(codes)


def test_cli_import_does_not_import_torch() -> None:
    out = subprocess.run([sys.executable, "-X", "importtime", "-c", "import dflash_ckpt.cli"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    modules = {line.rsplit("|", 1)[-1].strip() for line in out.stderr.splitlines() if "|" in line}
    assert "dflash_ckpt.cli" in modules
    assert "torch" not in modules and "huggingface_hub" not in modules


def test_inspect_run_does_not_import_torch(fixtures_root: Path) -> None:
    code = (
        "import sys; from dflash_ckpt.cli import run; "
        f"rc = run(['inspect', {str(fixtures_root / 'drafts/Qwen3-4B-DFlash-b16')!r}, '--json']); "
        "assert 'torch' not in sys.modules, 'torch imported'; print('RC', rc)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert "RC 0" in out.stdout, out.stderr


def test_python_dash_m_and_version() -> None:
    res = run_cli("--version")
    assert res.code == 0 and res.stdout.startswith("dflash-ckpt ")
