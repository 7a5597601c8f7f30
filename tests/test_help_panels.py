"""smoke-run's and probe-taps' ``--help`` at 80 columns (issue 43): their options are grouped in
panels (what to run, sampling, engine, output) and no option name, metavar or help word is cut
with an ellipsis, where one panel of 35 options cut ``--tensor-parallel-s…``."""

from __future__ import annotations

import re

import pytest
import typer

from dflash_ckpt.cli import app
from dflash_ckpt.commands.options import RUN_PANELS

PANELS = {"smoke-run": list(RUN_PANELS), "probe-taps": [p for p in RUN_PANELS if p != "Sampling"]}


def _help(cli, monkeypatch: pytest.MonkeyPatch, command: str, columns: int) -> str:
    monkeypatch.setenv("COLUMNS", str(columns))
    res = cli(command, "--help")
    assert res.code == 0, res.stderr
    return res.stdout


def _option_names(command: str) -> list[str]:
    click_command = typer.main.get_command(app).commands[command]  # type: ignore[attr-defined]
    return [opt for param in click_command.params for opt in param.opts + param.secondary_opts if opt.startswith("--")]


@pytest.mark.parametrize("command", ["smoke-run", "probe-taps"])
@pytest.mark.parametrize("columns", [80, 100])
def test_every_option_name_appears_whole_and_nothing_is_cut(cli, monkeypatch: pytest.MonkeyPatch, command: str,
                                                            columns: int) -> None:
    text = _help(cli, monkeypatch, command, columns)
    lines = text.splitlines()
    assert all(len(line) <= columns for line in lines), text
    assert "…" not in text, text
    words = set(re.findall(r"--[a-z][a-z0-9-]*", text))
    names = _option_names(command)
    assert len(names) > 20 and set(names) <= words, sorted(set(names) - words)


@pytest.mark.parametrize("command", ["smoke-run", "probe-taps"])
def test_options_are_grouped_in_panels_in_order(cli, monkeypatch: pytest.MonkeyPatch, command: str) -> None:
    text = _help(cli, monkeypatch, command, 80)
    titles = re.findall(r"^╭─ (.+?) ─", text, flags=re.M)
    assert titles == ["Arguments", "Options", *PANELS[command]], titles
    panel_of = {}
    title = None
    for line in text.splitlines():
        if (m := re.match(r"╭─ (.+?) ─", line)):
            title = m.group(1)
        for name in re.findall(r"│\s+\*?\s*(--[a-z][a-z0-9-]*)", line):
            panel_of[name] = title
    assert panel_of["--target"] == "What to run" and panel_of["--json"] == "Output"
    assert panel_of["--device"] == "Engine" and panel_of["--draft-dtype"] == "Engine"
    if command == "smoke-run":
        assert panel_of["--temperature"] == "Sampling" and panel_of["--tensor-parallel-size"] == "Engine"
        assert panel_of["--suite"] == "What to run" and panel_of["--show-text"] == "Output"


def test_an_option_in_no_panel_fails_at_registration() -> None:
    from dflash_ckpt.commands.options import QuietOpt, group_options

    def command(quiet: bool = QuietOpt, json_out: bool = typer.Option(False, "--json")) -> None:
        """A command whose --json is in no panel."""

    with pytest.raises(ValueError, match="'json_out'.*no help panel"):
        group_options(command, {"Output": ("quiet",)})
    with pytest.raises(ValueError, match="no options"):
        group_options(command, {"Output": ("quiet", "json_out", "jsn")})
    group_options(command, {"Output": ("quiet", "json_out")})
    assert QuietOpt.rich_help_panel is None  # the shared option is copied, not changed for every command
