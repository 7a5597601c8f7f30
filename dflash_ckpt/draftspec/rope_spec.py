"""The rotary embedding a config declares, validated (``RopeSpec``), for the target and the draft.

Decoded once, when a spec is built (``specs.build_spec``, ``specs.target_from_config``): a run
takes the ``RopeSpec`` or raises the line ``rope_specs`` stopped on; ``inspect`` reports
``rope_findings`` (DF147). The runtime's ``rope.py`` only turns a ``RopeSpec`` into frequencies.
No torch here.

DF147's reasons: the draft's attention uses the target's rotary base; every engine and the
reference runtime read it as a float and build their tables from it. A string, a boolean, an
object, NaN, 0, a negative number or ``1e400`` (which JSON readers turn into infinity) is refused
by smoke-run and by the engines at load time (or, worse, silently gives NaN tables); inspect says
so first. The places: ``rope_theta`` at the top level, ``rope_parameters.rope_theta``, and per
layer type ``rope_parameters.<full_attention|sliding_attention>.rope_theta`` (the newer spelling).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from dflash_ckpt.draftspec.config_values import bad_value, get_float, get_int
from dflash_ckpt.draftspec.families import Unsupported
from dflash_ckpt.draftspec.layer_kinds import LAYER_KINDS
from dflash_ckpt.draftspec.values import show_value
from dflash_ckpt.rules import Finding, finding
from dflash_ckpt.sources.jsonfile import json_type

#: Rope types implemented in ``runtime/rope.py`` (``default`` also covers a null ``rope_scaling``).
ROPE_TYPES = ("default", "linear", "llama3", "yarn")


@dataclass(frozen=True)
class RopeSpec:
    """One rotary embedding, in the terms Hugging Face configs use.

    ``rope_type`` is ``default``, ``linear``, ``llama3`` or ``yarn``. ``original_max_position_embeddings``
    is the pre-extension context (llama3: required; yarn: defaults to ``max_position_embeddings``).
    """

    rope_type: str
    theta: float
    max_position_embeddings: int
    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int | None = None
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    attention_factor: float | None = None
    mscale: float | None = None
    mscale_all_dim: float | None = None
    truncate: bool = True


def _rope_from_params(params: dict[str, Any], theta: float, max_pos: int, where: str, key: str) -> RopeSpec:
    """A ``RopeSpec`` from a ``rope_scaling``/``rope_parameters`` dict (``theta`` as resolved)."""
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type is None:
        rope_type = "default"
    if rope_type not in ROPE_TYPES:
        raise Unsupported(f"{where}: {key}.rope_type {rope_type!r} (implemented: {', '.join(ROPE_TYPES)})")
    if rope_type == "default":
        return RopeSpec("default", theta, max_pos)
    factor = get_float(params, "factor", where, path=f"{key}.factor")
    if rope_type == "linear":
        return RopeSpec("linear", theta, max_pos, factor=factor)
    if rope_type == "llama3":
        return RopeSpec(
            "llama3", theta, max_pos, factor=factor,
            low_freq_factor=get_float(params, "low_freq_factor", where, path=f"{key}.low_freq_factor"),
            high_freq_factor=get_float(params, "high_freq_factor", where, path=f"{key}.high_freq_factor"),
            original_max_position_embeddings=get_int(
                params, "original_max_position_embeddings", where, path=f"{key}.original_max_position_embeddings"),
        )
    # yarn
    truncate = params.get("truncate", True)
    return RopeSpec(
        "yarn", theta, max_pos, factor=factor,
        original_max_position_embeddings=get_int(
            params, "original_max_position_embeddings", where, default=None,
            path=f"{key}.original_max_position_embeddings"),
        beta_fast=get_float(params, "beta_fast", where, default=32.0, path=f"{key}.beta_fast"),
        beta_slow=get_float(params, "beta_slow", where, default=1.0, path=f"{key}.beta_slow"),
        attention_factor=get_float(params, "attention_factor", where, default=None, path=f"{key}.attention_factor"),
        mscale=get_float(params, "mscale", where, default=None, positive=False, path=f"{key}.mscale"),
        mscale_all_dim=get_float(params, "mscale_all_dim", where, default=None, positive=False, path=f"{key}.mscale_all_dim"),
        truncate=truncate is not False,
    )


def rope_specs(cfg: dict[str, Any], where: str) -> dict[str, RopeSpec]:
    """The rope of each layer type (``full_attention``/``sliding_attention``).

    Two spellings exist: ``rope_theta`` + ``rope_scaling`` (older configs; ``rope_scaling`` may be
    null) and ``rope_parameters`` holding ``rope_theta`` and the scaling keys (newer configs),
    which may also be a dict per layer type. One spec serves both types unless the config
    gives one per type.
    """
    max_pos = get_int(cfg, "max_position_embeddings", where, default=32768)
    params = cfg.get("rope_parameters")
    if isinstance(params, dict) and params and all(k in LAYER_KINDS for k in params):
        out = {}
        for layer_type, sub in params.items():
            if not isinstance(sub, dict):
                raise bad_value(where, f"rope_parameters.{layer_type}", sub, "an object")
            theta = get_float(sub, "rope_theta", where, default=get_float(cfg, "rope_theta", where, default=10000.0),
                              path=f"rope_parameters.{layer_type}.rope_theta")
            out[layer_type] = _rope_from_params(sub, theta, max_pos, where, f"rope_parameters.{layer_type}")
        for layer_type in LAYER_KINDS:
            out.setdefault(layer_type, next(iter(out.values())))
        return out
    if isinstance(params, dict):
        theta = get_float(params, "rope_theta", where, default=get_float(cfg, "rope_theta", where, default=10000.0),
                          path="rope_parameters.rope_theta")
        spec = _rope_from_params(params, theta, max_pos, where, "rope_parameters")
    elif params is not None:
        raise bad_value(where, "rope_parameters", params, "an object")
    else:
        theta = get_float(cfg, "rope_theta", where, default=10000.0)
        scaling = cfg.get("rope_scaling")
        if scaling is None:
            spec = RopeSpec("default", theta, max_pos)
        elif isinstance(scaling, dict):
            spec = _rope_from_params(scaling, theta, max_pos, where, "rope_scaling")
        else:
            raise bad_value(where, "rope_scaling", scaling, "an object or null")
    prf = cfg.get("partial_rotary_factor")
    if prf is not None and prf != 1 and prf != 1.0:
        raise Unsupported(f"{where}: partial_rotary_factor {prf!r} (only full-width rotary embeddings)")
    return {t: spec for t in LAYER_KINDS}


def _theta_problem(value: Any) -> str | None:
    """Why ``value`` is no rotary base, or ``None`` when it is one (null counts as absent)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"{json_type(value)} {show_value(value)}"
    if not abs(value) <= sys.float_info.max:  # NaN, infinity, or an int no double holds (10**400)
        return "not finite (NaN, Infinity, or a literal like 1e400 beyond a double)"
    if value <= 0:
        return f"{show_value(value)}"
    return None


def _rope_places(cfg: dict[str, Any]) -> list[tuple[str, Any]]:
    """``(dotted key, value)`` of every ``rope_theta`` the config gives."""
    places = [("rope_theta", cfg["rope_theta"])] if "rope_theta" in cfg else []
    params = cfg.get("rope_parameters")
    if isinstance(params, dict):
        if "rope_theta" in params:
            places.append(("rope_parameters.rope_theta", params["rope_theta"]))
        for kind in LAYER_KINDS:
            sub = params.get(kind)
            if isinstance(sub, dict) and "rope_theta" in sub:
                places.append((f"rope_parameters.{kind}.rope_theta", sub["rope_theta"]))
    return places


def rope_findings(cfg: dict[str, Any], where: str) -> list[Finding]:
    """DF147 for each rope setting of a draft's config no reader can use (``inspect``'s view)."""
    out: list[Finding] = []
    for key in ("rope_parameters", "rope_scaling"):
        value = cfg.get(key)
        if value is not None and not isinstance(value, dict):
            out.append(finding("DF147", f"key '{key}' must be an object (or null), found {json_type(value)} "
                                        f"{show_value(value)}; restore it from the target's config", path=where, key=key))
    params = cfg.get("rope_parameters")
    if isinstance(params, dict):
        for kind in LAYER_KINDS:
            sub = params.get(kind)
            if sub is not None and not isinstance(sub, dict):
                out.append(finding("DF147", f"key 'rope_parameters.{kind}' must be an object, found "
                                            f"{json_type(sub)} {show_value(sub)}",
                                            path=where, key=f'rope_parameters.{kind}'))
    for key, value in _rope_places(cfg):
        problem = _theta_problem(value)
        if problem is not None:
            out.append(finding("DF147", f"key '{key}' must be a positive finite number (the target's rotary "
                                        f"base, e.g. 1000000), found {problem}; copy it from the target's config",
                                        path=where, key=key))
    return out
