"""DF431: a target whose mask-token embedding row is about zero, with no mask embedding shipped
beside the draft (sglang#27924, MiMo; shared/ecosystem-2026-12.md section 3 row 13)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

from conftest import ROOT
from dflash_ckpt.checks.mask_row import mask_row_findings, row_ratio

TINY = ROOT / "fixtures" / "tiny-pair"


def table(zero_row: int | None = None) -> torch.Tensor:
    w = torch.randn(64, 16, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    if zero_row is not None:
        w[zero_row] = 0
    return w


def test_ratio() -> None:
    assert row_ratio(table(5), 5) == 0.0
    assert 0.3 < row_ratio(table(), 5) < 3
    assert row_ratio(table(), 64) is None and row_ratio(torch.zeros(4, 4), 1) is None


def test_zero_row_without_a_mask_embedding(tmp_path: Path) -> None:
    (found,) = mask_row_findings(table(5), 5, tmp_path, ["fc.weight"], "tgt")
    assert found.code == "DF431" and "mask_token_id 5 is about zero" in found.message
    assert mask_row_findings(table(), 5, tmp_path, ["fc.weight"], "tgt") == []  # a trained row
    assert mask_row_findings(table(5), 5, tmp_path, ["fc.weight", "mask_embedding"], "tgt") == []  # exllamav3's tensor
    (tmp_path / "mask_embedding.pt").write_bytes(b"")
    assert mask_row_findings(table(5), 5, tmp_path, ["fc.weight"], "tgt") == []  # the published side file
    assert mask_row_findings(table(5), None, tmp_path, [], "tgt") == []


@pytest.mark.slow
def test_smoke_run_names_a_zero_mask_row(cli: Any, tmp_path: Path) -> None:
    from safetensors.torch import load_file, save_file

    target = tmp_path / "target"
    shutil.copytree(TINY / "target", target)
    weights = load_file(str(target / "model.safetensors"))
    weights["model.embed_tokens.weight"][725] = 0
    save_file(weights, str(target / "model.safetensors"), metadata={"format": "pt"})
    res = cli("smoke-run", str(TINY / "draft"), "--target", str(target), "-p", "hello there", "-n", "8", "--json")
    findings = res.result()["findings"]
    assert [f["code"] for f in findings if f["code"] == "DF431"] == ["DF431"], findings
    clean = cli("smoke-run", str(TINY / "draft"), "--target", str(TINY / "target"), "-p", "hello there", "-n", "8",
                "--json")
    assert not any(f["code"] == "DF431" for f in clean.result()["findings"])
