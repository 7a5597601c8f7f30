"""z-lab's reference loader, main (docs/DESIGN.md section 3; its torch loader was not stored at a
newer commit than the older one's): block and mask nested then top, taps nested; 1+N only
(shared/DESIGN.md section 12)."""

from __future__ import annotations

from dflash_ckpt.checks.engines.reading import NESTED_ONLY, NESTED_THEN_TOP, Reading, Verdict, one_plus_n_path
from dflash_ckpt.checks.engines.record import Engine
from dflash_ckpt.checks.engines.versions import Versions
from dflash_ckpt.draftspec.specs import DraftSpec, TargetSpec


def judge(spec: DraftSpec, target: TargetSpec | None) -> Verdict:
    """Block and mask nested then top level; taps nested only."""
    r = Reading(spec)
    r.read("block_size", NESTED_THEN_TOP)
    r.read("mask_token_id", NESTED_THEN_TOP)
    r.read("target_layer_ids", NESTED_ONLY, kind="list")
    return r.verdict()


ENGINE = Engine("zlab", "z-lab (main)", judge, one_plus_n_path("its DFlash loader"),
                versions=Versions("git main", None, "read; its torch loader as last stored"))
