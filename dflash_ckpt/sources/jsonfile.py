"""Read the small JSON files of a checkpoint with errors that say where and what.

``json`` errors carry line and column; OS errors become one line naming the file. Objects keep
their key order (Python dicts do), which ``normalize`` relies on.
"""

from __future__ import annotations

import json
from typing import Any

from dflash_ckpt.errors import InputError


def parse_json_text(text: str, where: str, *, code: str = "DF002") -> Any:
    """Parse ``text``; on a syntax error raise ``InputError`` naming ``where``, line and column."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise InputError(
            f"{where}: invalid JSON at line {err.lineno} column {err.colno}: {err.msg}; "
            "fix the syntax (a trailing comma or a missing quote is the usual cause)",
            code=code,
        ) from None
    except RecursionError:
        raise InputError(f"{where}: JSON nested too deeply to read", code=code) from None


def decode_json_bytes(data: bytes, where: str, *, code: str = "DF002") -> Any:
    """Decode UTF-8 bytes (a BOM is tolerated, as Hugging Face loaders do) and parse them."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise InputError(
            f"{where}: not UTF-8 text (byte {err.start}); config files must be UTF-8 JSON",
            code=code,
        ) from None
    return parse_json_text(text, where, code=code)


def require_object(value: Any, where: str, *, code: str = "DF003") -> dict[str, Any]:
    """The top of a config must be a JSON object; say what it was instead."""
    if not isinstance(value, dict):
        raise InputError(
            f"{where}: expected a JSON object at the top level, found {json_type(value)}",
            code=code,
        )
    return value


def json_type(value: Any) -> str:
    """The JSON name of a Python value, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__
