"""Findings about the block layout a run measured or was told to use (DF416-DF419).

Pure functions over a run's result, no torch. probe-taps measures both layouts
(``runtime/probe_layout.py``) and judges them by the rule it judges tap sets by
(``run_findings.verdict``): a layout is named only when it leads the other by at least
``LIKELY_Z`` standard errors.
- DF416 (info): the measured layout is the one the config declares (or defaults to);
- DF417 (error): the draft measures clearly better in the other layout: the config's
  declaration (or its absence) makes engines that read it serve every draft a position off;
- DF418 (error): neither layout leads beyond noise, so none is claimed and ``--write`` refuses;
- DF419 (warning): smoke-run ran the draft in a layout ``--layout`` forced, not the declared one.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from dflash_ckpt.checks.run_findings import LIKELY_Z
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


def searched_layout(args: Any, quick: Any) -> Any:
    """The draft settings the tap search runs with: the configured layout, unless the quick
    measurement with the configured taps puts the other one ahead beyond noise."""
    if quick.best is None or quick.matches_config or (quick.z or 0.0) < LIKELY_Z:
        return args
    return dataclasses.replace(args, block_layout=BlockLayout(quick.best, "measured by probe-taps", {}))


def layout_findings(result: Any) -> list[Finding]:
    """DF416/DF417/DF418 from probe-taps' layout measurement (``result.layout``)."""
    m = getattr(result, "layout", None)
    if m is None or m.best is None or len(m.by_layout) < 2:
        return []
    where = f"{result.draft_path or result.draft_label}/config.json"
    best = m.by_layout[m.best]
    if best.tau is None or best.tau < result.options.min_acceptance:
        return []  # nothing works in either layout: DF411 says so, naming a layout would mislead
    taps = list(m.taps)
    if (m.z or 0.0) < LIKELY_Z:
        return [finding("DF418", f"{where}: block layout: {_figures(m)} with target_layer_ids {taps}, which is within "
                                 "noise; no layout is claimed and --write records none: rerun with more -n or --prompts "
                                 "in the draft's training format, or check the model card")]
    if m.matches_config:
        return [finding("DF416", f"{where}: block layout {m.best} measured ({_figures(m)}); the config "
                                 f"{_declared(m.declared)}")]
    key = m.declared.source if m.declared.source in m.declared.declared else "dflash_config.sample_from_anchor"
    return [finding("DF417", f"{where}: key '{key}': the draft was trained {m.best} ({_figures(m)} with "
                             f"target_layer_ids {taps}) but the config {_declared(m.declared)}; engines that follow "
                             "it serve every draft one position off (tau ~1, no error); record the measured layout "
                             "with probe-taps --write OUT (--layout-for names the engines whose key to write)")]


def smoke_layout_findings(ran: BlockLayout, declared: BlockLayout) -> list[Finding]:
    """DF419 when smoke-run's ``--layout`` ran the draft in another layout than the config's."""
    if ran.layout == declared.layout:
        return []
    return [finding("DF419", f"--layout {ran.layout}: the draft ran as {ran.layout}, but its config "
                             f"{_declared(declared)}; every engine follows the config, so the figures here are not "
                             "what they serve; if this layout is the trained one, record it (probe-taps --write OUT)")]
