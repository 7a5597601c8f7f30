"""``probe-taps --write OUT``: a normalized copy of the draft with the measured winner's tap ids
and, when the draft measured clearly better in the other block layout (DF416), that layout
recorded in the keys the engines named with ``--layout-for`` read (``draftspec/layout_keys.py``).

It goes through normalize's own run (``canonical.run.normalize_into``) without its printing, so
the copy is exactly what ``dflash-ckpt normalize DRAFT OUT --target-layer-ids ...`` writes; the
outcome lands in probe-taps' own report and JSON. ``result`` is probe-taps' ``ProbeResult``.
"""

from __future__ import annotations

from typing import Any

from dflash_ckpt.checks.run_findings import refuse_unclear_write
from dflash_ckpt.errors import CheckFailed, UsageError
from dflash_ckpt.sources.base import user_path


def write_copy(result: Any, *, quiet: bool) -> dict[str, Any]:
    """A normalized copy of the draft in ``--write OUT`` with the winner's ids (the normalize run)."""
    # normalize's run without its printing: the outcome lands in probe-taps' own report and JSON.
    from dflash_ckpt.canonical.run import Outcome, Request, normalize_into
    from dflash_ckpt.canonical.plan import Overrides

    opts = result.options
    best = result.best
    assert opts.write is not None and best is not None
    if best.tau < opts.min_acceptance:
        raise UsageError(f"--write {opts.write}: nothing written, no tap set reaches tau {opts.min_acceptance:g} "
                         f"(best {list(best.target_layer_ids)} at {best.tau:.2f})")
    refuse_unclear_write(result)
    replace: tuple[tuple[str, str], ...] = ()
    if result.configured is not None and result.configured != best.target_layer_ids:
        if not any(f.code == "DF410" for f in result.findings):
            raise CheckFailed(
                f"--write {opts.write}: nothing written; the configured target_layer_ids {list(result.configured)} "
                f"trail {list(best.target_layer_ids)} only within measurement noise, so they stay; more prompts "
                "(--prompts) or tokens (-n) separate the two")
        # normalize supplies only missing keys; a measured winner may replace the configured ids.
        replace = (("target_layer_ids", f"measured by probe-taps (tau {best.tau:.2f})"),)
    extra = layout_edits(result)
    req = Request(
        draft=result.draft_path, out=user_path(opts.write, "--write"), in_place=False, backup=True, check=False,
        dry_run=False, force=opts.force, copy=False, prefer=None, mirrors=True,
        overrides=Overrides(target_layer_ids=list(best.target_layer_ids), replace=replace, extra=extra), target=result.target_path or None, revision=None,
        token=opts.token, json_out=True, quiet=quiet,
    )
    oc = Outcome(req=req, label=req.draft)
    normalize_into(req, oc)
    return oc.to_json()


def layout_edits(result: Any) -> tuple[tuple[tuple[str, ...], Any, str], ...]:
    """The layout keys to set in the copy: only after DF416 (a layout measured beyond noise that
    the config does not declare); a confirmed layout needs none, DF417 claims none."""
    from dflash_ckpt.draftspec.layout import ANCHOR_FIRST
    from dflash_ckpt.draftspec.specs import read_config
    from dflash_ckpt.draftspec.layout_keys import layout_paths
    from dflash_ckpt.sources.local import LocalSource
    from pathlib import Path

    m = getattr(result, "layout", None)
    if m is None or not any(f.code == "DF416" for f in result.findings):
        return ()
    config, _ = read_config(LocalSource(Path(result.draft_path), label=result.draft_label))
    tau = m.by_layout[m.best].tau
    why = f"block layout {m.best} measured by probe-taps (tau {tau:.2f}, DF416)"
    return tuple((path, m.best == ANCHOR_FIRST, why) for path in layout_paths(config, result.options.layout_for))
