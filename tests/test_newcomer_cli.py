"""The command line as a newcomer meets it (issue 31): bare ``dflash-ckpt`` prints its help once,
``smoke-run DRAFT TARGET`` names the stray argument, every command's help gives its exit codes,
``--require-engines`` lists every reader, no "(progress bars off)" where there are none, and
smoke-run speaks the github format too."""

from __future__ import annotations

import re

import pytest

from conftest import ROOT, no_traceback, run_cli

TINY = ROOT / "fixtures" / "tiny-pair"
D, T = TINY / "draft", TINY / "target"
COMMANDS = ["inspect", "rules", "schema", "normalize", "smoke-run", "probe-taps"]


def test_bare_command_prints_the_help_once() -> None:
    res = run_cli()
    assert res.code == 2
    both = res.stdout + res.stderr
    assert both.count("Usage: dflash-ckpt") == 1 and both.count("Commands") == 1, both


@pytest.mark.parametrize("command", ["smoke-run", "probe-taps"])
def test_a_target_given_as_a_second_argument_is_named(command: str) -> None:
    res = run_cli(command, str(D), str(T), "-n", "4")
    assert res.code == 2 and res.stdout == ""
    (line,) = res.stderr.strip().splitlines()
    assert f"DF004 error: Missing option '--target' / '-t'; '{T}' was given as a second argument" in line, line
    assert f"(dflash-ckpt {command} {D} --target {T})" in line


def test_a_missing_target_alone_says_only_that() -> None:
    res = run_cli("smoke-run", str(D), "--thinking")
    assert res.code == 2 and "second argument" not in res.stderr and "Missing option '--target'" in res.stderr


@pytest.mark.parametrize("command", COMMANDS)
def test_every_help_gives_the_exit_codes(command: str) -> None:
    res = run_cli(command, "--help")
    assert res.code == 0
    text = " ".join(res.stdout.split())
    assert re.search(r"Exit (codes: )?0", text), text[:400]
    assert "2 " in text.split("Exit", 1)[1][:400]


@pytest.mark.parametrize("command", ["rules", "schema"])
def test_no_progress_bars_mentioned_where_there_are_none(command: str) -> None:
    assert "progress bars" not in " ".join(run_cli(command, "--help").stdout.split())


def test_require_engines_help_lists_every_reader() -> None:
    from dflash_ckpt.checks.engines import READER_TITLES

    text = " ".join(run_cli("inspect", "--help").stdout.split()).replace("│", "").replace(" ", "")
    for key in READER_TITLES:
        assert key.replace(" ", "") in text, key


def test_smoke_run_speaks_the_github_format() -> None:
    pytest.importorskip("torch")
    res = run_cli("smoke-run", str(TINY / "draft-shifted-taps"), "--target", str(T), "-n", "8", "-p", "hi",
                  "--device", "cpu", "--output-format", "github")
    no_traceback(res)
    lines = res.stdout.splitlines()
    assert res.code == 1 and lines and all(x.startswith(("::error ", "::warning ")) for x in lines), res.stdout
    assert any("title=DF403" in x for x in lines)
