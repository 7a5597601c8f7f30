"""inspect --output-format github|sarif: CI annotations and a SARIF 2.1.0 log, from the same findings as --json.

No copy of the SARIF 2.1.0 JSON Schema ships in a package installable here (sarif-om and
sarif-tools carry none), so ``SARIF_REQUIRED`` below checks the properties the SARIF 2.1.0
specification makes required (and the types GitHub code scanning reads) with jsonschema.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from conftest import ROOT
from dflash_ckpt.output_formats import artifact_uri, escape_data, escape_property, github_annotations, sarif_document
from dflash_ckpt.rules import RULES

_MESSAGE = {"type": "object", "required": ["text"], "properties": {"text": {"type": "string", "minLength": 1}}}
SARIF_REQUIRED: dict[str, Any] = {
    "type": "object",
    "required": ["version", "runs"],
    "properties": {
        "version": {"const": "2.1.0"},
        "$schema": {"type": "string", "format": "uri"},
        "runs": {"type": "array", "minItems": 1, "items": {
            "type": "object",
            "required": ["tool"],
            "properties": {
                "tool": {"type": "object", "required": ["driver"], "properties": {"driver": {
                    "type": "object", "required": ["name"],
                    "properties": {
                        "name": {"type": "string"}, "version": {"type": "string"},
                        "rules": {"type": "array", "items": {
                            "type": "object", "required": ["id"],
                            "properties": {
                                "id": {"type": "string"}, "name": {"type": "string"},
                                "shortDescription": _MESSAGE, "fullDescription": _MESSAGE, "help": _MESSAGE,
                                "defaultConfiguration": {"type": "object", "properties": {"level": {"enum": ["none", "note", "warning", "error"]}}},
                            },
                        }},
                    },
                }}},
                "invocations": {"type": "array", "items": {"type": "object", "required": ["executionSuccessful"]}},
                "results": {"type": "array", "items": {
                    "type": "object", "required": ["message"],
                    "properties": {
                        "ruleId": {"type": "string"}, "ruleIndex": {"type": "integer", "minimum": 0},
                        "level": {"enum": ["none", "note", "warning", "error"]},
                        "message": _MESSAGE,
                        "locations": {"type": "array", "items": {"type": "object", "properties": {
                            "physicalLocation": {"type": "object", "required": ["artifactLocation"], "properties": {
                                "artifactLocation": {"type": "object", "required": ["uri"], "properties": {"uri": {"type": "string", "format": "uri-reference"}}}}},
                        }}},
                    },
                }},
            },
        }},
    },
}


def test_github_annotations_one_per_finding(cli: Any, fixtures_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(fixtures_root)
    res = cli("inspect", "drafts/gpt-oss-20b-DFlash", "mutants/DF211-fc-four-taps", "--output-format", "github",
              "--ignore", "DF148")  # the top-level block_size both keep, as z-lab publishes it (lmdeploy needs normalize)
    assert res.code == 1
    lines = res.stdout.splitlines()
    doc = cli("inspect", "drafts/gpt-oss-20b-DFlash", "mutants/DF211-fc-four-taps", "--json", "--ignore", "DF148").json()
    findings = [f for r in doc["results"] for f in r["findings"]]
    # errors and warnings by default: info notices (DF220 on every draft, DF141) spend GitHub's quota
    assert len(lines) == sum(f["severity"] != "info" for f in findings) == 1
    assert "::error file=mutants/DF211-fc-four-taps/model.safetensors,title=DF211::fc.weight is [64, 256]" in res.stdout
    assert all(line.startswith(("::error ", "::warning ")) for line in lines)
    every = cli("inspect", "drafts/gpt-oss-20b-DFlash", "mutants/DF211-fc-four-taps", "--output-format", "github",
                "--annotations", "all", "--ignore", "DF148").stdout.splitlines()
    assert len(every) == len(findings) == 4
    line = (fixtures_root / "drafts/gpt-oss-20b-DFlash/config.json").read_text().split("\n").index(
        next(x for x in (fixtures_root / "drafts/gpt-oss-20b-DFlash/config.json").read_text().split("\n") if '"auto_map"' in x)) + 1
    assert (f"::notice file=drafts/gpt-oss-20b-DFlash/config.json,line={line},title=DF141::key 'auto_map' names remote code"
            in "\n".join(every))
    clean = cli("inspect", "-q", "drafts/Qwen3-4B-DFlash-b16", "--output-format", "github", "--select", "DF2", "--ignore", "DF220")
    assert clean.code == 0 and clean.stdout == ""


def test_github_escapes_workflow_command_characters() -> None:
    """A hostile folder name cannot end a property early or start a second command."""
    assert escape_data("50% done\r\n::error::x") == "50%25 done%0D%0A::error::x"
    assert escape_property("a:b,c%\n") == "a%3Ab%2Cc%25%0A"
    doc = {"error": None, "results": [{"draft": "d", "findings": [
        {"code": "DF212", "severity": "warning", "path": "x,title=DF000:y\n::error::z", "key": None, "message": "line1\nline2 100%"}]}]}
    out = github_annotations(doc)
    assert out == "::warning file=x%2Ctitle=DF000%3Ay%0A%3A%3Aerror%3A%3Az,title=DF212::line1%0Aline2 100%25\n"
    assert out.count("\n") == 1


def test_github_reports_a_run_that_stopped(cli: Any, fixtures_root: Path, tmp_path: Path) -> None:
    res = cli("inspect", str(fixtures_root / "drafts/Qwen3-4B-DFlash-b16"), "--target", str(tmp_path / "none"), "--output-format", "github")
    assert res.code == 2
    assert res.stdout == f"::error file={escape_property(str(tmp_path / 'none'))},title=DF001::no such folder; give a local target folder or a Hub repo id (org/name)\n"


def test_sarif_document(cli: Any, fixtures_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(fixtures_root)
    res = cli("inspect", "mutants/DF114-layer-ids-plus-one", "--target", "mutants/targets/small", "--output-format", "sarif")
    assert res.code == 1
    log = json.loads(res.stdout)
    jsonschema.validate(log, SARIF_REQUIRED, format_checker=jsonschema.FormatChecker())
    run = log["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == list(RULES)
    df114 = rules[list(RULES).index("DF114")]
    assert df114["name"] == RULES["DF114"].name and df114["fullDescription"]["text"] == RULES["DF114"].explanation
    assert RULES["DF114"].fix in df114["help"]["text"]
    by_rule = {r["ruleId"]: r for r in run["results"]}
    assert {"DF114", "DF306"} <= set(by_rule)
    r114 = by_rule["DF114"]
    assert r114["level"] == "error" and rules[r114["ruleIndex"]]["id"] == "DF114"
    loc = r114["locations"][0]
    assert loc["physicalLocation"]["artifactLocation"]["uri"] == "mutants/DF114-layer-ids-plus-one/config.json"
    text = (fixtures_root / "mutants/DF114-layer-ids-plus-one/config.json").read_text().splitlines()
    start = loc["physicalLocation"]["region"]["startLine"]  # code scanning places an alert by its line
    assert '"target_layer_ids"' in text[start - 1] and any('"dflash_config"' in x for x in text[:start - 1]), start
    for result in run["results"]:  # every result has a file and a line; no folder URI
        phys = result["locations"][0]["physicalLocation"]
        assert phys["region"]["startLine"] >= 1 and not (fixtures_root / phys["artifactLocation"]["uri"]).is_dir()
    assert loc["logicalLocations"][0]["fullyQualifiedName"] == "dflash_config.target_layer_ids"
    assert run["invocations"][0] == {"executionSuccessful": True, "exitCode": 1}
    assert "subtract 1" in r114["message"]["text"]


def test_sarif_uris_relative_when_possible(tmp_path: Path) -> None:
    inside = tmp_path / "drafts" / "a b" / "config.json"
    assert artifact_uri(str(inside), root=str(tmp_path)) == "drafts/a%20b/config.json"
    assert artifact_uri("/elsewhere/x/config.json", root=str(tmp_path)) == "file:///elsewhere/x/config.json"
    assert artifact_uri("drafts/x/config.json") == "drafts/x/config.json"
    assert artifact_uri("org/name@main:config.json") == "org/name@main%3Aconfig.json"
    info = sarif_document({"error": None, "exit_code": 0, "results": [{"draft": "d", "findings": [
        {"code": "DF220", "severity": "info", "path": None, "key": None, "message": "BF16"}]}]})
    jsonschema.validate(info, SARIF_REQUIRED)
    assert info["runs"][0]["results"][0]["level"] == "note"
    assert info["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "d"
    assert info["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["region"] == {"startLine": 1}


def test_a_missing_draft_is_one_annotation(cli: Any, tmp_path: Path) -> None:
    res = cli("inspect", str(tmp_path / "nowhere"), "--output-format", "github")
    assert res.code == 2 and res.stdout.count("::error") == 1 and "no such folder" in res.stdout, res.stdout
    sarif = json.loads(cli("inspect", str(tmp_path / "nowhere"), "--output-format", "sarif").stdout)
    assert len(sarif["runs"][0]["results"]) == 1


def test_a_clean_draft_prints_no_annotation_unless_asked(cli: Any) -> None:
    draft = str(ROOT / "fixtures/tiny-pair/draft")
    assert cli("inspect", draft, "--output-format", "github").stdout == ""
    notes = cli("inspect", draft, "--output-format", "github", "--annotations", "all").stdout.splitlines()
    assert len(notes) == 1 and notes[0].startswith("::notice ") and "title=DF220" in notes[0]


def test_output_format_json_is_the_json_alias_and_a_bad_one_is_one_line(cli: Any, fixtures_root: Path) -> None:
    draft = str(fixtures_root / "drafts/Qwen3-4B-DFlash-b16")
    assert cli("inspect", draft, "--output-format", "json").json() == cli("inspect", draft, "--json").json()
    bad = cli("inspect", draft, "--output-format", "xml")
    assert bad.code == 2 and bad.stdout == ""
    assert bad.stderr.count("\n") == 1 and bad.stderr.startswith("dflash-ckpt inspect: DF004 error: ") and "'github'" in bad.stderr


def test_the_cli_choices_are_the_format_table() -> None:
    """``--output-format``'s choices come from ``output_formats.FORMATS`` (issue 40): inspect offers
    every format, smoke-run and probe-taps those a run's findings fit (all but SARIF)."""
    import typer

    from dflash_ckpt.cli import app
    from dflash_ckpt.output_formats import FORMATS

    commands = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    choices = {name: next(p.type.choices for p in commands[name].params if p.name == "output_format")
               for name in ("inspect", "smoke-run", "probe-taps")}
    assert list(choices["inspect"]) == list(FORMATS)
    assert list(choices["smoke-run"]) == list(choices["probe-taps"]) == [f.name for f in FORMATS.values() if f.runs]
    assert "sarif" not in choices["smoke-run"] and all(f.render is not None for f in FORMATS.values() if f.name != "text")


@pytest.mark.parametrize("fmt, wanted", [("text", True), ("github", True), ("json", False)])
def test_a_runs_progress_lines_follow_the_format_record(fmt: str, wanted: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run printed as a document (``--json``, github) writes progress lines to stderr only when
    its format's record asks for them (github: a CI log wants them); text without a terminal
    always does. The switch is the record's, not a format name in console.run_live."""
    import dflash_ckpt.progress_lines as progress_lines
    from dflash_ckpt.console import run_live
    from dflash_ckpt.output_formats import FORMATS

    marker = object()
    monkeypatch.setattr(progress_lines, "stderr_progress", lambda: marker)
    seen: dict[str, Any] = {}

    def run(progress: Any = None, log: Any = None) -> str:
        seen["progress"] = progress
        return "done"

    assert run_live(run, json_out=fmt != "text", quiet=False, output_format=fmt) == "done"
    assert (seen["progress"] is marker) is wanted
    assert FORMATS["github"].progress_lines and not FORMATS["json"].progress_lines
