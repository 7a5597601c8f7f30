"""Single JSON values as a config holds them: absent or present, integer or not, within bounds.

The bottom of draftspec: it imports nothing else of the package's draftspec, so the decoders
(``decoder_dims``, ``rope_spec``, ``layer_kinds``, ``config_values``) and ``specs`` (which calls
them when a spec is built) all read values the same way without an import circle.
"""

from __future__ import annotations

import json
from typing import Any

from dflash_ckpt.limits import MAX_BLOCK_SIZE, MAX_DIM, MAX_LAYERS, MAX_VOCAB
from dflash_ckpt.sources.jsonfile import json_depth


class _Absent:
    """Marks a key that is not in a mapping (``None`` is a legal JSON value)."""

    def __repr__(self) -> str:
        return "<absent>"


ABSENT: Any = _Absent()


def same_json(a: Any, b: Any) -> bool:
    """Equality as JSON sees it: 16 and 16.0 or 1 and true are different values."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def as_int(value: Any) -> int | None:
    """``value`` if it is a JSON integer (not a bool, not a float), else ``None``."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def as_int_list(value: Any) -> list[int] | None:
    if isinstance(value, list) and all(as_int(v) is not None for v in value):
        return list(value)
    return None


def bounded_int(value: Any, maximum: int) -> int | None:
    """``as_int(value)`` when it is at most ``maximum`` in magnitude, else ``None``: a number
    that sizes a loop or an allocation is used only within the bounds of ``limits``."""
    v = as_int(value)
    return v if v is not None and -maximum <= v <= maximum else None


def config_dtype(cfg: dict[str, Any]) -> str | None:
    """The dtype a config declares (``torch_dtype`` in older files, ``dtype`` in newer), if any."""
    for key in ("dtype", "torch_dtype"):
        val = cfg.get(key)
        if isinstance(val, str) and val in ("float32", "float16", "bfloat16"):
            return val
    return None


def decoder_config(config: dict[str, Any]) -> dict[str, Any]:
    """A target's decoder settings: ``text_config`` of a multimodal wrapper, else the config itself."""
    text = config.get("text_config")
    return text if isinstance(text, dict) else config


def target_model_type(config: dict[str, Any]) -> Any:
    """The decoder's ``model_type`` (``text_config`` first, then the wrapper's)."""
    return decoder_config(config).get("model_type") or config.get("model_type")


#: The upper bound of every number a draft config may hold that sizes something (``limits``).
KEY_BOUNDS: dict[str, int] = {
    "block_size": MAX_BLOCK_SIZE,
    "num_target_layers": MAX_LAYERS,
    "mask_token_id": MAX_VOCAB,
    "num_hidden_layers": MAX_LAYERS,
    "hidden_size": MAX_DIM,
    "num_attention_heads": MAX_DIM,
    "num_key_value_heads": MAX_DIM,
    "head_dim": MAX_DIM,
    "intermediate_size": MAX_DIM,
    "vocab_size": MAX_VOCAB,
    "conv_kernel_size": MAX_DIM,
    "conv_group_size": MAX_DIM,
    "selector_rank": MAX_DIM,
    "selector_top_k": MAX_VOCAB,
    "sliding_window": 1 << 24,
}


def show_value(value: Any) -> str:
    """A value as JSON, shortened for a one-line message (without dumping a huge one first)."""
    if value is ABSENT:
        return "absent"
    if isinstance(value, list) and len(value) > 16:
        return "[" + ", ".join(show_value(v) for v in value[:8]) + f", ... ({len(value):,} entries)]"
    if isinstance(value, dict) and len(value) > 16 or isinstance(value, (dict, list)) and json_depth(value, 8) > 8:
        return "{...}" if isinstance(value, dict) else "[...]"
    if isinstance(value, str) and len(value) > 60:
        value = value[:60]
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**18:
        digits = len(str(abs(value)))
        return f"{'-' if value < 0 else ''}{str(abs(value))[:6]}... ({digits} digits)"
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."
