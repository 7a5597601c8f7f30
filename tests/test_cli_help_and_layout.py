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
    assert "Exit codes: 0 " in text, text[:400]
    assert "2 " in text.split("Exit", 1)[1][:400]


@pytest.mark.parametrize("command", ["rules", "schema"])
def test_no_progress_bars_mentioned_where_there_are_none(command: str) -> None:
    assert "progress bars" not in " ".join(run_cli(command, "--help").stdout.split())


def test_require_engines_help_lists_every_reader() -> None:
    from dflash_ckpt.checks.engines.registry import READER_TITLES

    text = " ".join(run_cli("inspect", "--help").stdout.split()).replace("│", "").replace(" ", "")
    for key in READER_TITLES:
        assert key.replace(" ", "") in text, key


@pytest.mark.slow
def test_smoke_run_speaks_the_github_format() -> None:
    pytest.importorskip("torch")
    res = run_cli("smoke-run", str(TINY / "draft-shifted-taps"), "--target", str(T), "-n", "16", "-p", "hi", "-p", "hello",
                  "-p", "good day", "--device", "cpu", "--output-format", "github")  # three prompts: a verdict on tau
    no_traceback(res)
    lines = res.stdout.splitlines()
    assert res.code == 1 and lines and all(x.startswith(("::error ", "::warning ")) for x in lines), res.stdout
    assert any("title=DF403" in x for x in lines)


def _cut(text: str) -> list[str]:
    return [line for line in text.splitlines() if "…" in line]


@pytest.mark.parametrize("width", ["60", "40"])
def test_inspect_in_a_narrow_terminal_cuts_nothing(width: str) -> None:
    res = run_cli("inspect", str(D), "--target", str(T), env={"COLUMNS": width})
    assert res.code == 0 and not _cut(res.stdout), _cut(res.stdout)
    flat = "".join(line.replace("│", "").strip() for line in res.stdout.splitlines())
    assert "num_speculative_tokens=7" in flat.replace(" ", "")


@pytest.mark.slow
def test_smoke_run_in_a_narrow_terminal_stacks_the_table() -> None:
    """At 60 columns the table cannot show its figures whole: each prompt becomes a line of
    column-value pairs, every figure printed in full, the prompt's name kept."""
    pytest.importorskip("torch")
    wide = run_cli("smoke-run", str(D), "--target", str(T), "-n", "16", "--device", "cpu", "--json").result()
    res = run_cli("smoke-run", str(D), "--target", str(T), "-n", "16", "--device", "cpu", env={"COLUMNS": "60"})
    no_traceback(res)
    assert res.code == 0 and not _cut(res.stdout), res.stdout
    text = " ".join(res.stdout.split())
    for p in wide["prompts"]:
        assert f"{p['name']}: new {p['new_tokens']}," in text, text
        assert f"tau/acc {p['tau']:.2f}/{p['accepted_per_step']:.2f}" in text
    assert "overall: new" in text and "┃" not in res.stdout.split("smoke-run, native backend")[1].split("T = target")[0]


@pytest.mark.slow
def test_smoke_run_pass_shows_the_serve_lines_inspect_shows() -> None:
    pytest.importorskip("torch")
    smoke = run_cli("smoke-run", str(D), "--target", str(T), "--device", "cpu")  # -n 128: 64 steps, a verdict
    inspect = run_cli("inspect", str(D), "--target", str(T))
    assert smoke.code == 0 and "PASS" in smoke.stdout
    serve = inspect.stdout[inspect.stdout.index("serve it with"):]
    assert smoke.stdout.rstrip().endswith(serve.rstrip()), smoke.stdout[-600:]
    failed = run_cli("smoke-run", str(TINY / "draft-shifted-taps"), "--target", str(T), "-n", "16", "--device", "cpu")
    assert failed.code == 1 and "serve it with" not in failed.stdout
    short = run_cli("smoke-run", str(TINY / "draft-shifted-taps"), "--target", str(T), "-n", "8", "--device", "cpu")
    assert short.code == 0 and "NO VERDICT" in short.stdout and "serve it with" not in short.stdout  # DF408: no PASS


def test_a_log_gets_a_progress_line_every_few_seconds() -> None:
    from dflash_ckpt.progress_lines import LineProgress

    now = [100.0]
    lines: list[str] = []
    bar = LineProgress(lines.append, every=5.0, clock=lambda: now[0])
    task = bar.add_task("generating", total=40)
    for _ in range(40):
        now[0] += 1.0
        bar.update(task, description="generating math")
        bar.advance(task)
    assert len(lines) == 8, lines  # 40 s of work, a line each 5 s
    assert lines[0] == "generating math: 5/40 (12%), 5 s elapsed, about 35 s left"
    assert lines[-1].startswith("generating math: 40/40 (100%), 40 s elapsed")


def test_smoke_run_piped_prints_progress_lines(cli, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    import dflash_ckpt.progress_lines as lines

    monkeypatch.setattr(lines, "EVERY_S", 0.0)
    res = cli("smoke-run", str(D), "--target", str(T), "-n", "8", "-p", "hi", "--device", "cpu", "--min-acceptance", "0")
    progress = [x for x in res.stderr.splitlines() if "s elapsed" in x]
    assert res.code == 0 and progress and all("/8 (" in x for x in progress), res.stderr
    quiet = cli("smoke-run", str(D), "--target", str(T), "-n", "8", "-p", "hi", "--device", "cpu", "--min-acceptance", "0", "-q")
    assert "elapsed" not in quiet.stderr


@pytest.mark.slow
def test_a_missing_draft_is_one_annotation_in_smoke_run_too(tmp_path) -> None:
    res = run_cli("smoke-run", str(tmp_path / "nowhere"), "--target", str(T), "--output-format", "github")
    assert res.code == 2 and res.stdout.count("::error") == 1 and res.stdout.startswith(f"::error file={tmp_path}"), res.stdout


@pytest.mark.slow
def test_probe_taps_in_a_narrow_terminal_cuts_no_figure() -> None:
    pytest.importorskip("torch")
    res = run_cli("probe-taps", str(TINY / "draft-shifted-taps"), "--target", str(T), "-n", "16", "--device", "cpu",
                  env={"COLUMNS": "60"})
    no_traceback(res)
    assert not _cut(res.stdout), _cut(res.stdout)
    ranked = [x for x in res.stdout.splitlines() if x.startswith("rank ")]
    assert ranked and all(re.search(r"tau \d+\.\d\d,  ± \d+\.\d\d", x) for x in ranked), res.stdout
    assert any("note configured" in x for x in ranked)
