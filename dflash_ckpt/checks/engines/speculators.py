"""speculators' convert (docs/DESIGN.md section 3): it converts drafts for vLLM and serves nothing
itself. Block top then nested, mask and taps nested, hidden_size equal to the target's; its flat
config's top-level ``sample_from_anchor`` (>= PR #760; default false for DFlash, true for DSpark)
is the block layout."""

from __future__ import annotations

from dflash_ckpt.checks.engines.reading import (NESTED_ONLY, TOP_THEN_NESTED, EnginePath, Reading, Verdict, compare,
                                                dspark_from_anchor, flag)
from dflash_ckpt.checks.engines.record import Engine
from dflash_ckpt.draftspec.siblings import DSPARK
from dflash_ckpt.draftspec.specs import DraftSpec, TargetSpec, as_int

DSPARK_LAUNCH = "its DSpark config"


def judge(spec: DraftSpec, target: TargetSpec | None) -> Verdict:
    """Block top level then nested, mask and taps nested only; hidden_size must be the target's."""
    r = Reading(spec)
    r.read("block_size", TOP_THEN_NESTED)
    r.read("mask_token_id", NESTED_ONLY)
    r.read("target_layer_ids", NESTED_ONLY, kind="list")
    if target is not None:
        th, dh = as_int(target.hidden_size), spec.dims.hidden_size
        if th is not None and dh is not None and th != dh:
            r.problems.append(f"hidden_size {dh} differs from the target's {th}")
    return r.verdict()


def path(spec: DraftSpec) -> EnginePath:
    """Its DSpark config defaults ``sample_from_anchor`` to true, its DFlash config to false."""
    if spec.family == DSPARK:
        return dspark_from_anchor(spec, DSPARK_LAUNCH)
    return compare(spec.block_layout.layout, flag(spec.config.get("sample_from_anchor"), False), False,
                   "its DFlash config (top-level sample_from_anchor, default false)")


ENGINE = Engine("speculators", "speculators", judge, path, dspark_launch=DSPARK_LAUNCH, serves=False,
                speculators_reader="its own format (speculators 0.9.0 models/dflash/config.py)",
                speculators_fact="speculators 0.9.0 models/dflash/config.py")
