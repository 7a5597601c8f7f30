"""exllamav3 before PR #276: ``exllamav3/architecture/dflash.py`` at
001c952b71be2277e3fd8b762e72d9ef5d05f861 (``read_cfg(int, "block_size")``: top level only;
``dflash_config->mask_token_id`` and ``->target_layer_ids``). It reads no layout key: 1+N only."""

from __future__ import annotations

from dflash_ckpt.checks.engines.reading import NESTED_ONLY, TOP_ONLY, Reading, Verdict, one_plus_n_path
from dflash_ckpt.checks.engines.record import Engine
from dflash_ckpt.checks.engines.versions import Versions
from dflash_ckpt.draftspec.specs import DraftSpec, TargetSpec


def judge(spec: DraftSpec, target: TargetSpec | None) -> Verdict:
    """``block_size`` top level only; mask id and taps nested only."""
    r = Reading(spec)
    r.read("block_size", TOP_ONLY)
    r.read("mask_token_id", NESTED_ONLY)
    r.read("target_layer_ids", NESTED_ONLY, kind="list")
    return r.verdict()


ENGINE = Engine("exllamav3-legacy", "exllamav3 (before #276)", judge, one_plus_n_path("its DFlash loader"),
                versions=Versions("git 001c952", None, "read; before PR #276"))
