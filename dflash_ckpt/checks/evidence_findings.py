"""Findings on what smoke-run's acceptance rests on: DF408 (too little evidence for a verdict)
and DF409 (a suite's tau far below the published figure for the same task).

Pure functions, no torch. They read an ``Evidence`` (``run/smoke_evidence.py``) by its fields:
``overall`` (a ``TauEstimate`` with ``enough`` and ``shortfall()``) and ``suites`` (each with
``tau``, ``published``, ``reference`` and ``far_below``). Both are warnings: too little evidence
is no verdict either way (exit 0 unless another finding is an error), and a tau far below a
published one names causes to check rather than proving one.
"""

from __future__ import annotations

from typing import Any

from dflash_ckpt.checks.published import far_below_message
from dflash_ckpt.rules import Finding, finding


def evidence_findings(evidence: Any, *, min_acceptance: float) -> list[Finding]:
    """DF408 when the run is below the minimum of evidence (unless ``--min-acceptance 0`` asked for
    no verdict on tau: the speedup is withheld all the same); else DF409 for each suite whose tau
    is far below its published reference."""
    short = evidence.overall.shortfall()
    if short is not None:
        if min_acceptance <= 0 or evidence.overall.steps == 0:
            return []
        return [finding("DF408", short + "; no verdict on tau (DF403 is not judged) and the speedup is withheld",
                        path=None)]  # about the run, not a file
    out: list[Finding] = []
    for name, suite in evidence.suites.items():
        if suite.far_below:
            row = min(suite.published, key=lambda r: r.tau)
            ci = suite.tau.interval
            out.append(finding("DF409", far_below_message(name, suite.tau.tau, (ci.low, ci.high), row), path=None))
    return out


__all__ = ["evidence_findings"]
