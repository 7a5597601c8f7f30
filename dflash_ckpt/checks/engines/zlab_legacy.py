"""z-lab's older reference loader (``dflash/model.py`` as stored at
e763f230965aeba7e6c414f1957b5bece9448e1e): ``config.block_size`` at the top level,
``dflash_config`` for the taps and mask id; drafts are ``block_output_ids[:, 1:]`` (1+N), no
layout key read."""

from __future__ import annotations

from dflash_ckpt.checks.engines.reading import NESTED_ONLY, TOP_ONLY, Reading, Verdict, one_plus_n_path
from dflash_ckpt.checks.engines.record import Engine
from dflash_ckpt.checks.engines.versions import Versions
from dflash_ckpt.draftspec.specs import DraftSpec, TargetSpec


def judge(spec: DraftSpec, target: TargetSpec | None) -> Verdict:
    """``block_size`` and ``num_target_layers`` top level only; mask id and taps nested only."""
    r = Reading(spec)
    r.read("block_size", TOP_ONLY)
    r.read("mask_token_id", NESTED_ONLY)
    r.read("target_layer_ids", NESTED_ONLY, kind="list")
    r.read("num_target_layers", TOP_ONLY)
    return r.verdict()


ENGINE = Engine("zlab-legacy", "z-lab (older)", judge, one_plus_n_path("its DFlash loader"),
                versions=Versions("git e763f23", None, "read"))
