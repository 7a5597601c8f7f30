"""smoke-run's report of what its acceptance rests on: tau and the speedup with their 95%
intervals, tau per suite beside the published figures, and the verdict's words on acceptance.

Apart from ``smoke_report.py`` so the table and the statistics each stay one job; the numbers
are ``run/smoke_evidence.py``'s, as the JSON's.
"""

from __future__ import annotations

from typing import Any

from dflash_ckpt.console import safe


def _ci(interval: Any, fmt: str = "{:.2f}") -> str:
    return "—" if interval is None else f"{fmt.format(interval.low)}-{fmt.format(interval.high)}"


def confidence_lines(ev: Any) -> list[str]:
    """tau with its standard error and interval (the speedup's is on the verdict line); nothing
    below the minimum of evidence (``stats/confidence.py``: MIN_STEPS steps over MIN_PROMPTS prompts),
    where DF408 and the verdict line say what is missing."""
    t = ev.overall
    if t.steps == 0:
        return []
    if not t.enough:
        return []  # DF408 and the verdict line say it, with the shortfall
    se = f"standard error {t.se:.2f}" if t.se is not None else "no standard error"
    naive = f"; {t.se_steps:.2f} if the steps were independent" if t.se_steps is not None else ""
    return [f"tau {t.tau:.2f}, 95% interval {_ci(t.interval)} ({se}, clustered by prompt: {t.steps} DFlash steps "
            f"over {t.prompts} prompts, Student's t with {t.prompts - 1} degrees of freedom{naive})"]


def suite_lines(ev: Any) -> list[str]:
    """tau per suite with its interval, each beside the published figures of the same task."""
    if not ev.suites:
        return []
    head = "tau by suite (95% interval, clustered by prompt)"
    if ev.published_draft:
        head += f"; published: {ev.published_draft}'s reported tau on the benchmarks of the same task"
    lines = [head]
    rows = [(name, s.tau) for name, s in ev.suites.items()] + [("overall", ev.overall)]
    for name, t in rows:
        line = (f"  {name:<8} {t.tau:5.2f}  {_ci(t.interval):>11}  {t.steps:>4} steps {t.prompts:>3} prompts"
                + ("" if t.enough else "  too little evidence"))
        suite = ev.suites.get(name)
        if suite is not None and suite.published:
            figures = ", ".join(f"{r.benchmark} {r.tau:.2f}" for r in suite.published)
            line += f"  published {figures} (temperature {suite.published[0].temperature:g}; {suite.published[0].source})"
        elif suite is not None and ev.published_draft:
            line += "  published: none comparable"
        lines.append(safe(line))
    return lines


def acceptance_words(res: Any, stats: dict[str, Any]) -> tuple[str | None, str, str]:
    """``(status, tau, speedup)`` for the verdict line: status None (PASS or FAIL by the exit code)
    unless DF408 says the run is below the minimum of evidence and nothing failed: NO VERDICT.
    With ``--min-acceptance 0`` (no verdict on tau asked) a short run is PASS on its outputs alone."""
    ev = stats.get("evidence") or {}
    ci = stats.get("tau_ci95")
    tau = f"{stats['tau']:.2f}" if stats.get("tau") is not None else "—"
    if not ev.get("enough", True):
        warned = any(f.code == "DF408" for f in res.findings)
        words = (f"tau {tau} from {ev['steps']} step(s) over {ev['prompts']} prompt(s) is too little evidence"
                 + (" (DF408, a warning: exit 0 unless another finding is an error)" if warned else ""))
        word = "[bold yellow]NO VERDICT[/]" if warned and res.exit_code == 0 else None
        return word, words, "withheld (too little evidence)"
    words = f"tau {tau}" + (f" (95% {ci[0]:.2f}-{ci[1]:.2f}, min {res.options.min_acceptance:g})" if ci else
                            f" (min {res.options.min_acceptance:g})")
    if stats.get("speedup") is not None:
        sci = stats.get("speedup_ci95")
        speed = f"{stats['speedup']:.2f}x" + (f" (95% {sci[0]:.2f}x-{sci[1]:.2f}x)" if sci else "")
    elif not stats.get("speedup_plausible", True):
        speed = "withheld (DF406)"
    else:
        speed = "—"
    return None, words, speed
