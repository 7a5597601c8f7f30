"""Read the small JSON files of a checkpoint with errors that say where and what.

``json`` errors carry line and column; OS errors become one line naming the file. Objects keep
their key order (Python dicts do), which ``normalize`` relies on.
"""

from __future__ import annotations

import json
from typing import Any

from dflash_ckpt.errors import InputError
from dflash_ckpt.limits import MAX_JSON_DEPTH, MAX_JSON_ITEMS


def parse_json_text(text: str, where: str, *, code: str = "DF002", max_depth: int = MAX_JSON_DEPTH) -> Any:
    """Parse ``text``; on a syntax error raise ``InputError`` naming ``where``, line and column.

    Integers past Python's digit limit for conversions, and nesting deeper than ``max_depth``,
    are one line too: either would otherwise surface later as a traceback far from the file.
    """
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise InputError(
            f"invalid JSON at line {err.lineno} column {err.colno}: {err.msg}; "
            "fix the syntax (a trailing comma or a missing quote is the usual cause)",
            code=code, path=where,
        ) from None
    except RecursionError:
        raise InputError(_too_deep(max_depth), code=code, path=where) from None
    except ValueError as err:  # "Exceeds the limit (4300 digits) for integer string conversion"
        text = ("holds an integer too long to convert (over 4300 digits); no config value is that large"
                if "digits" in str(err) else f"invalid JSON ({str(err).splitlines()[0][:120]})")
        raise InputError(text, code=code, path=where) from None
    if json_depth(value, max_depth) > max_depth:
        raise InputError(_too_deep(max_depth), code=code, path=where)
    return value


def _too_deep(max_depth: int) -> str:
    return f"JSON nested too deep (more than {max_depth} levels); not a config file"


def json_depth(value: Any, stop: int = MAX_JSON_DEPTH) -> int:
    """Nesting depth of a parsed value (a scalar is 0), without recursion; counting stops past ``stop``."""
    if not isinstance(value, (dict, list)):
        return 0
    deepest = 1
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > deepest:
            deepest = depth
            if deepest > stop:
                return deepest
        children = node.values() if isinstance(node, dict) else node
        for child in children:
            if isinstance(child, (dict, list)):
                stack.append((child, depth + 1))
    return deepest


def decode_json_bytes(data: bytes, where: str, *, code: str = "DF002", max_items: int = MAX_JSON_ITEMS) -> Any:
    """Decode UTF-8 bytes (a BOM is tolerated, as Hugging Face loaders do) and parse them.

    A file with more than ``max_items`` commas is refused before parsing: the parsed objects of
    millions of tiny values would cost many times the file's size in memory.
    """
    items = data.count(b",")
    if items > max_items:
        raise InputError(
            f"holds more than {max_items:,} values ({items:,} commas); not a config file",
            code=code, path=where,
        )
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise InputError(
            f"not UTF-8 text (byte {err.start}); config files must be UTF-8 JSON",
            code=code, path=where,
        ) from None
    return parse_json_text(text, where, code=code)


def require_object(value: Any, where: str, *, code: str = "DF003") -> dict[str, Any]:
    """The top of a config must be a JSON object; say what it was instead."""
    if not isinstance(value, dict):
        raise InputError(
            f"expected a JSON object at the top level, found {json_type(value)}",
            code=code, path=where,
        )
    return value


#: JSON names of Python types, bool before int (a bool is an int).
_JSON_TYPES = ((bool, "a boolean"), (int, "an integer"), (float, "a number"), (str, "a string"),
               (list, "a list"), (dict, "an object"))


def json_type(value: Any) -> str:
    """The JSON name of a Python value, for messages."""
    if value is None:
        return "null"
    return next((name for t, name in _JSON_TYPES if isinstance(value, t)), type(value).__name__)
