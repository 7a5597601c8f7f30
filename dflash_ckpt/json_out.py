"""The machine side of the output sink: one JSON document per run, on stdout.

Every command's document is the envelope of ``result.document`` (``schema_version``, ``command``,
``ok``, ``exit_code``, ``error``, ``results``). A command body that was asked for ``--json`` says
so (``want_json``); if it stops on an error before printing its document, the CLI prints the
envelope with that error (``pending``). rich is not imported on this path. It sits beside
``output_formats.py`` (the github and SARIF renderings it hands a document to), under ``cli.py``
and every command of ``commands/``, which all write through it.
"""

from __future__ import annotations

import sys
from typing import Any

from dflash_ckpt.result import SCHEMA_VERSION, document

__all__ = ["SCHEMA_VERSION", "document", "pending", "print_document", "print_json", "want_json"]

_pending: list[tuple[str, str]] = []


def want_json(command: str, json_out: bool, output_format: str = "json") -> None:
    """Note that ``command`` owes a document on stdout (with ``--json``; ``output_format`` json,
    github or sarif for inspect's ``--output-format``)."""
    _pending[:] = [(command, output_format)] if json_out else []


def pending() -> tuple[str, str] | None:
    """``(command, output_format)`` of a command asked for ``--json`` that has printed no document
    yet (taken once)."""
    owed = _pending[0] if _pending else None
    _pending.clear()
    return owed


def print_json(doc: Any) -> None:
    """One JSON document on stdout."""
    from dflash_ckpt.output_formats import json_text

    _pending.clear()
    sys.stdout.write(json_text(doc))


def print_document(doc: dict[str, Any], output_format: str = "json", annotations: str = "warnings") -> None:
    """The run's document on stdout, rendered by its ``--output-format`` (``output_formats.FORMATS``:
    JSON, GitHub annotations of the severities ``annotations`` names, or SARIF)."""
    from dflash_ckpt.output_formats import FORMATS

    _pending.clear()
    sys.stdout.write(FORMATS[output_format].render(doc, annotations))  # type: ignore[misc]
