"""What smoke-run's acceptance figures rest on: tau with its interval overall and per suite, the
speedup with its interval, and the published figures beside each suite (no torch).

Why here: ``stats/confidence.py`` holds the statistics and ``checks/published.py`` the table;
this module applies both to a run's prompts once, so the report, the JSON and the findings
(DF408, DF409: ``checks/evidence_findings.py``) read the same numbers. A prompt belongs to a
suite by its name (``sources/suites.suite_of``: ``math-03``); the built-in prompts and the
user's own count in ``overall`` only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from dflash_ckpt.checks.published import PublishedRow, comparable, far_below, published_for, reference_tau
from dflash_ckpt.stats.confidence import (MIN_PROMPTS, MIN_STEPS, TOO_LITTLE, SpeedupEstimate, StepTiming,
                                            TauEstimate, speedup_estimate, tau_estimate)
from dflash_ckpt.sources.suites import SUITES, suite_of

#: Why a speedup is missing when the timing says it is above tau (DF406).
IMPLAUSIBLE = "above tau, impossible (DF406)"


@dataclass(frozen=True)
class SuiteEvidence:
    """One suite's tau and the published figures it is set beside (empty when the draft is not a
    published one, or the suite has no comparable benchmark)."""

    name: str
    tau: TauEstimate
    published: tuple[PublishedRow, ...] = ()

    @property
    def reference(self) -> float | None:
        """The published tau this suite is held to (the lowest comparable one)."""
        return reference_tau(self.published)

    @property
    def far_below(self) -> bool:
        """DF409's test: the upper 95% bound under ``FAR_BELOW`` x the reference."""
        ref, ci = self.reference, self.tau.interval
        return ref is not None and ci is not None and self.tau.enough and far_below(self.tau.tau, ci.high, ref)

    def to_json(self) -> dict[str, Any]:
        return {**self.tau.to_json(), "published": [r.to_json() for r in self.published],
                "reference_tau": self.reference, "far_below": self.far_below}


@dataclass(frozen=True)
class Evidence:
    """tau overall and per suite, the speedup, and what the verdict on acceptance may rest on."""

    overall: TauEstimate
    speedup: SpeedupEstimate
    suites: dict[str, SuiteEvidence] = field(default_factory=dict)
    #: The published draft the run's draft was recognised as (repo id), else None.
    published_draft: str | None = None

    @property
    def enough(self) -> bool:
        return self.overall.enough

    def overall_json(self) -> dict[str, Any]:
        """The fields ``overall`` gains (docs/json.md): tau's standard error and interval, the
        minimum of evidence, the speedup's interval and why it is withheld."""
        t = self.overall
        return {
            "tau_se": None if t.se is None else round(t.se, 4),
            "tau_se_steps": None if t.se_steps is None else round(t.se_steps, 4),
            "tau_ci95": None if t.interval is None else t.interval.to_json(),
            "evidence": {"enough": t.enough, "steps": t.steps, "prompts": t.prompts, "min_steps": MIN_STEPS,
                         "min_prompts": MIN_PROMPTS, "shortfall": t.shortfall()},
            "speedup_ci95": None if self.speedup.interval is None else self.speedup.interval.to_json(),
            "speedup_withheld": self.speedup.withheld,
        }

    def suites_json(self) -> dict[str, Any] | None:
        return {name: s.to_json() for name, s in self.suites.items()} or None


def _timing(stats: dict[str, Any] | None) -> StepTiming:
    if not stats:
        return StepTiming(0.0, 0.0, 0.0, 0)
    return StepTiming(stats["median"], stats["p25"], stats["p75"], stats["n"])


def gather_evidence(runs: Sequence[Any], overall: dict[str, Any], *, published_draft: str | None = None,
                    temperature: float = 0.0) -> Evidence:
    """The evidence of a run's prompts (``PromptRun``s: their acceptance lengths) and its
    ``overall_figures`` (the step timings and DF406's plausibility)."""
    lengths = [list(r.dflash.acceptance_lengths) for r in runs]
    tau = tau_estimate(lengths)
    timing = overall.get("timing") or {}
    speed = speedup_estimate(tau, _timing(timing.get("target_step_ms")), _timing(timing.get("dflash_step_ms")))
    if speed.withheld is None and not overall.get("speedup_plausible", True):
        speed = SpeedupEstimate(None, None, IMPLAUSIBLE)
    rows = published_for(published_draft) if published_draft else []
    grouped: dict[str, list[list[int]]] = {}
    for run, ls in zip(runs, lengths):
        name = suite_of(run.prompt.name)
        if name is not None:
            grouped.setdefault(name, []).append(ls)
    suites = {name: SuiteEvidence(name, tau_estimate(grouped[name]), tuple(comparable(rows, name, temperature)))
              for name in SUITES if name in grouped}
    return Evidence(tau, speed, suites, published_draft)


__all__ = ["IMPLAUSIBLE", "TOO_LITTLE", "Evidence", "SuiteEvidence", "gather_evidence"]
