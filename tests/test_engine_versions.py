"""Facts that say when they were true (issue 41 item 4): every engine record states the releases
its facts were read or measured against; inspect shows them (JSON ``readers``), and
inspect and smoke-run's vLLM paths warn (DF430) when the installed vLLM is outside that range."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from conftest import ROOT
from dflash_ckpt.checks.engines.registry import ENGINES, BY_KEY
from dflash_ckpt.checks.engines.versions import ABOVE, BELOW, WITHIN, Versions, release, standing
from dflash_ckpt.engine_runners.vllm_facts import PYTHON_ENV, version_findings
from test_engine_refusals import fake_python

TINY = ROOT / "fixtures" / "tiny-pair"
DOC = (ROOT / "docs" / "engines.md").read_text()


def fake_vllm_python(tmp: Path, version: str, dist: str = "vllm") -> str:
    """A python that finds a bare ``vllm`` package of ``dist==version`` (no real vLLM):
    test_engine_refusals' ``fake_python`` with an empty package."""
    return fake_python(tmp, files={"vllm/__init__.py": ""}, dist=f"{dist}=={version}")


def test_every_engine_states_its_versions_and_the_doc_shows_them() -> None:
    for engine in ENGINES:
        assert isinstance(engine.versions, Versions) and engine.versions.how, engine.key
        assert f"`{engine.key}`" in DOC and engine.versions.span in DOC, engine.key
    assert BY_KEY["vllm"].versions[:2] == ("0.32.0", "0.34.0")
    assert BY_KEY["exllamav3"].versions.span == "1.6.5" and BY_KEY["speculators"].versions.span == "0.9.0"


@pytest.mark.parametrize(("installed", "expected"), [
    ("0.32.0", WITHIN), ("0.33.0", WITHIN), ("0.34.0", WITHIN), ("0.32.0+cpu", WITHIN), ("0.35.0", ABOVE),
    ("0.34.1", ABOVE), ("0.31.2", BELOW), ("1.0", ABOVE), ("?", None),
])
def test_standing(installed: str, expected: str | None) -> None:
    assert standing(BY_KEY["vllm"].versions, installed) == expected


def test_release_numbers() -> None:
    assert release("1.4.0rc1") == (1, 4, 0) and release("0.34.0+cpu") == (0, 34, 0) and release("git e763f23") is None
    assert standing(Versions("git e763f23", None, "read"), "1.0.0") is None


def test_inspect_shows_the_versions_in_its_json(cli, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(PYTHON_ENV, fake_vllm_python(tmp_path, "0.33.0"))
    res = cli("inspect", str(TINY / "draft"), "--target", str(TINY / "target"), "--json")

    readers = res.result()["readers"]
    assert readers["vllm"]["facts_versions"] == {"low": "0.32.0", "high": "0.34.0", "how": BY_KEY["vllm"].versions.how}
    assert readers["vllm"]["installed_is"] == WITHIN
    assert all(readers[e.key]["facts_versions"]["low"] == e.versions.low for e in ENGINES)
    assert not any(f["code"] == "DF430" for f in res.result()["findings"])


@pytest.mark.parametrize(("version", "side"), [("0.35.0", "newer than"), ("0.30.1", "older than")])
def test_a_vllm_outside_the_range_is_a_warning(cli, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, version: str,
                                               side: str) -> None:
    """A newer (or older) vLLM than the record's facts is DF430, a warning, in inspect and in the
    findings smoke-run's vLLM paths add (``version_findings``)."""

    monkeypatch.setenv(PYTHON_ENV, fake_vllm_python(tmp_path, version))
    res = cli("inspect", str(TINY / "draft"), "--target", str(TINY / "target"), "--json")
    out = res.result()
    (df430,) = [f for f in out["findings"] if f["code"] == "DF430"]
    assert df430["severity"] == "warning" and f"vllm {version}) is {side}" in df430["message"]
    assert "0.32.0-0.34.0" in df430["message"] and res.code == 0
    assert out["readers"]["vllm"]["installed_is"] == (ABOVE if side == "newer than" else BELOW)
    assert [f.code for f in version_findings()] == ["DF430"]
    strict = cli("inspect", str(TINY / "draft"), "--target", str(TINY / "target"), "--strict")
    assert strict.code != 0 and "DF430" in strict.stdout + strict.stderr


def test_no_vllm_no_finding(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    exe = tmp_path / "python"
    exe.write_text(f"#!/bin/sh\nPYTHONPATH={tmp_path} exec {sys.executable} -S \"$@\"\n")
    exe.chmod(0o755)
    monkeypatch.setenv(PYTHON_ENV, str(exe))
    assert version_findings() == []
