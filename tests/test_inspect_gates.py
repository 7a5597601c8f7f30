"""inspect as a CI gate: --select/--ignore, --require-engines, the normalize hint, --from-file -,
and one JSON envelope whatever the number of drafts."""

from __future__ import annotations

import pytest

import os
import subprocess
import sys
from pathlib import Path

from conftest import ERROR_LINE, ROOT, run_cli

TINY = ROOT / "fixtures" / "tiny-pair"


def _codes(stdout: str) -> list[str]:
    return [ERROR_LINE.match(line)["code"] for line in stdout.splitlines() if ERROR_LINE.match(line)]


@pytest.mark.slow
def test_select_and_ignore_take_codes_and_prefixes(fixtures_root: Path) -> None:
    bad = [str(fixtures_root / "mutants/DF211-fc-four-taps"), str(fixtures_root / "mutants/DF114-layer-ids-plus-one")]
    target = ["--target", str(fixtures_root / "mutants/targets/small")]
    everything = run_cli("inspect", "-q", *bad, *target)
    assert everything.code == 1 and sorted(_codes(everything.stdout)) == ["DF114", "DF211", "DF306"]
    only_weights = run_cli("inspect", "-q", *bad, *target, "--select", "DF2")
    assert only_weights.code == 1 and _codes(only_weights.stdout) == ["DF211"]
    no_pairing = run_cli("inspect", "-q", *bad, *target, "--ignore", "DF3,df211")
    assert no_pairing.code == 1 and _codes(no_pairing.stdout) == ["DF114"]
    # ignoring every error that fires makes the gate pass
    quiet = run_cli("inspect", "-q", *bad, *target, "--ignore", "DF211", "--ignore", "DF114", "--ignore", "DF306")
    assert quiet.code == 0 and quiet.stdout == ""
    doc = run_cli("inspect", *bad, *target, "--select", "ALL", "--ignore", "DF1", "--json").json()
    assert {f["code"] for r in doc["results"] for f in r["findings"]} == {"DF211", "DF220", "DF306"}


def test_ignore_cannot_hide_an_unreadable_draft(fixtures_root: Path) -> None:
    res = run_cli("inspect", str(fixtures_root / "mutants/DF002-bad-json"), "--ignore", "DF0")
    assert res.code == 2 and ": DF002 error: " in res.stderr


@pytest.mark.slow
def test_require_engines_is_a_gate_with_the_fix() -> None:
    draft = str(TINY / "draft-top-level")
    assert run_cli("inspect", draft, "--require-engines", "sglang,vllm").code == 0
    res = run_cli("inspect", draft, "-q", "--require-engines", "sglang", "--require-engines", "lmdeploy")
    assert res.code == 1
    [line] = res.stdout.strip().splitlines()
    m = ERROR_LINE.match(line)
    assert m and m["code"] == "DF144" and m["path"] == f"{draft}/config.json"
    assert "lmdeploy" in line and "reads block_size only from dflash_config" in line
    assert f"`dflash-ckpt normalize {draft} OUT` writes a config it loads" in line
    doc = run_cli("inspect", draft, "--require-engines", "all", "--json").result()
    assert doc["exit_code"] == 1 and [f["code"] for f in doc["findings"] if f["severity"] == "error"] == ["DF144"]
    # asked for by name, the engine gate holds whatever --select/--ignore leave
    assert run_cli("inspect", draft, "--require-engines", "lmdeploy", "--select", "DF2", "--ignore", "DF144").code == 1
    # the canonical draft passes every engine
    assert run_cli("inspect", str(TINY / "draft"), "--require-engines", "all").code == 0


@pytest.mark.slow
def test_normalize_hint_when_it_would_fix_the_engine(fixtures_root: Path) -> None:
    draft = str(TINY / "draft-top-level")
    res = run_cli("inspect", draft)
    assert res.code == 0
    assert f"lmdeploy 0.18 would load it after dflash-ckpt normalize {draft} OUT" in res.stdout
    doc = run_cli("inspect", draft, "--json").result()
    assert doc["readers"]["lmdeploy"] == {**doc["readers"]["lmdeploy"], "loads": False, "fixed_by_normalize": True}
    assert doc["normalize_command"] == f"dflash-ckpt normalize {draft} OUT"
    assert not any(v["fixed_by_normalize"] for k, v in doc["readers"].items() if k != "lmdeploy")
    # missing num_target_layers: only normalize with the target (its depth) fixes it
    lacking = str(fixtures_root / "mutants/DF102-no-num-target-layers")
    alone = run_cli("inspect", lacking, "--json").result()
    assert alone["normalize_command"] is None and not any(v["fixed_by_normalize"] for v in alone["readers"].values())
    target = str(fixtures_root / "mutants/targets/small")
    paired = run_cli("inspect", lacking, "--target", target, "--json").result()
    assert paired["normalize_command"] == f"dflash-ckpt normalize {lacking} OUT --target {target}"
    assert paired["readers"]["sglang"]["fixed_by_normalize"] is True
    # a canonical draft gets no hint
    clean = run_cli("inspect", str(TINY / "draft"))
    assert "would load it after" not in clean.stdout and clean.code == 0


@pytest.mark.slow
def test_one_envelope_for_one_draft_a_list_or_stdin(tmp_path: Path) -> None:
    draft = str(TINY / "draft")
    single = run_cli("inspect", draft, "--json").json()
    listing = tmp_path / "one.txt"
    listing.write_text(f"{draft}  # the only one\n")
    from_file = run_cli("inspect", "--from-file", str(listing), "--json").json()
    proc = subprocess.run([sys.executable, "-m", "dflash_ckpt", "inspect", "--from-file", "-", "--json"],
                          input=f"# from a pipe\n{draft}\n", capture_output=True, text=True, env={**os.environ})
    assert proc.returncode == 0, proc.stderr
    import json

    from_stdin = json.loads(proc.stdout)
    assert single == from_file == from_stdin
    assert set(single) == {"schema_version", "command", "ok", "exit_code", "error", "results"}
    assert single["schema_version"] == 2 and single["command"] == "inspect" and len(single["results"]) == 1
    several = run_cli("inspect", draft, str(TINY / "draft-top-level"), "--json").json()
    assert set(several) == set(single) and len(several["results"]) == 2
    assert set(several["results"][0]) == set(single["results"][0])


def test_broken_draft_is_a_row_and_the_others_are_reported(tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{ not json")
    args = [str(TINY / "draft"), str(broken), str(TINY / "draft-top-level"), str(tmp_path / "missing")]
    res = run_cli("inspect", *args)
    assert res.code == 2
    rows = {line.split("│")[0].strip(): line for line in res.stdout.splitlines() if "│" in line}
    assert set(rows) == {str(TINY / "draft"), str(broken), str(TINY / "draft-top-level"), str(tmp_path / "missing")}
    assert "ERROR" in rows[str(broken)] and "ERROR" in rows[str(tmp_path / "missing")]
    assert "OK" in rows[str(TINY / "draft")] and "nested" in rows[str(TINY / "draft")]
    assert any(line.startswith(f"{broken}/config.json: DF002 error: ") for line in res.stdout.splitlines())
    doc = run_cli("inspect", *args, "--json").json()
    assert [r["exit_code"] for r in doc["results"]] == [0, 2, 0, 2]
    assert doc["results"][1]["error"]["code"] == "DF002" and doc["results"][2]["layout"] == "top-level"


def test_piped_table_never_wraps_a_draft_name(tmp_path: Path) -> None:
    long_name = tmp_path / ("a-draft-with-a-very-long-name-" * 5)
    import shutil

    shutil.copytree(TINY / "draft", long_name)
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    proc = subprocess.run([sys.executable, "-m", "dflash_ckpt", "inspect", str(long_name), str(TINY / "draft")],
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    assert len(str(long_name)) > 150
    row = [line for line in proc.stdout.splitlines() if str(long_name) in line]
    assert len(row) == 1 and "OK" in row[0]
    # a single report's tables do not fold either
    one = subprocess.run([sys.executable, "-m", "dflash_ckpt", "inspect", str(long_name)], capture_output=True, text=True, env=env)
    assert any(str(long_name) in line and "BF16" in line for line in one.stdout.splitlines())


def test_json_document_when_the_target_cannot_be_read(tmp_path: Path) -> None:
    res = run_cli("inspect", str(TINY / "draft"), "--target", str(tmp_path / "nowhere"), "--json")
    assert res.code == 2
    doc = res.json()
    assert doc["ok"] is False and doc["exit_code"] == 2 and doc["results"] == []
    assert doc["error"]["code"] == "DF001" and str(tmp_path / "nowhere") in doc["error"]["message"]
    m = ERROR_LINE.match(res.stderr.strip())
    assert m and m["path"] == str(tmp_path / "nowhere") and m["code"] == "DF001"


def test_json_paths_do_not_import_rich() -> None:
    """The machine path prints with json alone: rich (and torch) stay unimported."""
    draft = str(TINY / "draft-top-level")
    for argv in (["inspect", draft, "--json"], ["normalize", draft, "--check", "--json"], ["rules", "--json"]):
        code = ("import contextlib, io, sys; from dflash_ckpt.cli import run; "
                f"buf = io.StringIO(); ctx = contextlib.redirect_stdout(buf); ctx.__enter__(); rc = run({argv!r}); ctx.__exit__(None, None, None); "
                "print(rc, 'rich' in sys.modules, 'torch' in sys.modules)")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        assert out.stdout.split()[1:] == ["False", "False"], (argv, out.stdout, out.stderr)


def test_a_crash_on_one_draft_is_its_row(cli, monkeypatch) -> None:
    """A bug hit by one draft (here a RecursionError) is that draft's error, not a traceback."""
    import dflash_ckpt.inspection as cmd

    real = cmd.inspect_sources

    def flaky(src, target):
        if src.label.endswith("draft-top-level"):
            raise RecursionError("maximum recursion depth exceeded")
        return real(src, target)

    monkeypatch.setattr(cmd, "inspect_sources", flaky)
    res = cli("inspect", str(TINY / "draft"), str(TINY / "draft-top-level"))
    assert res.code == 2 and "Traceback" not in res.stderr
    rows = [line for line in res.stdout.splitlines() if "│" in line]
    assert any(str(TINY / "draft") in r and "OK" in r for r in rows)
    assert any("draft-top-level" in r and "ERROR" in r for r in rows)
    assert f"{TINY / 'draft-top-level'}: DF001 error: could not be inspected (RecursionError" in res.stdout
