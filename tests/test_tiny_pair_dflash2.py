"""The committed tiny DFlash2 draft (fixtures/tiny-pair/draft2*), through the CLI as a user runs it.

Trained by fixtures/train_tiny_draft2.py on the same data as the v1 ``draft/``; these tests read
the committed folders and never retrain. What issue 13 holds them to:
- ``draft2/`` passes smoke-run on the CPU with the default prompts and settings: lossless, and
  tau >= 4 at its block size (8);
- ``draft2-shifted-taps/`` (every tap moved by one, the same weights) passes inspect and fails
  smoke-run with exit 1 (tau < 2), like the v1 twin;
- both carry every DFlash2 tensor, named and shaped as the published DFlash2 checkpoints are.
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

import make_fixtures
from conftest import CliResult, config, header, no_traceback, run_cli

ROOT = Path(__file__).resolve().parents[1]
PAIR = ROOT / "fixtures" / "tiny-pair"
TARGET = PAIR / "target"
DRAFT2, SHIFTED2, DRAFT = PAIR / "draft2", PAIR / "draft2-shifted-taps", PAIR / "draft"
MIN_TAU = 4.0
MAX_SHIFTED_TAU = 2.0


@functools.lru_cache(maxsize=None)
def cli(*args: str) -> CliResult:
    res = run_cli(*args)
    no_traceback(res)
    return res


def smoke(draft: Path) -> tuple[int, dict[str, Any]]:
    pytest.importorskip("torch")
    pytest.importorskip("tokenizers")
    res = cli("smoke-run", str(draft), "--target", str(TARGET), "--json")
    assert res.code in (0, 1), res.stderr
    return res.code, res.merged()


def test_folders_hold_a_published_dflash2_layout() -> None:
    published = json.loads((ROOT / "fixtures/published/configs/Qwen3.8-27B-DFlash2.json").read_text())
    for folder in (DRAFT2, SHIFTED2):
        assert {p.name for p in folder.iterdir()} == {"config.json", "model.safetensors"}
        assert (folder / "model.safetensors").stat().st_size <= 5 * 2**20
        cfg = config(folder)
        assert cfg["architectures"] == ["DFlash2DraftModel"]
        dc = cfg["dflash_config"]
        # the published DFlash2 file's keys, inside dflash_config, in its order (alphabetical)
        assert set(published["dflash_config"]) <= set(dc) and list(dc) == sorted(dc)
        head = header(folder / "model.safetensors")
        expected = {name: shape for name, (_, shape) in make_fixtures.draft_tensors(cfg).items()}
        assert {k: v["shape"] for k, v in head.items()} == expected
        assert "candidate_selector.predecessor_codebook" in head and not any(k.endswith("codebook.weight") for k in head)
        assert {v["dtype"] for v in head.values()} == {"BF16"}


def test_shifted_twin_differs_only_in_its_taps() -> None:
    base, shifted = config(DRAFT2), config(SHIFTED2)
    taps = base["dflash_config"]["target_layer_ids"]
    assert shifted["dflash_config"]["target_layer_ids"] == [t + 1 for t in taps]
    assert {**shifted, "dflash_config": base["dflash_config"]} == base
    digest = [hashlib.sha256((f / "model.safetensors").read_bytes()).hexdigest() for f in (DRAFT2, SHIFTED2)]
    assert digest[0] == digest[1]
    # and the DFlash2 draft is the v1 draft's architecture plus DFlash2's parts, same data, same plan
    v1 = config(DRAFT)
    assert {k: v for k, v in base.items() if k not in ("architectures", "dflash_config")} == \
        {k: v for k, v in v1.items() if k not in ("architectures", "dflash_config")}


@pytest.mark.slow
@pytest.mark.parametrize("folder", [DRAFT2, SHIFTED2], ids=["draft2", "draft2-shifted-taps"])
def test_inspect_passes(folder: Path) -> None:
    res = cli("inspect", str(folder), "--target", str(TARGET), "--json", "--strict")
    assert res.code == 0, res.stdout
    doc = res.result()
    assert doc["generation"] == "DFlash2"
    assert {f["code"] for f in doc["findings"]} == {"DF220"}


@pytest.mark.slow
def test_draft2_passes_smoke_run() -> None:
    code, doc = smoke(DRAFT2)
    assert code == 0, doc["findings"]
    assert doc["ok"] and doc["settings"]["block_size"] == config(DRAFT2)["dflash_config"]["block_size"] == 8
    assert all(p["lossless"]["status"] == "identical" for p in doc["prompts"])
    assert doc["overall"]["tau"] >= MIN_TAU


@pytest.mark.slow
def test_draft2_shifted_taps_fails_smoke_run() -> None:
    code, doc = smoke(SHIFTED2)
    assert code == 1
    assert doc["overall"]["tau"] < MAX_SHIFTED_TAU
    assert all(p["lossless"]["status"] == "identical" for p in doc["prompts"]), "lossless even with wrong taps"
    low = [f for f in doc["findings"] if f["code"] == "DF403"]
    assert low and "target_layer_ids [2, 4, 6]" in low[0]["message"]


@pytest.mark.slow
def test_recorded_training_figures_match_the_run() -> None:
    """draft2-training.json records what smoke-run measures now (the same tokens, so the same tau)."""
    record = json.loads((PAIR / "draft2-training.json").read_text())
    _, doc = smoke(DRAFT2)
    assert record["acceptance"]["draft2"]["tau"] == round(doc["overall"]["tau"], 3)
    assert record["acceptance"]["draft2"]["lossless"] is True
    assert record["acceptance"]["draft2-shifted-taps"]["tau"] < MAX_SHIFTED_TAU
