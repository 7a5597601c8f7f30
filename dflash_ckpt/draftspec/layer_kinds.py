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

from dflash_ckpt.limits import MAX_LAYERS
from dflash_ckpt.draftspec.specs import ABSENT, as_int

FULL, SLIDING = "full_attention", "sliding_attention"
#: The attention kinds a ``layer_types`` entry may name.
LAYER_KINDS = (FULL, SLIDING)
#: Short spellings accepted on the command line (``--layer-types sliding*4,full``).
SHORT_NAMES = {"full": FULL, "sliding": SLIDING}


def derive_layer_kinds(config: dict[str, Any]) -> tuple[list[str] | None, str]:
    """The ``layer_types`` a config without one determines, else ``None``; and why, in words.

    Determined (every layer full attention): ``use_sliding_window`` false, or neither
    ``use_sliding_window`` nor a ``sliding_window`` given. Not determined: ``use_sliding_window``
    true, or a ``sliding_window`` without ``use_sliding_window`` saying whether it is used.
    """
    n = as_int(config.get("num_hidden_layers"))
    if n is None or n <= 0:
        return None, "num_hidden_layers is not a positive integer"
    if n > MAX_LAYERS:
        return None, f"num_hidden_layers {n} is beyond the {MAX_LAYERS} layers this tool accepts"
    use = config.get("use_sliding_window", ABSENT)
    window = config.get("sliding_window", ABSENT)
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
