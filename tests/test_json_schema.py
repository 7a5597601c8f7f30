"""Every command's ``--json`` is the one envelope, and the shipped JSON Schema holds it: on success
and on every error path (exit 0, 1 and 2), for the whole schema and each command's, and for the
README's JSON examples. The schema is strict enough that a missing or misspelt field fails."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT
from dflash_ckpt.schema import COMMANDS, load_schema
from readme_examples import all_examples, run_example

jsonschema = pytest.importorskip("jsonschema")

TINY = ROOT / "fixtures" / "tiny-pair"
ENVELOPE = {"schema_version", "command", "ok", "exit_code", "error", "results"}
RUN = ("-p", "hi", "-n", "6", "--device", "cpu", "--draft-dtype", "float32", "--target-dtype", "float32")


def validate(doc: Any) -> None:
    """``doc`` against the whole schema and against its command's."""
    jsonschema.Draft202012Validator(load_schema()).validate(doc)
    jsonschema.Draft202012Validator(load_schema(doc["command"])).validate(doc)


def envelope(cli: Any, *args: str, code: int) -> dict[str, Any]:
    """Run the CLI with ``--json``: the exit code, stdout exactly one envelope, valid."""
    res = cli(*args, "--json")
    assert res.code == code, (res.code, res.stdout, res.stderr)
    doc = json.loads(res.stdout)
    assert set(doc) == ENVELOPE and doc["exit_code"] == code and doc["ok"] is (code == 0), doc
    validate(doc)
    return doc


@pytest.mark.slow
def test_the_schema_is_a_valid_2020_12_schema() -> None:
    whole = load_schema()
    jsonschema.Draft202012Validator.check_schema(whole)
    assert whole["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert {"finding", "error"} <= set(whole["$defs"]) and set(COMMANDS.values()) <= set(whole["$defs"])
    for command in COMMANDS:
        jsonschema.Draft202012Validator.check_schema(load_schema(command))


def test_schema_command_prints_the_schema(cli) -> None:
    whole = cli("schema")
    assert whole.code == 0 and json.loads(whole.stdout) == load_schema()
    one = cli("schema", "smoke-run")
    assert one.code == 0 and json.loads(one.stdout)["properties"]["command"] == {"const": "smoke-run"}
    doc = envelope(cli, "schema", "inspect", code=0)
    assert doc["results"] == [{"for": "inspect", "schema": load_schema("inspect")}]
    bad = envelope(cli, "schema", "frobnicate", code=2)
    assert bad["results"] == [] and bad["error"]["code"] == "DF004" and "frobnicate" in bad["error"]["message"]


def test_inspect_documents(cli, fixtures_root: Path, tmp_path: Path) -> None:
    ok = envelope(cli, "inspect", str(TINY / "draft"), "--target", str(TINY / "target"), code=0)
    assert len(ok["results"]) == 1 and ok["error"] is None
    mutants = fixtures_root / "mutants"
    failed = envelope(cli, "inspect", str(mutants / "DF211-fc-four-taps"), str(TINY / "draft"), code=1)
    assert [r["exit_code"] for r in failed["results"]] == [1, 0]
    missing = envelope(cli, "inspect", str(tmp_path / "nowhere"), code=2)
    assert missing["error"]["code"] == "DF001" and missing["error"]["path"] == str(tmp_path / "nowhere")
    assert missing["results"][0]["error"] == missing["error"]
    bad_json = envelope(cli, "inspect", str(mutants / "DF002-bad-json"), code=2)
    assert bad_json["error"]["code"] == "DF002" and bad_json["error"]["path"].endswith("config.json")
    no_target = envelope(cli, "inspect", str(TINY / "draft"), "--target", str(tmp_path / "t"), code=2)
    assert no_target["results"] == [] and no_target["error"]["code"] == "DF001"
    usage = envelope(cli, "inspect", str(TINY / "draft"), "--select", "XX9", code=2)
    assert usage["results"] == [] and usage["error"]["code"] == "DF004" and usage["error"]["path"] is None


def test_normalize_documents(cli, fixtures_root: Path, tmp_path: Path) -> None:
    done = envelope(cli, "normalize", str(TINY / "draft-top-level"), str(tmp_path / "out"), code=0)
    assert done["results"][0]["written"] is True and done["results"][0]["out"] == str(tmp_path / "out")
    check = envelope(cli, "normalize", str(TINY / "draft-top-level"), "--check", code=1)
    assert check["error"] is None and check["results"][0]["changed"] is True
    refused = envelope(cli, "normalize", str(fixtures_root / "mutants" / "DF103-block-size-conflict"), "--dry-run", code=1)
    assert refused["error"]["code"] == "DF103" and refused["results"][0]["written"] is False
    missing = envelope(cli, "normalize", str(tmp_path / "nowhere"), "--check", code=2)
    assert missing["error"]["code"] == "DF001"
    usage = envelope(cli, "normalize", str(TINY / "draft"), code=2)  # neither OUT nor a mode
    assert usage["results"] == [] and usage["error"]["code"] == "DF004" and "give OUT" in usage["error"]["message"]


def test_rules_documents(cli) -> None:
    every = envelope(cli, "rules", code=0)
    assert len(every["results"]) > 50 and all(r["code"].startswith("DF") for r in every["results"])
    assert envelope(cli, "rules", "DF211", code=0)["results"][0]["code"] == "DF211"
    unknown = envelope(cli, "rules", "DF999", code=2)
    assert unknown["results"] == [] and unknown["error"]["code"] == "DF004"


@pytest.mark.slow
def test_smoke_run_documents(cli, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("tokenizers")
    ok = envelope(cli, "smoke-run", str(TINY / "draft"), "--target", str(TINY / "target"), *RUN, "--min-acceptance", "0", code=0)
    assert ok["results"][0]["prompts"][0]["lossless"]["status"] == "identical"
    sampled = envelope(cli, "smoke-run", str(TINY / "draft"), "--target", str(TINY / "target"), *RUN, "--min-acceptance", "0",
                       "--temperature", "0.6", "--verify", "rejection", code=0)
    assert sampled["results"][0]["settings"]["sampling"]["rule"] == "rejection"
    short = envelope(cli, "smoke-run", str(TINY / "draft"), "--target", str(TINY / "target"), *RUN, "--min-acceptance", "99", code=0)
    assert [f["code"] for f in short["results"][0]["findings"]] == ["DF408"]  # one prompt: too little evidence
    assert short["results"][0]["overall"]["speedup"] is None and short["results"][0]["suites"] is None
    low = envelope(cli, "smoke-run", str(TINY / "draft"), "--target", str(TINY / "target"), *RUN[2:],
                   "-n", "128", "--min-acceptance", "99", code=1)  # the three built-in prompts: 64 steps
    assert [f["code"] for f in low["results"][0]["findings"]] == ["DF403"] and low["error"] is None
    assert low["results"][0]["serve"] == {} and short["results"][0]["serve"] == {}  # no PASS, nothing to serve
    assert low["results"][0]["overall"]["evidence"]["enough"] and low["results"][0]["overall"]["tau_ci95"]
    suite = envelope(cli, "smoke-run", str(TINY / "draft"), "--target", str(TINY / "target"), *RUN[4:], "-n", "8",
                     "--suite", "chat", "--min-acceptance", "0", code=0)
    assert suite["results"][0]["suites"]["chat"]["prompts"] >= 12
    # A PASS with a verdict serves the pair: the same argv inspect's 'serve' gives (the text's serve lines say so).
    inspected = envelope(cli, "inspect", str(TINY / "draft"), "--target", str(TINY / "target"), code=0)
    assert suite["results"][0]["serve"] == inspected["results"][0]["serve"] and "vllm" in suite["results"][0]["serve"]
    missing = envelope(cli, "smoke-run", str(tmp_path / "nowhere"), "--target", str(TINY / "target"), code=2)
    assert missing["results"] == [] and missing["error"]["code"] == "DF001"
    usage = envelope(cli, "smoke-run", str(TINY / "draft"), "--target", str(TINY / "target"), "--backend", "tensorrt", code=2)
    assert usage["error"]["code"] == "DF004" and "tensorrt" in usage["error"]["message"]


@pytest.mark.slow
def test_probe_taps_documents(cli, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("tokenizers")
    args = (str(TINY / "draft"), "--target", str(TINY / "target"), *RUN, "--budget", "3")
    ran = envelope(cli, "probe-taps", *args, "--min-acceptance", "0", code=0)
    assert ran["results"][0]["best"] is not None and ran["results"][0]["write"] is None
    refused = envelope(cli, "probe-taps", *args, "--min-acceptance", "99", "--write", str(tmp_path / "w"), code=1)
    assert refused["error"]["code"] == "DF004" and refused["results"][0]["write"]["error"] == refused["error"]
    missing = envelope(cli, "probe-taps", str(TINY / "draft"), "--target", str(tmp_path / "t"), code=2)
    assert missing["results"] == [] and missing["error"]["code"] == "DF001"


def test_a_missing_run_extra_is_a_document_too(cli, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    doc = envelope(cli, "smoke-run", str(TINY / "draft"), "--target", str(TINY / "target"), code=2)
    assert doc["error"]["code"] == "DF004" and "torch" in doc["error"]["message"]


def test_the_schema_fails_a_missing_or_misspelt_field(cli) -> None:
    """Strict where a script would silently read nothing: the envelope, findings, errors, results."""
    doc = json.loads(cli("inspect", str(ROOT / "fixtures" / "tiny-pair" / "draft-top-level"), "--json").stdout)
    validate(doc)
    assert doc["results"][0]["findings"], "the mutations below need a finding"

    def broken(edit: Any) -> None:
        bad = copy.deepcopy(doc)
        edit(bad)
        with pytest.raises(jsonschema.ValidationError):
            validate(bad)

    broken(lambda d: d.pop("error"))
    broken(lambda d: d.update(exit_cod=d.pop("exit_code")))
    broken(lambda d: d.update(schema_version=1))
    broken(lambda d: d.update(ok=False))  # ok and exit_code disagree
    broken(lambda d: d["results"][0]["findings"][0].pop("key"))
    broken(lambda d: d["results"][0]["findings"][0].update(sevrity="warning"))
    broken(lambda d: d["results"][0]["findings"][0].update(code="W1"))
    broken(lambda d: d["results"][0].update(findngs=[]))
    broken(lambda d: d.update(error={"code": "DF001", "message": "x"}))  # path and key missing
    broken(lambda d: d.update(command="smoke-run"))  # an inspect result is no smoke-run result


def test_readme_json_examples_hold(fixtures_root: Path) -> None:
    """Each example of the guide (README and docs/ pages) run with ``--json`` prints a document the schema holds."""
    shown = [ex for ex in all_examples() if "--json" in ex.argv]
    assert shown, "the guide shows no --json example"
    for ex in shown:
        out = run_example(ex, fixtures_root)
        start = out.index("{\n")
        doc, _ = json.JSONDecoder().raw_decode(out[start:])
        validate(doc)
        assert json.dumps(doc, indent=2) in ex.output, ex.command


@pytest.mark.slow
def test_the_schema_ships_in_the_wheel(tmp_path: Path) -> None:
    """setuptools puts the schema in the wheel (package-data), and jsonschema is in the test extra."""
    import subprocess
    import sys
    import zipfile

    tomllib = pytest.importorskip("tomllib")
    pytest.importorskip("setuptools")
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["test"]
    assert any(dep.startswith("jsonschema") for dep in extra)
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                           "-w", str(tmp_path), str(ROOT)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    [wheel] = tmp_path.glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "dflash_ckpt/schema/dflash-ckpt.schema.json" in names and "dflash_ckpt/api.py" in names
    assert "dflash_ckpt/runtime/kernels/bf16_linear.c" in names  # the AVX2 kernel's source, built at first use
    shipped = json.loads(zipfile.ZipFile(wheel).read("dflash_ckpt/schema/dflash-ckpt.schema.json"))
    assert shipped == load_schema()
