"""Checks: pure functions from resolved specs (or a run's results) to findings.

Nothing here reads files: ``dflash_ckpt.inspection`` reads a draft (and target) through a
``Source`` and then runs these checks. Naming: ``check_*`` returns findings; a function that
raises on bad input is named ``require_*`` (or ``validate`` for options).
"""

from __future__ import annotations

from dflash_ckpt.checks.acceptance import check_acceptance_keys
from dflash_ckpt.checks.config import check_config
from dflash_ckpt.checks.dflash2 import check_dflash2_config, check_dflash2_weights
from dflash_ckpt.checks.mistakes import check_target_as_draft
from dflash_ckpt.checks.layout import check_layout
from dflash_ckpt.checks.siblings import check_serving_limits, check_sibling_config
from dflash_ckpt.checks.pairing import check_pairing
from dflash_ckpt.checks.pitfalls import check_draft_pitfalls, check_target_pitfalls
from dflash_ckpt.checks.speculators_format import check_speculators_format
from dflash_ckpt.checks.weights import check_weights
from dflash_ckpt.rules import Finding
from dflash_ckpt.draftspec.specs import DraftSpec, TargetSpec


def run_checks(spec: DraftSpec, target: TargetSpec | None = None) -> list[Finding]:
    """Every check that applies: config always, weights when read, pairing when a target is given;
    a target model given as the draft is that one finding (DF232), nothing about missing DFlash keys."""
    mistaken = check_target_as_draft(spec)
    if mistaken:
        return mistaken
    findings = (check_config(spec, target.label if target is not None else None) + spec.problems["rope"] + check_layout(spec)
                + check_sibling_config(spec) + check_dflash2_config(spec) + check_acceptance_keys(spec))
    if spec.weights is not None:
        findings += check_weights(spec) + check_dflash2_weights(spec)
    findings += check_draft_pitfalls(spec) + check_speculators_format(spec, target)
    if target is not None:
        findings += check_pairing(spec, target) + check_target_pitfalls(spec, target) + check_serving_limits(spec, target)
    return findings


__all__ = ["check_config", "check_dflash2_config", "check_dflash2_weights", "check_pairing", "check_weights", "run_checks"]
