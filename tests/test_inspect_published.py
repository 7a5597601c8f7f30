"""Every published draft config passes inspect against its target, in one file and sharded."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import run_cli

PUBLISHED_NAMES = list(json.loads((Path(__file__).parents[1] / "fixtures/published/index.json").read_text()))


def _target_dir(root: Path, entry: dict[str, Any]) -> Path:
    return root / "targets" / entry["target"].split("/")[-1]


@pytest.mark.parametrize("sharded", [False, True], ids=["single", "sharded"])
@pytest.mark.parametrize("name", PUBLISHED_NAMES)
def test_published_draft_passes_with_its_target(fixtures_root: Path, published: dict[str, Any], name: str, sharded: bool) -> None:
    entry = published[name]
    draft = fixtures_root / "drafts" / (name + ("-sharded" if sharded else ""))
    res = run_cli("inspect", str(draft), "--target", str(_target_dir(fixtures_root, entry)), "--json")
    assert res.code == 0, res.stdout + res.stderr
    doc = res.result()
    assert doc["ok"] is True
    # the one warning a published draft carries: a reader that needs normalize (DF148: z-lab's
    # top-level block_size fails lmdeploy 0.18), naming the normalize line that fixes it
    warnings = [f for f in doc["findings"] if f["severity"] != "info"]
    assert [f["code"] for f in warnings] == (["DF148"] if doc["normalize_command"] else []), warnings
    assert all(f"`{doc['normalize_command']}`" in f["message"] for f in warnings)
    cfg = json.loads((draft / "config.json").read_text())
    dc = cfg["dflash_config"]
    assert doc["resolved"] == {
        "block_size": dc.get("block_size", cfg.get("block_size")),
        "mask_token_id": dc["mask_token_id"],
        "target_layer_ids": dc["target_layer_ids"],
        "num_target_layers": cfg["num_target_layers"],
    }
    assert doc["resolved"]["num_target_layers"] == entry["target_config"]["num_hidden_layers"]
    assert doc["sources"]["block_size"] == ("dflash_config" if "block_size" in dc else "top_level")
    assert doc["layout"] == ("nested" if "block_size" in dc else "top-level")
    assert doc["generation"] == ("DFlash2" if "DFlash2DraftModel" in cfg["architectures"] else "DFlash")
    assert doc["target"]["num_hidden_layers"] == entry["target_config"]["num_hidden_layers"]
    assert doc["target"]["text_config"] == entry["target_config"]["model_type"].startswith("qwen3_5")
    dtype = next(f for f in doc["findings"] if f["code"] == "DF220")
    assert dtype["message"].count("BF16") == 1


def test_layouts_give_reader_verdicts_from_design(fixtures_root: Path) -> None:
    """Older layout (block_size at top): lmdeploy fails; newer nested layout: the older z-lab fails."""
    older = run_cli("inspect", str(fixtures_root / "drafts/Qwen3-4B-DFlash-b16"), "--json").result()
    assert older["readers"]["lmdeploy"]["loads"] is False
    assert "block_size" in older["readers"]["lmdeploy"]["reason"]
    assert all(older["readers"][r]["loads"] for r in ("zlab-legacy", "zlab", "sglang", "vllm", "speculators"))
    newer = run_cli("inspect", str(fixtures_root / "drafts/Qwen3.5-122B-A10B-DFlash"), "--json").result()
    assert newer["readers"]["zlab-legacy"]["loads"] is False
    assert "top level" in newer["readers"]["zlab-legacy"]["reason"]
    assert all(newer["readers"][r]["loads"] for r in ("zlab", "sglang", "vllm", "lmdeploy", "speculators"))
    assert "num_speculative_tokens=15" in newer["readers"]["vllm"]["reason"]


def test_draft_against_the_wrong_target_fails(fixtures_root: Path) -> None:
    """Qwen3-4B's draft on Qwen3-8B: hidden sizes differ (2560 vs 4096)."""
    res = run_cli("inspect", str(fixtures_root / "drafts/Qwen3-4B-DFlash-b16"), "--target", str(fixtures_root / "targets/Qwen3-8B"), "--json")
    assert res.code == 1
    codes = {f["code"] for f in res.result()["findings"]}
    assert "DF302" in codes and "DF301" not in codes


def test_human_report_shows_keys_findings_and_readers(fixtures_root: Path) -> None:
    res = run_cli("inspect", str(fixtures_root / "drafts/gpt-oss-20b-DFlash"), "--target", str(fixtures_root / "targets/gpt-oss-20b"))
    assert res.code == 0, res.stderr
    out = res.stdout
    for text in ("layout top-level", "generation DFlash", "block_size", "200000", "[1, 6, 11, 16, 21]",
                 "top level", "dflash_config", "DF141", "SGLang", "lmdeploy 0.18", "OK"):
        assert text in out, text
    assert "24 layers, hidden 2880, vocab 201088" in out
