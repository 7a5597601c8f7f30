"""Findings and errors carry their location as fields (``path``, ``key``), set where they are
made; the output formats read those fields and never parse a location back out of a message.

A location parsed from ``PATH: message`` goes wrong for a folder whose name holds ``": "``, a
space, or text that looks like a rule code; these tests pin that such names come out whole.
"""

from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from conftest import run_cli
from dflash_ckpt.api import inspect as api_inspect
from dflash_ckpt.errors import DFlashCkptError, InputError, error_line
from dflash_ckpt.output_formats import artifact_uri, file_of, sarif_document
from dflash_ckpt.rules import Finding, finding

ROOT = Path(__file__).parents[1]
PACKAGE = ROOT / "dflash_ckpt"
PUBLISHED_NAMES = list(json.loads((ROOT / "fixtures/published/index.json").read_text()))


def _calls_to(name: str) -> list[tuple[Path, ast.Call]]:
    out = []
    for file in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(file.read_text(), str(file))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == name:
                out.append((file, node))
    return out


@pytest.mark.slow
def test_every_finding_call_says_where_it_is() -> None:
    """Each ``finding(...)`` names its ``path`` (``None`` for a run's finding about no file)."""
    calls = _calls_to("finding")
    assert len(calls) > 80
    missing = [f"{file.relative_to(ROOT)}:{node.lineno}" for file, node in calls
               if not any(k.arg == "path" for k in node.keywords)]
    assert missing == [], missing


def test_no_module_parses_a_location_back_out_of_a_message() -> None:
    """The splitter that probed the file system to cut ``PATH: message`` apart is gone."""
    import dflash_ckpt.errors
    import dflash_ckpt.rules

    assert not hasattr(dflash_ckpt.errors, "split_location")
    assert not hasattr(dflash_ckpt.rules, "_KEY")
    offenders = [str(f.relative_to(ROOT)) for f in PACKAGE.rglob("*.py") if "split_location" in f.read_text()]
    assert offenders == []


def _cases(root: Path) -> list[tuple[str, str | None]]:
    manifest = json.loads((root / "mutants/manifest.json").read_text())
    cases: list[tuple[str, str | None]] = [
        (str(root / "mutants" / entry.get("draft", name)), str(root / "mutants" / entry["target"]))
        for name, entry in sorted(manifest.items())
    ]
    published = json.loads((ROOT / "fixtures/published/index.json").read_text())
    for name in PUBLISHED_NAMES:
        target = root / "targets" / published[name]["target"].split("/")[-1]
        cases += [(str(root / "drafts" / name), str(target)), (str(root / "drafts" / f"{name}-sharded"), None)]
    return cases


def _check_formats(run: Any) -> int:
    """Every finding of ``run`` has its path as a field, and the JSON and SARIF carry that field."""
    doc = run.envelope()
    findings: list[Finding] = run.findings
    shown = [f for r in doc["results"] for f in r["findings"]]
    assert [(f["code"], f["path"], f["key"], f["message"]) for f in shown] == \
        [(f.code, f.path, f.key, f.message) for f in findings]
    sarif = sarif_document(doc)["runs"][0]["results"]
    carried = [r for r in sarif if r["message"]["text"] in {f.message for f in findings}]
    for f in findings:
        assert isinstance(f.path, str) and f.path, f
        assert not f.message.startswith(f"{f.path}: "), f  # the location is not repeated in the text
        hit = [r for r in carried if r["ruleId"] == f.code and r["message"]["text"] == f.message]
        assert hit, f
        uri = hit[0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
        assert uri == artifact_uri(file_of(f.path))
        names = [loc["fullyQualifiedName"] for loc in hit[0]["locations"][0].get("logicalLocations", [])]
        assert names == ([f.key] if f.key else [])
    return len(findings)


@pytest.mark.slow
def test_every_fixture_finding_carries_its_path_as_a_field(fixtures_root: Path) -> None:
    """Across the mutants (one defect each) and the published drafts, every finding inspect makes
    is located by its ``path`` field, and the JSON and SARIF outputs read that field."""
    total = 0
    for draft, target in _cases(fixtures_root):
        total += _check_formats(api_inspect(draft, target))
    assert total > 100


@pytest.mark.slow
@pytest.mark.parametrize("folder", ["weird: DF123 dir", "x: y: z", "sp ace: DF102 error", "DF101: error"])
def test_a_folder_name_that_looks_like_a_location_stays_whole(fixtures_root: Path, tmp_path: Path, folder: str) -> None:
    """A folder named with ``": "`` or a rule code: findings and errors name the whole path."""
    parent = tmp_path / folder
    draft = parent / "bad"
    shutil.copytree(fixtures_root / "mutants/DF120-block-size-one", draft)
    target = fixtures_root / "mutants/targets/small"
    run = api_inspect(str(draft), str(target))
    df120 = [f for f in run.findings if f.code == "DF120"]
    assert [f.path for f in df120] == [f"{draft}/config.json"]
    assert df120[0].key == "block_size" and df120[0].message.startswith("key 'block_size' is 1")
    assert all(f.path and f.path.startswith(str(draft)) for f in run.findings)
    _check_formats(run)

    missing = parent / "nothere"
    res = run_cli("inspect", str(missing), "--json")
    assert res.code == 2
    doc = res.result()
    assert doc["error"]["path"] == str(missing) and doc["error"]["code"] == "DF001"
    assert doc["error"]["message"] == f"{missing}: {doc['findings'][0]['message']}"
    line = run_cli("inspect", str(missing)).stderr.strip().splitlines()[-1]
    assert line.startswith(f"{missing}: DF001 error: no such folder")


def test_an_error_keeps_its_fields_and_its_one_line() -> None:
    """``DFlashCkptError``'s location is a field; the line and the message are built from it, and
    an error raised without one still takes the old positional form."""
    err = InputError("no such folder", code="DF001", path="a b: DF102 error/x", key="draft")
    assert (err.path, err.key, err.text) == ("a b: DF102 error/x", "draft", "no such folder")
    assert err.message == "a b: DF102 error/x: no such folder"
    assert err.line() == error_line("a b: DF102 error/x", "DF001", "error", "no such folder")
    plain = DFlashCkptError("--device x: use auto, cpu, cuda or cuda:N", code="DF004")
    assert plain.path is None and plain.line("smoke-run").startswith("smoke-run: DF004 error: --device x:")
    f = finding("DF120", "key 'block_size' is 1", path=Path("d") / "config.json", key="block_size")
    assert (f.path, f.key) == (str(Path("d") / "config.json"), "block_size")
