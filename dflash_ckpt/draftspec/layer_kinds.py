"""The attention kind of each draft layer: one rule, used by the checks, ``normalize`` and the runtime.

A draft config says which layers slide either with an explicit ``layer_types`` list (one of
``LAYER_KINDS`` per draft layer) or not at all. Without the list, transformers' Qwen3Config
derives it: ``sliding_window`` is dropped unless ``use_sliding_window`` is true, and then layers
``i >= max_window_layers`` (default 28) slide. Published DFlash drafts contradict that rule:
Qwen3.6-27B-DFlash slides its first four of five layers and has no ``max_window_layers`` (the rule
slides none), Qwen3.8-27B-DFlash2 slides all five with ``max_window_layers`` 5 (the rule slides
none). Which layers slide is a training-time choice, so it is never derived from
``max_window_layers``: only the case where nothing slides is determined, and anything else needs
the trained list (``dflash-ckpt normalize --layer-types``). The runtime runs exactly what this
module decides, so ``smoke-run`` never measures a draft under a layout ``normalize`` would refuse
to write (docs/DESIGN.md section 4).
"""

from __future__ import annotations

from typing import Any

from dflash_ckpt.limits import MAX_LAYERS, MAX_LIST_LEN
from dflash_ckpt.draftspec.values import ABSENT, as_int, show_value
from dflash_ckpt.errors import InputError
from dflash_ckpt.rules import Finding, finding
from dflash_ckpt.sources.jsonfile import json_type

FULL, SLIDING = "full_attention", "sliding_attention"
#: The attention kinds a ``layer_types`` entry may name.
LAYER_KINDS = (FULL, SLIDING)
#: Short spellings accepted on the command line (``--layer-types sliding*4,full``).
SHORT_NAMES = {"full": FULL, "sliding": SLIDING}


def layer_kind_keys(config: dict[str, Any]) -> tuple[Any, Any, Any]:
    """What ``derive_layer_kinds`` decides from, as written (``ABSENT`` when missing):
    ``num_hidden_layers``, ``use_sliding_window``, ``sliding_window``."""
    return tuple(config.get(key, ABSENT) for key in ("num_hidden_layers", "use_sliding_window", "sliding_window"))


def derive_layer_kinds(layers: Any, use: Any, window: Any) -> tuple[list[str] | None, str]:
    """The ``layer_types`` a config without one determines, else ``None``; and why, in words.

    Takes ``layer_kind_keys``'s values. Determined (every layer full attention):
    ``use_sliding_window`` false, or neither ``use_sliding_window`` nor a ``sliding_window``
    given. Not determined: ``use_sliding_window`` true, or a ``sliding_window`` without
    ``use_sliding_window`` saying whether it is used.
    """
    n = as_int(layers)
    if n is None or n <= 0:
        return None, "num_hidden_layers is not a positive integer"
    if n > MAX_LAYERS:
        return None, f"num_hidden_layers {n} is beyond the {MAX_LAYERS} layers this tool accepts"
    if use is False:
        return [FULL] * n, "use_sliding_window is false: every draft layer is full attention"
    if use in (ABSENT, None) and window in (ABSENT, None):
        return [FULL] * n, "no sliding window is configured: every draft layer is full attention"
    if use is True:
        return None, (
            "use_sliding_window is true and which draft layers slide is a training-time choice "
            "(published drafts contradict the max_window_layers rule, so it is not applied)"
        )
    shown = "absent" if use is ABSENT else repr(use)
    return None, f"use_sliding_window is {shown} with sliding_window {window!r}"


def explicit_layer_kinds(config: dict[str, Any]) -> Any:
    """The config's own ``layer_types`` (``ABSENT`` when missing or null, as engines treat both)."""
    value = config.get("layer_types", ABSENT)
    return ABSENT if value is None else value


def draft_layer_types(lt: Any, derived_why: tuple[list[str] | None, str], n: int, where: str) -> tuple[str, ...]:
    """A run's kind of each of the ``n`` draft layers: the explicit ``layer_types`` (``lt``,
    ``ABSENT`` when none), else what ``derive_layer_kinds`` derives (``derived_why``: the rule
    ``normalize`` writes); anything it leaves open is refused rather than guessed."""
    if lt is not ABSENT:
        if not isinstance(lt, list) or len(lt) != n or any(t not in LAYER_KINDS for t in lt):
            raise InputError(f"key 'layer_types' must list {n} entries of {LAYER_KINDS}", code="DF130", path=where)
        return tuple(lt)
    derived, why = derived_why
    if derived is None:
        raise InputError(
            f"layer_types is missing and cannot be derived ({why}); write the trained list "
            f"with `dflash-ckpt normalize DRAFT OUT --layer-types ...` (one kind per draft layer)",
            code="DF133", path=where,
        )
    return tuple(derived)


def layer_kind_findings(config: dict[str, Any], layers: int | None, where: str) -> list[Finding]:
    """``inspect``'s findings on a draft's layer kinds (DF130-DF133), ``layers`` its decoded
    ``num_hidden_layers`` (``None`` when bad: DF142 says so)."""
    lt = explicit_layer_kinds(config)
    window = config.get("sliding_window")
    has_window = as_int(window) is not None and window > 0
    if lt is ABSENT:
        out = [finding(
            "DF133",
            "key 'layer_types' is not given; lmdeploy 0.18 requires it "
            "(`dflash-ckpt normalize` writes it when the config determines it)", path=where, key="layer_types",
        )]
        if config.get("use_sliding_window") is True and not has_window:
            out.append(finding("DF132", f"use_sliding_window is true but key 'sliding_window' is {show_value(window)}; set the trained window",
                               path=where, key="sliding_window"))
        return out
    if not isinstance(lt, list):
        return [finding("DF131", f"key 'layer_types' must be a list, found {json_type(lt)}", path=where, key="layer_types")]
    if len(lt) > MAX_LIST_LEN:
        return []  # DF145
    out = []
    if layers is not None and len(lt) != layers:
        out.append(finding("DF130", f"key 'layer_types' has {len(lt)} entries but num_hidden_layers is {layers}; give one per draft layer",
                           path=where, key="layer_types"))
    bad = sorted({show_value(v) for v in lt if not isinstance(v, str) or v not in LAYER_KINDS})
    if bad:
        shown = ", ".join(bad[:4]) + (f" and {len(bad) - 4} more" if len(bad) > 4 else "")
        out.append(finding("DF131", f"key 'layer_types' holds {shown}; each entry must be 'full_attention' or 'sliding_attention'",
                           path=where, key="layer_types"))
    if SLIDING in lt and not has_window:
        out.append(finding(
            "DF132",
            "layer_types has sliding_attention layers but key 'sliding_window' is "
            f"{show_value(window)}; set the trained window (a positive integer)", path=where, key="sliding_window",
        ))
    return out
