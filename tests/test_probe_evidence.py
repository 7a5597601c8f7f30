"""probe-taps does not claim a narrow winner: it measures again on more evidence, else DF412.

The issue's case: ``fixtures/tiny-pair/draft`` with its taps removed and ``-n 24`` gave the
one-layer-off [2, 3, 5] at "narrow" confidence, PASS, exit 0, and ``--write`` wrote it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from conftest import no_traceback, run_cli

ROOT = Path(__file__).resolve().parents[1]
PAIR = ROOT / "fixtures" / "tiny-pair"
TARGET, DRAFT = PAIR / "target", PAIR / "draft"
TRAINED = [1, 3, 5]


def _stripped(tmp_path: Path) -> Path:
    folder = tmp_path / "draft"
    shutil.copytree(DRAFT, folder)
    cfg = json.loads((folder / "config.json").read_text())
    cfg["dflash_config"].pop("target_layer_ids")
    (folder / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    return folder


@pytest.mark.slow
def test_a_narrow_lead_at_24_tokens_is_measured_again_not_claimed(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("tokenizers")
    draft, out = _stripped(tmp_path), tmp_path / "out"
    res = run_cli("probe-taps", str(draft), "--target", str(TARGET), "-n", "24", "--json", "--write", str(out),
                  env={"OMP_NUM_THREADS": "1"})
    no_traceback(res)
    doc = res.merged()
    rounds = doc["evidence"]["rounds"]
    # The first round is the issue's: narrow, and not the trained set.
    assert rounds[0]["max_new_tokens"] == 24 and rounds[0]["verdict"] == "narrow", rounds
    assert len(rounds) > 1 and [r["max_new_tokens"] for r in rounds] == [24 * 2**i for i in range(len(rounds))]
    if doc["evidence"]["settled"]:
        # More tokens separate them: the trained taps, at least "likely", written.
        assert res.code == 0 and doc["best"]["target_layer_ids"] == TRAINED
        assert doc["confidence"]["verdict"] in ("likely", "clear") and doc["findings"] == []
        assert json.loads((out / "config.json").read_text())["dflash_config"]["target_layer_ids"] == TRAINED
    else:  # still narrow once the budget is spent: a finding, exit 1, nothing written
        assert res.code == 1 and [f["code"] for f in doc["findings"]] == ["DF412"] and not out.exists()
    assert doc["best"]["measured_by"] == "loop" and doc["best"]["tau"] == doc["best"]["tau_loop"]


def _result(configured: Any, *cands: Any, write: Path | None = None) -> Any:
    from dflash_ckpt.run.options import ProbeOptions
    from dflash_ckpt.run.probe_result import ProbeResult

    res = ProbeResult(str(DRAFT), str(TARGET), ProbeOptions(str(DRAFT), str(TARGET), write=write),
                      draft_path=str(DRAFT), target_path=str(TARGET), configured=configured)
    res.ranked = list(cands)
    return res


def test_df412_fires_for_a_narrow_recovered_winner_only() -> None:
    pytest.importorskip("torch")
    from dflash_ckpt.checks.run_findings import unclear_findings
    from dflash_ckpt.runtime.measure import Candidate

    lead = Candidate((2, 3, 5), 3.83, lengths=[3, 5, 4, 3] * 6)
    close = Candidate((1, 3, 5), 3.63, lengths=[4, 3, 3, 4] * 6)
    far = Candidate((2, 4, 6), 1.03, lengths=[1] * 30 + [2])
    res = _result(None, lead, close)
    res.evidence = {"rounds": [{}, {}, {}, {}], "max_new_tokens": 192}
    found = unclear_findings(res)
    assert [f.code for f in found] == ["DF412"] and found[0].key == "target_layer_ids"
    assert "[2, 3, 5] (tau 3.83) leads [1, 3, 5] (tau 3.63)" in found[0].message
    assert "after 3 more round(s)" in found[0].message and "up to 192 tokens" in found[0].message
    assert unclear_findings(_result(None, lead, far)) == [], "a clear lead is a winner"
    assert unclear_findings(_result((1, 3, 5), lead, close)) == [], "configured ids are checked by DF410, not DF412"
    assert unclear_findings(_result(None, lead)) == [], "a single candidate has no runner-up"


def test_write_refuses_an_unclear_winner_without_force(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from dflash_ckpt.checks.run_findings import unclear_findings
    from dflash_ckpt.canonical.measured import write_copy
    from dflash_ckpt.runtime.measure import Candidate
    from dflash_ckpt.errors import CheckFailed

    out = tmp_path / "out"
    lead = Candidate((2, 3, 5), 3.83, lengths=[3, 5, 4, 3] * 6)
    close = Candidate((1, 3, 5), 3.63, lengths=[4, 3, 3, 4] * 6)
    stripped = _stripped(tmp_path)
    res = _result(None, lead, close, write=out)
    res.draft_path = str(stripped)
    res.findings = unclear_findings(res)
    with pytest.raises(CheckFailed, match="DF412.*--force"):
        write_copy(res, quiet=True)
    assert not out.exists()
    res.options.force = True
    assert write_copy(res, quiet=True)["written"]
    assert json.loads((out / "config.json").read_text())["dflash_config"]["target_layer_ids"] == [2, 3, 5]
