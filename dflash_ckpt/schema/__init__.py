"""The JSON Schema (draft 2020-12) of every command's ``--json`` document, shipped as package data.

``dflash-ckpt.schema.json`` holds the envelope and a ``$defs`` entry per command's result and for
the shared finding and error; ``load_schema(command)`` narrows it to one command (its ``command``
constant, its results' definition). Standard library only: ``dflash-ckpt schema`` stays fast.
"""

from __future__ import annotations

import copy
import json
from functools import lru_cache
from importlib.resources import files
from typing import Any

#: Each command with ``--json``, and the ``$defs`` entry of its results.
COMMANDS = {"inspect": "inspect_result", "normalize": "normalize_result", "smoke-run": "smoke_run_result",
            "probe-taps": "probe_taps_result", "rules": "rule", "schema": "schema_result"}


@lru_cache(maxsize=1)
def _whole() -> dict[str, Any]:
    return json.loads(files(__name__).joinpath("dflash-ckpt.schema.json").read_text(encoding="utf-8"))


def load_schema(command: str | None = None) -> dict[str, Any]:
    """The whole schema (a fresh copy), or one command's: the same envelope with ``command``
    fixed and ``results`` items the command's result."""
    doc = copy.deepcopy(_whole())
    if command is None:
        return doc
    if command not in COMMANDS:
        raise KeyError(command)
    doc["$id"] = doc["$id"].replace(".schema.json", f".{command}.schema.json")
    doc["title"] = f"dflash-ckpt {command} --json document"
    doc["properties"]["command"] = {"const": command}
    doc["properties"]["results"] = {"type": "array", "items": {"$ref": f"#/$defs/{COMMANDS[command]}"}}
    doc["allOf"] = doc["allOf"][:1]  # the ok/exit_code rule; the per-command rules are the two lines above
    return doc
