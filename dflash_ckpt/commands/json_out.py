"""The machine side of the output sink: one JSON document per run, on stdout.

Every command's document starts with ``schema_version`` and ``command``, so a script can tell
what it reads before it reads it. rich is not imported on this path.
"""

from __future__ import annotations

import json
import sys
from typing import Any

#: Bumped when a field of any command's document changes meaning or is removed (added fields do not).
SCHEMA_VERSION = 1


def document(command: str, **fields: Any) -> dict[str, Any]:
    """A command's document: the version and the command first, then ``fields`` in order."""
    return {"schema_version": SCHEMA_VERSION, "command": command, **fields}


def print_json(doc: Any) -> None:
    """One JSON document on stdout."""
    sys.stdout.write(json.dumps(doc, indent=2) + "\n")
