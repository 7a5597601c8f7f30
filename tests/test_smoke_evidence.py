"""smoke-run's evidence on acceptance without a model: tau's interval overall and per suite, the
speedup withheld below the minimum of evidence, the published figures beside each suite, and the
findings DF408 and DF409 that fire on them (run/smoke_evidence.py, checks/evidence_findings.py,
commands/evidence_report.py)."""

from __future__ import annotations

from types import SimpleNamespace

from dflash_ckpt.checks.evidence_findings import evidence_findings
from dflash_ckpt.commands.evidence_report import confidence_lines, suite_lines
from dflash_ckpt.rules import RULES, Severity
from dflash_ckpt.run.smoke_evidence import IMPLAUSIBLE, gather_evidence
from dflash_ckpt.stats.confidence import TOO_LITTLE

QWEN3_4B = "z-lab/Qwen3-4B-DFlash-b16"
TIMING = {"target_step_ms": {"n": 40, "median": 10.0, "p25": 9.5, "p75": 10.5},
          "dflash_step_ms": {"n": 40, "median": 20.0, "p25": 19.0, "p75": 21.0}}


def runs(named: dict[str, list[int]]) -> list[SimpleNamespace]:
    """Prompt runs as the evidence reads them: a name and DFlash's acceptance lengths."""
    return [SimpleNamespace(prompt=SimpleNamespace(name=name), dflash=SimpleNamespace(acceptance_lengths=ls))
            for name, ls in named.items()]


def overall(plausible: bool = True) -> dict:
    return {"timing": TIMING, "speedup_plausible": plausible}


def test_four_steps_of_one_prompt_are_too_little_evidence() -> None:
    ev = gather_evidence(runs({"prompt-1": [2, 3, 5, 7]}), overall())
    assert not ev.enough and ev.overall.steps == 4 and ev.speedup.speedup is None
    assert ev.speedup.withheld == TOO_LITTLE and ev.overall_json()["speedup_withheld"] == TOO_LITTLE
    [f] = evidence_findings(ev, min_acceptance=2.0)
    assert f.code == "DF408" and RULES["DF408"].severity == Severity.WARNING
    assert f.message.startswith(TOO_LITTLE) and "4 DFlash step(s) over 1 prompt(s)" in f.message
    assert evidence_findings(ev, min_acceptance=0.0) == []  # no verdict on tau was asked
    assert confidence_lines(ev) == []  # DF408 and the verdict line say it


def test_enough_evidence_gives_intervals_and_per_suite_taus() -> None:
    named = {f"math-{i:02d}": [6, 7, 5, 8, 6, 7] for i in range(1, 5)} | {f"chat-{i:02d}": [3, 4, 2, 3, 4, 3]
                                                                             for i in range(1, 5)}
    named["math-02"] = [5, 6, 5, 7, 6, 6]
    ev = gather_evidence(runs(named) + runs({"prompt-1": [1, 2]}), overall())
    assert ev.enough and set(ev.suites) == {"math", "chat"}  # prompt-1 counts in overall only
    assert ev.overall.prompts == 9 and ev.suites["math"].tau.prompts == 4
    assert ev.suites["math"].published == () and not ev.suites["math"].far_below
    j = ev.overall_json()
    assert j["tau_ci95"][0] < ev.overall.tau < j["tau_ci95"][1] and j["evidence"]["enough"]
    assert ev.speedup.speedup is not None and j["speedup_ci95"][0] < ev.speedup.speedup < j["speedup_ci95"][1]
    assert j["speedup_withheld"] is None and evidence_findings(ev, min_acceptance=2.0) == []
    [line] = confidence_lines(ev)
    assert "95% interval" in line and "clustered by prompt" in line
    lines = suite_lines(ev)
    assert lines[0].startswith("tau by suite") and [x.split()[0] for x in lines[1:]] == ["math", "chat", "overall"]


def test_an_implausible_speedup_is_withheld_with_its_reason() -> None:
    ev = gather_evidence(runs({f"p{i}": [3] * 12 for i in range(3)}), overall(plausible=False))
    assert ev.enough and ev.speedup.speedup is None and ev.speedup.withheld == IMPLAUSIBLE


def test_a_published_draft_sets_its_figures_beside_each_suite_and_df409_fires_far_below() -> None:
    """The 4B card: GSM8K 6.50, Math500 7.84 at temperature 0; a math suite measured at tau ~2
    (upper bound far under 0.6 x 6.50 = 3.9) is DF409; a chat suite near MT-Bench's 4.35 is not."""
    named = {f"math-{i:02d}": [2, 2, 1, 3, 2, 2, 2, 1] for i in range(1, 6)}
    named |= {f"chat-{i:02d}": [4, 5, 3, 4, 5, 4, 4, 5] for i in range(1, 6)}
    named |= {f"long-{i:02d}": [4, 4, 4, 5] for i in range(1, 4)}
    ev = gather_evidence(runs(named), overall(), published_draft=QWEN3_4B)
    math, chat, long = ev.suites["math"], ev.suites["chat"], ev.suites["long"]
    assert [r.benchmark for r in math.published] == ["GSM8K", "Math500"] and math.reference == 6.5
    assert [r.benchmark for r in chat.published] == ["MT-Bench"] and long.published == ()
    assert math.far_below and not chat.far_below and not long.far_below
    [f] = evidence_findings(ev, min_acceptance=2.0)
    assert f.code == "DF409" and RULES["DF409"].severity == Severity.WARNING
    assert "suite math" in f.message and "6.50" in f.message and "GSM8K" in f.message
    assert ev.suites_json()["math"]["published"][0]["source"].startswith("https://")
    lines = suite_lines(ev)
    assert QWEN3_4B in lines[0]
    [m] = [x for x in lines if x.lstrip().startswith("math")]
    assert "published GSM8K 6.50, Math500 7.84 (temperature 0;" in m
    [lo] = [x for x in lines if x.lstrip().startswith("long")]
    assert "none comparable" in lo
    # At temperature 0.7 the temperature-1 figures are the comparable ones.
    warm = gather_evidence(runs(named), overall(), published_draft=QWEN3_4B, temperature=0.7)
    assert [r.tau for r in warm.suites["math"].published] == [5.98, 6.67]


def test_a_suite_below_the_minimum_never_fires_df409() -> None:
    ev = gather_evidence(runs({"math-01": [1, 1], "math-02": [1, 1], "chat-01": [1] * 40,
                               "chat-02": [1] * 40}), overall(), published_draft=QWEN3_4B)
    assert ev.enough and not ev.suites["math"].tau.enough and not ev.suites["math"].far_below
