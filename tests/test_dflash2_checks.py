"""inspect's weight checks cover every DFlash2 tensor: each one, missing or misshapen, is reported
by name, from the config's keys (fixtures/make_fixtures.py's independent shape table)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

import make_fixtures as mf
from dflash_ckpt.checks import run_checks
from dflash_ckpt.sources.local import LocalSource
from dflash_ckpt.draftspec.specs import build_spec, read_draft_spec as load_draft
from dflash_ckpt.draftspec.tensor_layout import DFLASH2_MARKERS, expected_tensors

V2_NAMES = [n for n in mf.draft_tensors(mf.SMALL_DRAFT2) if any(m in n for m in DFLASH2_MARKERS)]


def _findings(tmp_path: Path, cfg: dict[str, Any], tensors: mf.Tensors) -> list[Any]:
    folder = tmp_path / "d"
    mf.write_draft(folder, cfg, tensors=tensors, sparse=False)
    return run_checks(load_draft(LocalSource(folder)))


def test_every_dflash2_tensor_is_expected_with_the_published_shape() -> None:
    cfg = copy.deepcopy(mf.SMALL_DRAFT2)
    spec_shapes = expected_tensors(build_spec(cfg, label="x"))
    table = {n: tuple(s) for n, (_, s) in mf.draft_tensors(cfg).items()}
    assert spec_shapes == table
    assert len(V2_NAMES) == 4 * cfg["num_hidden_layers"] + 3
    assert "candidate_selector.predecessor_codebook" in V2_NAMES  # no .weight


@pytest.mark.parametrize("name", V2_NAMES)
def test_a_missing_dflash2_tensor_is_named(tmp_path: Path, name: str) -> None:
    cfg = copy.deepcopy(mf.SMALL_DRAFT2)
    tensors = mf.draft_tensors(cfg)
    del tensors[name]
    found = _findings(tmp_path, cfg, tensors)
    assert any(f.code == "DF212" and name in f.message for f in found), found


@pytest.mark.parametrize("name", V2_NAMES)
def test_a_misshapen_dflash2_tensor_is_named(tmp_path: Path, name: str) -> None:
    cfg = copy.deepcopy(mf.SMALL_DRAFT2)
    tensors = mf.draft_tensors(cfg)
    dtype, shape = tensors[name]
    tensors[name] = (dtype, shape[:-1] + [shape[-1] + 1])
    found = _findings(tmp_path, cfg, tensors)
    assert any(f.code == "DF213" and name in f.message for f in found), found


def test_the_clean_small_dflash2_draft_has_no_findings_but_the_summary(tmp_path: Path) -> None:
    found = _findings(tmp_path, copy.deepcopy(mf.SMALL_DRAFT2), mf.draft_tensors(mf.SMALL_DRAFT2))
    assert [f.code for f in found] == ["DF220"]
