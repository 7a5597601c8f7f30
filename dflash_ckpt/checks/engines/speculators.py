"""speculators' convert (docs/DESIGN.md section 3): it converts drafts for vLLM and serves nothing
itself. Block top then nested, mask and taps nested, hidden_size equal to the target's; its flat
config's top-level ``sample_from_anchor`` (>= PR #760; default false for DFlash, true for DSpark)
is the block layout."""

from __future__ import annotations

from dflash_ckpt.checks.engines.reading import (NESTED_ONLY, TOP_THEN_NESTED, EnginePath, Reading, Verdict, compare,
                                                dspark_from_anchor, flag)
from dflash_ckpt.checks.engines.record import Engine
from dflash_ckpt.checks.engines.transformers_config import strict_config_problems
from dflash_ckpt.checks.engines.versions import Versions
from dflash_ckpt.draftspec.siblings import DSPARK
from dflash_ckpt.draftspec.specs import DraftSpec, TargetSpec, as_int

DSPARK_LAUNCH = "its DSpark config"


def judge(spec: DraftSpec, target: TargetSpec | None) -> Verdict:
    """Block top level then nested (at least 2: one speculative token), mask and taps nested only;
    hidden_size must be the target's, whose ``num_hidden_layers`` it reads at the top level; the
    draft's config through transformers' strict classes (``convert/dflash/converter.py``
    ``_build_config``, run by tests/test_engine_parser_judges.py)."""
    r = Reading(spec)
    if spec.native is None:
        r.problems += strict_config_problems(spec)
    block = r.read("block_size", TOP_THEN_NESTED)
    if block is not None and block < 2:
        r.problems.append(f"block_size {block} leaves no speculative token (its proposal config needs at least 1)")
    r.read("mask_token_id", NESTED_ONLY)
    ids = r.read("target_layer_ids", NESTED_ONLY, kind="list")
    if target is not None:
        th, dh = as_int(target.hidden_size), spec.dims.hidden_size
        if th is not None and dh is not None and th != dh:
            r.problems.append(f"hidden_size {dh} differs from the target's {th}")
        if spec.native is None and ids is not None and not target.depth_at_top:
            r.notes.append("but its converter raises KeyError 'num_hidden_layers' on this target (its config keeps it "
                           "in text_config): pass the taps + 1 as --algorithm-kwargs "
                           "'{\"aux_hidden_state_layer_ids\": [...]}'")
    return r.verdict()


def path(spec: DraftSpec) -> EnginePath:
    """Its DSpark config defaults ``sample_from_anchor`` to true, its DFlash config to false."""
    if spec.family == DSPARK:
        return dspark_from_anchor(spec, DSPARK_LAUNCH)
    if spec.native is None:  # _build_config sets no sample_from_anchor: the DFlash config's default
        return compare(spec.block_layout.layout, False, False,
                       "its converter (convert/dflash/converter.py writes no sample_from_anchor: default false)")
    return compare(spec.block_layout.layout, flag(spec.top("sample_from_anchor"), False), False,
                   "its DFlash config (top-level sample_from_anchor, default false)")


ENGINE = Engine("speculators", "speculators", judge, path, dspark_launch=DSPARK_LAUNCH, serves=False,
                speculators_reader="its own format (speculators 0.9.0 models/dflash/config.py)",
                speculators_fact="speculators 0.9.0 models/dflash/config.py",
                versions=Versions("0.9.0", "0.9.0", "read in its wheel; run here"))
