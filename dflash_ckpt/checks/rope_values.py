"""Rope settings of a draft (DF147): ``rope_theta`` a positive finite number, ``rope_parameters``
and ``rope_scaling`` objects, wherever the config spells them.

The draft's attention uses the target's rotary base; every engine and the reference runtime read
it as a float and build their tables from it. A string, a boolean, an object, NaN, 0, a negative
number or ``1e400`` (which JSON readers turn into infinity) is refused by smoke-run and by the
engines at load time (or, worse, silently gives NaN tables); inspect says so first. The places:
``rope_theta`` at the top level, ``rope_parameters.rope_theta``, and per layer type
``rope_parameters.<full_attention|sliding_attention>.rope_theta`` (the newer spelling).
"""

from __future__ import annotations

import math
from typing import Any

from dflash_ckpt.checks.config import show_value
from dflash_ckpt.draftspec.layer_kinds import LAYER_KINDS
from dflash_ckpt.draftspec.specs import DraftSpec
from dflash_ckpt.rules import Finding, finding
from dflash_ckpt.sources.jsonfile import json_type


def _theta_problem(value: Any) -> str | None:
    """Why ``value`` is no rotary base, or ``None`` when it is one (null counts as absent)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"{json_type(value)} {show_value(value)}"
    if not math.isfinite(value):
        return "not finite (NaN, Infinity, or a literal like 1e400 beyond a double)"
    if value <= 0:
        return f"{show_value(value)}"
    return None


def rope_places(spec: DraftSpec) -> list[tuple[str, Any]]:
    """``(dotted key, value)`` of every ``rope_theta`` the config gives."""
    places = [("rope_theta", spec.top("rope_theta"))] if spec.states("rope_theta") else []
    params = spec.top("rope_parameters")
    if isinstance(params, dict):
        if "rope_theta" in params:
            places.append(("rope_parameters.rope_theta", params["rope_theta"]))
        for kind in LAYER_KINDS:
            sub = params.get(kind)
            if isinstance(sub, dict) and "rope_theta" in sub:
                places.append((f"rope_parameters.{kind}.rope_theta", sub["rope_theta"]))
    return places


def check_rope_values(spec: DraftSpec) -> list[Finding]:
    """DF147 for each rope setting no reader can use."""
    w = spec.where
    out: list[Finding] = []
    for key in ("rope_parameters", "rope_scaling"):
        value = spec.top(key)
        if value is not None and not isinstance(value, dict):
            out.append(finding("DF147", f"key '{key}' must be an object (or null), found {json_type(value)} "
                                        f"{show_value(value)}; restore it from the target's config", path=w, key=key))
    params = spec.top("rope_parameters")
    if isinstance(params, dict):
        for kind in LAYER_KINDS:
            sub = params.get(kind)
            if sub is not None and not isinstance(sub, dict):
                out.append(finding("DF147", f"key 'rope_parameters.{kind}' must be an object, found "
                                            f"{json_type(sub)} {show_value(sub)}",
                                            path=w, key=f'rope_parameters.{kind}'))
    for key, value in rope_places(spec):
        problem = _theta_problem(value)
        if problem is not None:
            out.append(finding("DF147", f"key '{key}' must be a positive finite number (the target's rotary "
                                        f"base, e.g. 1000000), found {problem}; copy it from the target's config",
                                        path=w, key=key))
    return out


__all__ = ["check_rope_values", "rope_places"]
