"""Typed reads of config keys, with messages that name the file and the key (DF142).

The decoders a spec runs when it is built (``decoder_dims.read_dims``, ``rope_spec``) and the run
settings built from a spec (``target_settings``, ``draft_settings``) read every number through
these, so a bad value is reported in one wording.
No torch here: ``smoke-run`` refuses a bad pair before paying for it.
"""

from __future__ import annotations

import sys
from typing import Any

from dflash_ckpt.draftspec.values import as_int
from dflash_ckpt.errors import InputError

#: The largest finite double: a JSON number beyond it (inf, or an int like 10**400) is no float.
FLOAT_MAX = sys.float_info.max


def bad_value(where: str, key: str, value: Any, want: str) -> InputError:
    """The one DF142 error: at ``where``, ``key 'key' must be want, found value``."""
    return InputError(f"key '{key}' must be {want}, found {value!r}", code="DF142", path=where)


def get_int(cfg: dict[str, Any], key: str, where: str, *, default: Any = ..., minimum: int = 1, path: str | None = None) -> int:
    """A required (or defaulted) integer key of at least ``minimum``."""
    raw = cfg.get(key)
    if raw is None:
        if default is ...:
            raise bad_value(where, path or key, raw, f"an integer >= {minimum}")
        return default
    val = as_int(raw)
    if val is None or val < minimum:
        raise bad_value(where, path or key, raw, f"an integer >= {minimum}")
    return val


def get_float(cfg: dict[str, Any], key: str, where: str, *, default: Any = ..., positive: bool = True, path: str | None = None) -> float:
    """A number key (JSON int or float, not bool); ``positive`` requires > 0."""
    return float_value(cfg.get(key), path or key, where, default=default, positive=positive)


def float_value(raw: Any, key: str, where: str, *, default: Any = ..., positive: bool = True) -> float:
    """``raw``, the value of ``key``, as a number (``default`` when null or absent)."""
    if raw is None:
        if default is ...:
            raise bad_value(where, key, raw, "a number")
        return default
    want = "a positive number" if positive else "a number"
    if isinstance(raw, bool) or not isinstance(raw, (int, float)) or abs(raw) > FLOAT_MAX or raw != raw or (positive and raw <= 0):
        raise bad_value(where, key, raw, want)  # abs > max: inf, or an int no double holds (10**400)
    return float(raw)


def bool_value(raw: Any, key: str, where: str, default: bool) -> bool:
    """``raw``, the value of ``key``, as ``true``/``false`` (``default`` when null or absent)."""
    if raw is None:
        return default
    if not isinstance(raw, bool):
        raise bad_value(where, key, raw, "true or false")
    return raw
