"""Every error is one line, ``PATH: CODE severity: message``, usage errors included (never a panel)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import CliResult, one_error_line, run_cli

BOX = set("╭╮╰╯│─")


def _usage(res: CliResult, path: str, *needles: str) -> str:
    line = one_error_line(res, *needles, code="DF004", path=path)
    assert res.stdout == ""
    assert not BOX & set(res.stderr), res.stderr
    return line


@pytest.mark.parametrize(
    "args, path, needles",
    [
        (["inspect", "--jsn", "x"], "dflash-ckpt inspect", ["No such option: --jsn", "--json", "--help"]),
        (["inspect"], "dflash-ckpt inspect", ["give at least one DRAFT"]),
        (["frob"], "dflash-ckpt", ["No such command 'frob'", "lists the commands"]),
        (["normalize"], "dflash-ckpt normalize", ["Missing argument 'DRAFT'"]),
        (["smoke-run", "d"], "dflash-ckpt smoke-run", ["Missing option", "--target"]),
        (["smoke-run", "d", "-t", "t", "-n", "many"], "dflash-ckpt smoke-run", ["'many' is not a valid int"]),
        (["rules", "DF999"], "dflash-ckpt rules", ["unknown rule 'DF999'"]),
        (["normalize", "d", "o", "--in-place"], "dflash-ckpt normalize", ["give OUT or --in-place, not both"]),
        (["inspect", "x", "--select", "DF9"], "dflash-ckpt inspect", ["--select DF9", "dflash-ckpt rules"]),
        (["inspect", "x", "--ignore", "E501"], "dflash-ckpt inspect", ["--ignore E501"]),
    ],
    ids=["unknown-option", "no-draft", "unknown-command", "missing-argument", "missing-option", "bad-int",
         "unknown-rule", "contradicting-options", "bad-select", "bad-ignore"],
)
def test_usage_errors_are_one_plain_line(args: list[str], path: str, needles: list[str]) -> None:
    _usage(run_cli(*args), path, *needles)


def test_unknown_engine_lists_the_valid_keys() -> None:
    line = _usage(run_cli("inspect", "x", "--require-engines", "sglang,trt"), "dflash-ckpt inspect", "unknown engine 'trt'")
    for key in ("zlab-legacy", "zlab", "sglang", "vllm", "lmdeploy", "speculators"):
        assert key in line


def test_usage_errors_in_process_too(cli) -> None:
    res = cli("inspect", "--nope")
    assert res.code == 2 and res.stderr.startswith("dflash-ckpt inspect: DF004 error: No such option: --nope")


def test_input_errors_name_the_file_first(tmp_path: Path) -> None:
    one_error_line(run_cli("inspect", "--from-file", str(tmp_path / "list.txt")), code="DF001", path=str(tmp_path / "list.txt"))
    one_error_line(run_cli("normalize", str(tmp_path / "nowhere"), str(tmp_path / "out")), "no such folder",
                   path=str(tmp_path / "nowhere"))


def test_help_and_bare_command_still_print_help() -> None:
    res = run_cli("inspect", "--help")
    assert res.code == 0 and "--require-engines" in res.stdout and "--select" in res.stdout
    bare = run_cli()
    assert bare.code == 2 and "Usage" in bare.stdout + bare.stderr
