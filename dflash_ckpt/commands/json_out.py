"""The machine side of the output sink: one JSON document per run, on stdout.

Every command's document is the envelope of ``result.document`` (``schema_version``, ``command``,
``ok``, ``exit_code``, ``error``, ``results``). A command body that was asked for ``--json`` says
so (``want_json``); if it stops on an error before printing its document, the CLI prints the
envelope with that error (``pending``). rich is not imported on this path.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from dflash_ckpt.result import SCHEMA_VERSION, document

__all__ = ["SCHEMA_VERSION", "document", "pending", "print_json", "want_json"]

_pending: list[str] = []


def want_json(command: str, json_out: bool) -> None:
    """Note that ``command`` owes a JSON document on stdout (with ``--json``)."""
    _pending[:] = [command] if json_out else []


def pending() -> str | None:
    """The command that was asked for ``--json`` and has printed no document yet (taken once)."""
    command = _pending[0] if _pending else None
    _pending.clear()
    return command


def print_json(doc: Any) -> None:
    """One JSON document on stdout."""
    _pending.clear()
    sys.stdout.write(json.dumps(doc, indent=2) + "\n")
