"""Markdown pieces of the report: escaped text, tables, fenced blocks (no package imports beyond
``errors.inert``: names from a checkpoint are made inert first, then escaped for Markdown)."""

from __future__ import annotations

import re
from typing import Any, Iterable, Sequence

from dflash_ckpt.errors import inert

#: Characters Markdown (GitHub's) reads as formatting in running text or a table cell (``_``
#: inside a word is not emphasis on GitHub, and names are full of it: left as it is).
_SPECIAL = re.compile(r"([\\`*\[\]<>|])")


def text(value: Any) -> str:
    """A value as inert Markdown text: control characters as escapes, formatting characters escaped."""
    return _SPECIAL.sub(r"\\\1", inert(str(value)))


def code(value: Any) -> str:
    """A value as inline code (backticks inside are doubled around, as Markdown allows)."""
    s = inert(str(value)).replace("\n", " ")
    fence = "``" if "`" in s else "`"
    return f"{fence} {s} {fence}" if fence == "``" else f"`{s}`"


def table(header: Sequence[str], rows: Iterable[Sequence[Any]], align: Sequence[str] | None = None) -> str:
    """A GitHub table; cells are given as Markdown already (``text``/``code`` them first)."""
    align = align or ["l"] * len(header)
    marks = {"l": "---", "r": "---:", "c": ":---:"}
    out = ["| " + " | ".join(header) + " |", "|" + "|".join(marks[a] for a in align) + "|"]
    out += ["| " + " | ".join(str(c).replace("\n", " ") for c in row) + " |" for row in rows]
    return "\n".join(out)


def fenced(lines: Iterable[str], lang: str = "") -> str:
    """A fenced block of inert lines (a line of backticks cannot close it: the fence is longer)."""
    body = [inert(line) for line in lines]
    longest = max((len(m) for line in body for m in re.findall(r"`+", line)), default=0)
    fence = "`" * max(3, longest + 1)
    return "\n".join([fence + lang, *body, fence])


def num(value: float | None, fmt: str = "{:.2f}") -> str:
    """A figure, or an em dash where there is none."""
    return "—" if value is None else fmt.format(value)


def interval(ci: Sequence[float] | None, fmt: str = "{:.2f}") -> str:
    """``95% 4.71-5.89``, or ``no interval``."""
    return "no interval" if not ci else f"95% {fmt.format(ci[0])}–{fmt.format(ci[1])}"
