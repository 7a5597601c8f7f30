"""exllamav3 after PR #276: ``exllamav3/architecture/dflash.py`` as the newest stored version of
that file reads it (the index gave no commit for it): ``["block_size", "dflash_config->block_size"]``
(top level first, then nested), mask id and taps nested first, then top; it also applies
``attention_sink_bias``, ``attention_value_scale`` and ``is_causal`` (``checks.acceptance``).
shared/DESIGN.md section 10 says "dflash_config only" after #276; the source reads both places,
and the source wins. It reads no layout key: 1+N only."""

from __future__ import annotations

from dflash_ckpt.checks.engines.reading import NESTED_THEN_TOP, TOP_THEN_NESTED, Reading, Verdict, one_plus_n_path
from dflash_ckpt.checks.engines.record import Engine
from dflash_ckpt.draftspec.specs import DraftSpec, TargetSpec


def judge(spec: DraftSpec, target: TargetSpec | None) -> Verdict:
    """``block_size`` top level then nested; mask id and taps nested then top level."""
    r = Reading(spec)
    r.read("block_size", TOP_THEN_NESTED)
    r.read("mask_token_id", NESTED_THEN_TOP)
    r.read("target_layer_ids", NESTED_THEN_TOP, kind="list")
    return r.verdict()


ENGINE = Engine("exllamav3", "exllamav3", judge, one_plus_n_path("its DFlash loader"),
                speculators_fact="exllamav3 1.6.5 architecture/dflash.py reads target_layer_ids nested then top level, "
                                 "never aux_hidden_state_layer_ids or transformer_layer_config")
