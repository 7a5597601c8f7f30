"""Names and values from a checkpoint print inert: a hostile folder name, tensor name,
model_type or config string can neither send terminal escapes nor inject rich markup."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest

from conftest import ERROR_LINE, ROOT, CliResult, no_traceback, run_cli
from dflash_ckpt.errors import inert

TINY = ROOT / "fixtures" / "tiny-pair"
#: Clears the screen, paints a green OK, sets the window title, rings the bell, and a rich
#: markup tag that would print a bold green OK (and an unbalanced closing tag that crashes rich).
ESCAPES = "\x1b[2J\x1b[32mOK\x1b[0m\x1b]0;pwned\x07\r"
MARKUP = "[bold green]OK[/] [/]"


def _hostile_pair(tmp_path: Path) -> tuple[Path, Path]:
    draft = tmp_path / f"draft{ESCAPES}{MARKUP}"
    shutil.copytree(TINY / "draft", draft)
    cfg = json.loads((draft / "config.json").read_text())
    cfg["architectures"] = [f"Evil{ESCAPES}{MARKUP}"]  # DF140 quotes it
    (draft / "config.json").write_text(json.dumps(cfg))
    name = f"layers.0.evil{ESCAPES}{MARKUP}.weight"  # DF214 quotes it
    header = json.dumps({name: {"dtype": "BF16", "shape": [2], "data_offsets": [0, 4]}}).encode()
    (draft / "extra.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 4)
    target = tmp_path / "target"
    shutil.copytree(TINY / "target", target)
    tcfg = json.loads((target / "config.json").read_text())
    tcfg["model_type"] = f"qwen3{ESCAPES}{MARKUP}"
    (target / "config.json").write_text(json.dumps(tcfg))
    return draft, target


def _inert(res: CliResult) -> str:
    no_traceback(res)
    text = res.stdout + res.stderr
    for ch in "\x1b\x07\r":
        assert ch not in text, (ch, text)
    return text


def test_inert_escapes_control_characters() -> None:
    assert inert("a\x1b[31mb\x07\n\u202e") == "a\\x1b[31mb\\x07\\n\\u202e"
    assert inert("plain [markup] stays for the renderer to escape") == "plain [markup] stays for the renderer to escape"


def test_inspect_report_prints_hostile_names_inert(tmp_path: Path) -> None:
    draft, target = _hostile_pair(tmp_path)
    res = run_cli("inspect", str(draft), "--target", str(target))
    assert res.code == 0, res.stderr
    text = _inert(res)
    assert f"Evil{inert(ESCAPES)}{MARKUP}" in text  # the markup printed as text, not interpreted
    assert f"qwen3{inert(ESCAPES)}{MARKUP}" in text
    assert f"layers.0.evil{inert(ESCAPES)}{MARKUP}.weight" in text
    assert "DF140" in text and "DF214" in text


def test_error_lines_and_tables_of_several_drafts(tmp_path: Path) -> None:
    draft, target = _hostile_pair(tmp_path)
    strict = run_cli("inspect", str(draft), str(TINY / "draft"), "--target", str(target), "--strict")
    assert strict.code == 1
    text = _inert(strict)
    assert f"draft{inert(ESCAPES)}{MARKUP}" in text
    quiet = run_cli("inspect", "-q", "--strict", str(draft))
    lines = quiet.stdout.splitlines()
    _inert(quiet)
    assert lines and all(ERROR_LINE.match(line) for line in lines)
    assert all(line.startswith(str(draft).replace(ESCAPES, inert(ESCAPES))) for line in lines)


def test_an_emoji_code_in_a_name_prints_as_written(tmp_path: Path) -> None:
    """rich turns ``:smile:`` into 😄 unless told not to: the report, the summary table and the
    error lines would then name a folder that does not exist."""
    draft = tmp_path / ":smile:"
    shutil.copytree(TINY / "draft", draft)
    (draft / "config.json").write_text("[]")  # an error line names it too
    good = tmp_path / ":thumbs_up:"
    shutil.copytree(TINY / "draft", good)
    for args in ([str(good)], [str(good), str(draft)], ["-q", str(draft)]):
        res = run_cli("inspect", *args)
        text = _inert(res)
        assert "\N{SMILING FACE WITH OPEN MOUTH AND SMILING EYES}" not in text and "\N{THUMBS UP SIGN}" not in text, text
        assert ":thumbs_up:" in text if str(good) in args else ":smile:" in text, text


def test_a_newline_in_a_name_cannot_start_a_second_line(tmp_path: Path) -> None:
    bad = tmp_path / "x\nDF000 error: forged"
    bad.mkdir()
    (bad / "config.json").write_text("[]")
    res = run_cli("inspect", str(bad))
    assert res.code == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(inert(str(bad / "config.json")) + ": DF003 error: "), lines


@pytest.mark.parametrize("mode", [["--dry-run"], ["--check"]])
def test_normalize_report_prints_hostile_names_inert(tmp_path: Path, mode: list[str]) -> None:
    draft, _ = _hostile_pair(tmp_path)
    # a top-level layout, so there is a diff and change lines to print
    cfg = json.loads((draft / "config.json").read_text())
    cfg["block_size"] = cfg["dflash_config"].pop("block_size")
    cfg["note"] = f"kept{ESCAPES}{MARKUP}"
    (draft / "config.json").write_text(json.dumps(cfg, indent=2))
    args = ["normalize", str(draft), *mode] + ([str(tmp_path / "out")] if mode == ["--dry-run"] else [])
    res = run_cli(*args)
    assert res.code == (1 if mode == ["--check"] else 0), (res.code, res.stderr)  # --check: not canonical
    text = _inert(res)
    assert f"draft{inert(ESCAPES)}{MARKUP}" in text
