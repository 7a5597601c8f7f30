"""Issue 32: names cannot inject into what reads our output.

- A folder named ``::error title=x::...`` or ``::add-mask::FAIL`` (or holding ``##[error]``)
  must not become a GitHub workflow command in the text report, ``-q``, the summary table, the
  pre-commit hook or smoke-run's report; JSON stays the same document with no command in it.
- Serve lines: a path starting with ``-`` is no engine option, an emoji reaches every engine as
  itself, and the text line pastes to exactly the argv (``shlex.split``; the JSON, Python and YAML
  literals inside read back as the path) or says that it cannot be shown.
"""

from __future__ import annotations

import ast
import io
import json
import os
import re
import shlex
import shutil
from pathlib import Path

import pytest

from degenerate_pairs import TINY
from dflash_ckpt.checks.serve import NOT_SHOWN, as_argument, quoted, shell_line
from dflash_ckpt.neutral import CommandSafeFile, json_safe, no_command

#: What a GitHub runner reads as a command: ``::`` after leading whitespace (``TryParseV2``), or
#: ``##[`` anywhere in the line (``TryParse``, still tried); Azure's ``##vso[`` likewise.
V2 = re.compile(r"^\s*::")
V1 = re.compile(r"##[A-Za-z]*\[")

HOSTILE = ["::error title=x::boom", "::add-mask::FAIL", "  ::warning::w", "##[error]v1", "x##vso[task.setvariable]y"]


def _commands(text: str) -> list[str]:
    return [line for line in text.splitlines() if V2.match(line) or V1.search(line)]


@pytest.fixture
def hostile_drafts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Copies of the tiny draft under hostile folder names, in the working directory (relative
    names, as a user or the hook gives them); the last one has a broken config (an error line)."""
    monkeypatch.chdir(tmp_path)
    for name in HOSTILE:
        shutil.copytree(TINY / "draft", tmp_path / name)
    (tmp_path / HOSTILE[1] / "config.json").write_text("{")
    return HOSTILE


def test_inspect_text_quiet_and_summary_start_no_command(cli, hostile_drafts) -> None:
    target = str(TINY / "target")
    for args, code in ((["inspect", hostile_drafts[0], "--target", target], 0),
                       (["inspect", "-q", *hostile_drafts], 2),
                       (["inspect", *hostile_drafts], 2),
                       (["inspect", "-q", "::nosuch::x"], 2)):
        res = cli(*args)
        assert res.code == code, (args, res.code, res.stderr)
        assert _commands(res.stdout) == [] and _commands(res.stderr) == [], (args, res.stdout, res.stderr)
    res = cli("inspect", "-q", hostile_drafts[1])
    # the error line names the same folder, as a path a user can still paste
    assert res.stderr.startswith("./::add-mask::FAIL/config.json: DF002 error: "), res.stderr


def test_forced_colour_on_a_pipe_starts_no_command(cli, hostile_drafts, monkeypatch) -> None:
    """CI often sets FORCE_COLOR, which makes rich treat the pipe as a terminal."""
    monkeypatch.setenv("FORCE_COLOR", "1")
    res = cli("inspect", *hostile_drafts)
    plain = re.sub(r"\x1b\[[0-9;]*m", "", res.stdout)
    assert "\x1b[" in res.stdout and _commands(plain) == [] and _commands(res.stdout) == []


def test_the_pre_commit_hook_output_starts_no_command(hostile_drafts, capsys) -> None:
    from dflash_ckpt.precommit import main

    code = main([f"{name}/config.json" for name in hostile_drafts])
    out = capsys.readouterr()
    assert code == 2  # one config is not JSON
    assert _commands(out.out) == [] and _commands(out.err) == []
    assert "./::add-mask::FAIL/config.json: DF002 error: " in out.out + out.err


def test_smoke_run_report_starts_no_command(cli, one_thread, hostile_drafts) -> None:
    target = str(TINY / "target")
    for extra in ([], ["-q"]):
        res = cli("smoke-run", hostile_drafts[0], "--target", target, "-n", "4", "-p", "hi", "--min-acceptance", "0", *extra)
        assert _commands(res.stdout) == [] and _commands(res.stderr) == [], res.stdout
    res = cli("smoke-run", hostile_drafts[0], "--target", target, "-n", "4", "-p", "hi", "--min-acceptance", "0")
    assert "\\x3a:error title=x::boom" in res.stdout  # the name, shown as an escape, not dropped


def test_normalize_output_starts_no_command(cli, hostile_drafts) -> None:
    for args in (["normalize", hostile_drafts[0], "::add-mask::out"], ["normalize", "--check", hostile_drafts[2]],
                 ["normalize", hostile_drafts[1], "::x::out2"]):
        res = cli(*args)
        assert _commands(res.stdout) == [] and _commands(res.stderr) == [], (args, res.stdout, res.stderr)


def test_json_is_the_same_document_without_commands(cli, hostile_drafts) -> None:
    res = cli("inspect", "--json", hostile_drafts[3], hostile_drafts[4])
    assert V1.search(res.stdout) is None
    assert [r["draft"] for r in res.json()["results"]] == hostile_drafts[3:]
    sarif = cli("inspect", "--output-format", "sarif", hostile_drafts[3])
    assert V1.search(sarif.stdout) is None and json.loads(sarif.stdout)["runs"]


def test_no_command_escapes_only_what_starts_a_command() -> None:
    assert no_command("::error::x") == "\\x3a:error::x"
    assert no_command(" \t::x::y") == " \t\\x3a:x::y"
    assert no_command("a ::x::y") == "a ::x::y"  # not at the start: no command
    assert no_command("p ##[error]m ##vso[x] ##teamcity[y]") == "p ##\\x5berror]m ##vso\\x5bx] ##teamcity\\x5by]"
    assert no_command("::x", line_start=False) == "::x"
    assert json.loads(json_safe(json.dumps({"a##[b": ["##[c"]}))) == {"a##[b": ["##[c"]}


def test_command_safe_file_joins_split_writes() -> None:
    """rich writes whole lines, but a command split over writes (and flushes) is caught too."""
    for parts in (["#", "#[error]x\n"], ["  ", "::add-mask::s\n"], [":", ":x::y\n"], ["ok ##", "[warning]w\n"]):
        raw = io.StringIO()
        f = CommandSafeFile(raw)
        for part in parts:
            f.write(part)
            f.flush()
        f.close_line()
        assert _commands(raw.getvalue()) == [], (parts, raw.getvalue())
        assert raw.getvalue().endswith("\n")
    raw = io.StringIO()
    f = CommandSafeFile(raw)
    f.write("progress 50%")
    f.flush()
    assert raw.getvalue() == "progress 50%"  # a partial line is not held back without a reason


# -- serve lines ---------------------------------------------------------------------------------


NAMES = ["-x", "--model=evil", "##[error]v1", "emo\U0001F600ji", "nl\nb", "bi\u202edi", "lrm\u200emark", "tab\tx", os.fsdecode(b"\xffbad"),
         "q'uo\"te\\s", "del\x7f"]


@pytest.fixture
def serve_drafts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    monkeypatch.chdir(tmp_path)
    for name in NAMES:
        shutil.copytree(TINY / "draft", tmp_path / name)  # a lone surrogate: the byte itself on disk
    return NAMES


def _serve_lines(stdout: str) -> dict[str, str]:
    out = {}
    for line in stdout.splitlines():
        m = re.match(r"  (vllm|sglang|lmdeploy|tensorrt-llm): (.*)$", line)
        if m:
            out[m.group(1)] = m.group(2)
    return out


def shown_then(stdout: str) -> str:
    """TensorRT-LLM's second printed part: the command run after the YAML is written."""
    (line,) = [ln for ln in stdout.splitlines() if ln.startswith("    then run: ")]
    return line.removeprefix("    then run: ")


def _trtllm_parts_are_the_argv(line: str, command: str, argv: list[str]) -> None:
    """The YAML shown is the document the argv's ``printf`` writes, and the command shown is the
    one it execs: the two parts a person pastes do what the argv does."""
    yaml = pytest.importorskip("yaml")
    assert line.startswith("write dflash-options.yaml: "), line
    words = shlex.split(argv[2])
    written = "\n".join(words[2:words.index(">")])
    assert yaml.safe_load(line.removeprefix("write dflash-options.yaml: ")) == yaml.safe_load(written), (line, written)
    assert shlex.split(command) == words[words.index("exec") + 1:], command


def _paths_in(engine: str, argv: list[str]) -> set[str]:
    """The draft path each engine will open, read back from its argv as the engine reads it."""
    yaml = pytest.importorskip("yaml")
    if engine == "vllm":
        return {json.loads(argv[argv.index("--speculative-config") + 1])["model"]}
    if engine == "sglang":
        return {argv[argv.index("--speculative-draft-model-path") + 1]}
    if engine == "lmdeploy":
        return {argv[argv.index("--speculative-draft-model") + 1]}
    script = shlex.split(argv[argv.index("-c") + 1])
    lines = script[script.index("%s\\n") + 1: script.index(">")]
    return {yaml.safe_load("\n".join(lines))["speculative_config"]["speculative_model"]}


def test_serve_argv_is_faithful_and_the_line_pastes_to_it(cli, serve_drafts) -> None:
    target = str(TINY / "target")
    for name in serve_drafts:
        doc = cli("inspect", "--json", "--target", target, "--", name).result()
        shown = _serve_lines(cli("inspect", "--target", target, "--", name).stdout)
        assert set(doc["serve"]) == set(shown) == {"vllm", "sglang", "lmdeploy", "tensorrt-llm"}, name
        want = as_argument(name)
        assert not want.startswith("-")
        for engine, argv in doc["serve"].items():
            assert _paths_in(engine, argv) == {want}, (name, engine, argv)
            line = shown[engine]
            if line == NOT_SHOWN:
                assert shell_line(argv) is None
                assert any(c in name for c in "\n\t\u202e\u200e\x7f") or "\udcff" in name, (name, engine)
            elif engine == "tensorrt-llm":  # two readable parts: the YAML it writes, the command
                _trtllm_parts_are_the_argv(line, shown_then(cli("inspect", "--target", target, "--", name).stdout), argv)
            else:
                assert shlex.split(line) == argv, (name, engine, line)
        if name == "emo\U0001F600ji":  # every line shows the real path, no surrogate escapes
            assert all(name in line and "\\ud83d" not in line for line in shown.values())


def test_quoted_reads_back_in_json_python_and_yaml() -> None:
    yaml = pytest.importorskip("yaml")
    for text in NAMES:
        lit = quoted(text)
        assert json.loads(lit) == text and ast.literal_eval(lit) == text
        if not any("\ud800" <= c <= "\udfff" for c in text):  # YAML is Unicode: no lone surrogate
            assert yaml.safe_load(lit) == text
        assert lit.isprintable() and "\u202e" not in lit
