"""Findings about the block layout a run measured or was told to use (DF416-DF418).

Pure functions over a run's result, no torch. probe-taps measures both layouts
(``runtime/probe_layout.py``) and judges them by the rule it judges tap sets by
(``stats.ranking.verdict``): a layout is named only when it leads the other by at least
``LIKELY_Z`` standard errors.
- no finding when the measured layout is the one the config declares (or defaults to): the
  report and the JSON (``layout``) show the figures;
- DF416 (error): the draft measures clearly better in the other layout: the config's
  declaration (or its absence) makes engines that read it serve every draft a position off;
- DF417 (error): the other layout leads, but within noise or on too few steps: the config's is
  not confirmed and none is claimed or written (the declared layout leading narrowly stands);
- nothing when the draft works in neither layout (tau below ``LAYOUT_MIN_TAU``): DF403/DF411;
- DF418 (warning): smoke-run ran the draft in a layout ``--layout`` forced, not the declared one.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from dflash_ckpt.stats.ranking import LIKELY_Z
from dflash_ckpt.draftspec.layout import BlockLayout
from dflash_ckpt.rules import Finding, finding


def _declared(layout: BlockLayout) -> str:
    if layout.source == "default":
        return "declares no layout, so engines take it for 1+N"
    if layout.source == "architectures":
        return f"is a DSpark-family architecture, so engines take it for {layout.layout}"
    value = layout.declared.get(layout.source)
    shown = str(value).lower() if isinstance(value, bool) else repr(value)
    return f"declares {layout.layout} ({layout.source}: {shown})"


def _figures(m: Any) -> str:
    r = m.ranked()
    z = m.z
    zs = "—" if z is None else "inf" if z == float("inf") else f"{z:.1f}"
    return f"tau {r[0][1].tau:.2f} as {r[0][0]} against {r[1][1].tau:.2f} as {r[1][0]}, {zs} standard errors apart"


#: A layout shows itself as one layout working and the other at tau ~1; a leader below this tau
#: works in neither, and its lead says nothing about the layout (whatever --min-acceptance is).
LAYOUT_MIN_TAU = 1.5
#: Steps each layout needs before a standard error means anything.
LAYOUT_MIN_STEPS = 8


def claim(m: Any, min_acceptance: float = 0.0) -> str:
    """``none`` (the draft works in neither layout), ``narrow`` (the leader leads within noise or
    on too few steps) or ``clear`` (at least ``LIKELY_Z`` standard errors: a layout is named)."""
    if m is None or m.best is None or len(m.by_layout) < 2:
        return "none"
    best = m.by_layout[m.best]
    if best.tau is None or best.tau < max(LAYOUT_MIN_TAU, min_acceptance):
        return "none"
    if min(len(c.lengths) for c in m.by_layout.values()) < LAYOUT_MIN_STEPS or (m.z or 0.0) < LIKELY_Z:
        return "narrow"
    return "clear"


def searched_layout(args: Any, quick: Any) -> Any:
    """The draft settings the tap search runs with: the configured layout, unless the quick
    measurement with the configured taps puts the other one ahead beyond noise."""
    if quick.matches_config or claim(quick) != "clear":
        return args
    return dataclasses.replace(args, block_layout=BlockLayout(quick.best, "measured by probe-taps", {}))


def layout_findings(result: Any) -> list[Finding]:
    """DF416/DF417 from probe-taps' layout measurement (``result.layout``)."""
    m = getattr(result, "layout", None)
    verdict = claim(m, result.options.min_acceptance)
    if verdict == "none":
        return []  # nothing works in either layout: DF403/DF411 say so, naming a layout would mislead
    where = f"{result.draft_path or result.draft_label}/config.json"
    taps = list(m.taps)
    if verdict == "narrow":
        if m.matches_config:
            return []  # the declared layout leads, within noise: it stands (as configured taps do)
        return [finding("DF417", f"block layout: {_figures(m)} with target_layer_ids {taps}, within noise "
                                 f"or on too few steps; the config {_declared(m.declared)}, which this does not "
                                 "confirm, and no layout is claimed or written: rerun with more -n or --prompts in "
                                 "the draft's training format, or check the model card", path=where)]
    if m.matches_config:
        return []  # confirmed: the report and the JSON say so (``result.layout``)
    key = m.declared.source if m.declared.source in m.declared.declared else "dflash_config.sample_from_anchor"
    return [finding("DF416", f"key '{key}': the draft was trained {m.best} ({_figures(m)} with "
                             f"target_layer_ids {taps}) but the config {_declared(m.declared)}; engines that follow "
                             "it serve every draft one position off (tau ~1, no error); record the measured layout "
                             "with probe-taps --write OUT (--layout-for names the engines whose key to write)",
                             path=where, key=key)]


def smoke_layout_findings(ran: BlockLayout, declared: BlockLayout) -> list[Finding]:
    """DF418 when smoke-run's ``--layout`` ran the draft in another layout than the config's."""
    if ran.layout == declared.layout:
        return []
    return [finding("DF418", f"--layout {ran.layout}: the draft ran as {ran.layout}, but its config "
                             f"{_declared(declared)}; every engine follows the config, so the figures here are not "
                             "what they serve; if this layout is the trained one, record it (probe-taps --write OUT)",
                             path=None)]
