"""``--report FILE.md`` (issue 43): a Markdown report from inspect, smoke-run and probe-taps with
the acceptance-by-position chart beside it; the docs example checked against the real command;
the github format's notice on a pass."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import ROOT
from report_example import EXAMPLE, REPORT, argv, masked

TINY = ROOT / "fixtures" / "tiny-pair"
PNG = b"\x89PNG\r\n\x1a\n"


def test_inspect_report_says_what_was_checked_and_found(cli, tmp_path: Path) -> None:
    out = tmp_path / "inspect.md"
    top = TINY / "draft-top-level"
    res = cli("inspect", str(top), "--target", str(TINY / "target"), "--report", str(out))
    assert res.code == 0 and res.stdout.rstrip().endswith(f"report: {out}")
    text = out.read_text()
    assert text.startswith(f"# dflash-ckpt inspect: {top}\n\n**OK**: 0 error(s), 1 warning(s), 1 info")
    for section in ("## What was checked", "## Where it ran", "## Resolved DFlash keys", "## Findings", "## Readers", "## Serve it"):
        assert f"\n{section}\n" in text, section
    assert "| `DF148` | warning | lmdeploy 0.18 cannot load it as published" in text
    assert "- lmdeploy: no line: lmdeploy 0.18 reads block_size only from dflash_config" in text
    assert f"dflash-ckpt inspect {top} --target {TINY / 'target'} --report {out}" in text  # the command line
    assert not (tmp_path / "inspect-acceptance.png").exists()  # nothing ran: no chart
    again = tmp_path / "again.md"
    cli("inspect", str(top), "--target", str(TINY / "target"), "--report", str(again))
    assert again.read_text().replace(str(again), str(out)) == text  # deterministic: a re-run's diff is empty


def test_a_report_path_that_cannot_be_written_is_refused_before_the_run(cli, tmp_path: Path) -> None:
    res = cli("smoke-run", str(TINY / "draft"), "--target", str(TINY / "target"), "--report", str(tmp_path / "no" / "r.md"))
    assert res.code == 2 and "DF001 error: --report" in res.stderr and "no folder" in res.stderr and res.stdout == ""
    res = cli("inspect", str(TINY / "draft"), "--report", str(tmp_path))
    assert res.code == 2 and "a folder; give a file name" in res.stderr


def test_markdown_text_is_inert_and_escaped() -> None:
    from dflash_ckpt.report import markdown as md

    assert md.text("a|b*c\x1b[31m") == "a\\|b\\*c\\\\x1b\\[31m"
    assert md.fenced(["x ``` y"]).startswith("````\n")
    assert md.table(["a", "b"], [["1", "2"]], ["l", "r"]) == "| a | b |\n|---|---:|\n| 1 | 2 |"


def test_position_rates() -> None:
    from dflash_ckpt.report.chart import position_rates

    # lengths 1 (no draft accepted), 3 (drafts 1-2), 8 (all 7): position k is accepted when length > k
    assert position_rates([1, 3, 8], 7) == [2 / 3, 2 / 3, 1 / 3, 1 / 3, 1 / 3, 1 / 3, 1 / 3]
    assert position_rates([], 3) == [0.0, 0.0, 0.0]


@pytest.mark.slow
def test_smoke_run_report_and_its_chart(cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "smoke.md"
    res = cli("smoke-run", str(TINY / "draft"), "--target", str(TINY / "target"), "--device", "cpu", "--report", str(out),
              "--json")
    assert res.code == 0
    doc = json.loads(res.stdout)["results"][0]  # --json: the document alone on stdout, the report beside it
    text = out.read_text()
    chart = tmp_path / "smoke-acceptance.png"
    assert chart.read_bytes().startswith(PNG) and "![acceptance by draft position](smoke-acceptance.png)" in text
    o = doc["overall"]
    assert f"**tau {o['tau']:.2f}** (95% {o['tau_ci95'][0]:.2f}–{o['tau_ci95'][1]:.2f}, clustered by prompt)" in text
    assert f"**Speedup {o['speedup']:.2f}x**" in text and "a CPU speedup is not a GPU speedup" in text
    assert "identical on 3/3, a near tie on 0, different on 0" in text and "\n## Serve it\n" in text
    steps = [n for p in doc["prompts"] for n in p["acceptance_lengths"]]
    first = round(100 * sum(1 for n in steps if n > 1) / len(steps))
    assert f"| 1 | {first}% |" in text  # position 1: the steps that accepted at least one draft
    # the same run again: the same chart, byte for byte (no timestamp in the PNG)
    again = tmp_path / "again.md"
    cli("smoke-run", str(TINY / "draft"), "--target", str(TINY / "target"), "--device", "cpu", "--report", str(again), "-q")
    assert (tmp_path / "again-acceptance.png").read_bytes() == chart.read_bytes()
    # without matplotlib: the report says so and keeps the table
    monkeypatch.setattr("dflash_ckpt.report.build.matplotlib_missing", lambda: "matplotlib is not installed (pip install \"dflash-ckpt[report]\")")
    bare = tmp_path / "bare.md"
    cli("smoke-run", str(TINY / "draft"), "--target", str(TINY / "target"), "--device", "cpu", "--report", str(bare), "-q")
    body = bare.read_text()
    assert "No chart: matplotlib is not installed" in body and "| position | steps that accepted it |" in body
    assert not (tmp_path / "bare-acceptance.png").exists()


@pytest.mark.slow
def test_probe_taps_report(cli, tmp_path: Path) -> None:
    out = tmp_path / "probe.md"
    res = cli("probe-taps", str(TINY / "draft-shifted-taps"), "--target", str(TINY / "target"), "--device", "cpu",
              "--report", str(out))
    assert res.code == 1  # DF410: the configured taps lose
    text = out.read_text()
    assert text.startswith(f"# dflash-ckpt probe-taps: {TINY / 'draft-shifted-taps'} on {TINY / 'target'}\n\n**FAIL**: "
                           "best target_layer_ids `[1, 3, 5]`")
    assert "Configured `[2, 4, 6]`: rank " in text and "| `DF410` | error |" in text
    assert "### Acceptance by draft position" in text


@pytest.mark.slow
def test_github_format_says_the_verdict_of_a_pass_once(cli) -> None:
    res = cli("smoke-run", str(TINY / "draft"), "--target", str(TINY / "target"), "--device", "cpu",
              "--output-format", "github")
    assert res.code == 0
    lines = res.stdout.splitlines()
    notices = [line for line in lines if line.startswith("::notice title=dflash-ckpt smoke-run::")]
    assert len(notices) == 1 and notices[0].split("::", 2)[2].startswith(
        f"PASS: {TINY / 'draft'} on {TINY / 'target'}: tau "), lines
    assert "outputs match on 3/3 prompt(s), speedup " in notices[0]
    short = cli("smoke-run", str(TINY / "draft"), "--target", str(TINY / "target"), "--device", "cpu", "-p", "hi",
                "-n", "8", "--output-format", "github")
    assert "NO VERDICT (DF408: too little evidence)" in short.stdout  # a pass without a verdict says so


@pytest.mark.slow
def test_the_docs_example_report_is_what_the_command_writes(cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/example-report.md against a fresh run of its command (``report_example.EXAMPLE``),
    every figure, the bars, the commit and the machine's rows masked; its chart is a PNG."""
    pytest.importorskip("matplotlib")
    assert REPORT.with_name("example-report-acceptance.png").read_bytes().startswith(PNG)
    assert "(example-report.md)" in (ROOT / "docs" / "report.md").read_text() and EXAMPLE.split(" --report")[0] in (
        ROOT / "docs" / "report.md").read_text()
    fresh = tmp_path / "docs" / "example-report.md"
    fresh.parent.mkdir()
    monkeypatch.chdir(ROOT)
    args = argv()
    args[-1] = str(fresh)
    res = cli(*args)
    assert res.code == 0, res.stderr
    text = fresh.read_text().replace(str(fresh), str(REPORT.relative_to(ROOT)))
    assert masked(text) == masked(REPORT.read_text())


@pytest.mark.slow
def test_a_hub_draft_is_named_with_the_commit_it_resolved_to(hub, home, tmp_path: Path) -> None:
    import re

    from conftest import run_cli
    from hub_server import hub_env

    out = tmp_path / "hub.md"
    res = run_cli("inspect", "tiny/draft", "--report", str(out), env=hub_env(hub, home), timeout=120)
    assert res.code == 0, res.stderr
    assert re.search(r"\| draft \| `tiny/draft` \| Hub repo at commit `[0-9a-f]{40}` \|", out.read_text()), out.read_text()
