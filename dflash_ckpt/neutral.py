"""Lines that no CI runner reads as a command, whatever folder or tensor names they quote.

A GitHub runner reads every line of a step's stdout and stderr as a workflow command when, after
its leading whitespace, it starts with ``::`` (``::error title=x::...``, ``::add-mask::...``,
``::stop-commands::...``), and also when ``##[`` appears anywhere in it (the older form, still
parsed: ``##[error]...``); Azure Pipelines reads ``##vso[`` and TeamCity ``##teamcity[`` anywhere
in a line. A report line that starts with a draft folder's name (an error line, a row of the
summary table, a report's title line) would so let whoever names a folder annotate, mask or
silence the CI run that checks it. ``no_command`` writes the one character that makes the command
as a visible escape, in the style of ``errors.inert`` (``\\x3a`` for the first ``:``, ``\\x5b``
for the ``[``); ``CommandSafeFile`` applies it to every line a rich console writes to a pipe.
The ``github`` output format writes its own commands and escapes their text as the runner
reads it back, so it does not pass through ``no_command``; the text inside them (a finding's
message, an engine's last log line, a file name) goes through ``output_formats.inert_lines``, the same
``errors.inert`` every other line uses, so no escape sequence, BEL, OSC-8 link or ``##[`` opener
reaches the log; SARIF's messages too. JSON escapes ``[`` as ``\\u005b`` there (``json_safe``),
which every JSON reader decodes back to the same text.
"""

from __future__ import annotations

import re
from typing import IO, Any

#: ``##[``, ``##vso[``, ``##teamcity[``: a command opener anywhere in a line.
OPENER = re.compile(r"(##[A-Za-z]*)\[")
#: The end of a partial line that a later write could still turn into an opener.
_OPEN_TAIL = re.compile(r"#[A-Za-z#]*\Z")


def no_opener(text: str) -> str:
    """``text`` with the ``[`` of every ``##[``-style opener written ``\\x5b`` (``errors.inert`` does
    this to every name it shows, wherever in a line it lands)."""
    return OPENER.sub(lambda m: m.group(1) + "\\x5b", text)


def no_command(line: str, *, line_start: bool = True) -> str:
    """``line`` (one line, no newline) with every command opener neutralised; ``line_start``
    False for the rest of a line whose start was written already."""
    line = no_opener(line)
    if line_start:
        body = line.lstrip()
        if body.startswith("::"):
            cut = len(line) - len(body)
            line = line[:cut] + "\\x3a" + body[1:]
    return line


def safe_path_start(path: str) -> str:
    """A relative path that would start a line as a command (``::error::x``), written ``./::error::x``:
    the same file, still a path to paste, and no command."""
    if path.lstrip().startswith("::") and not path.startswith("/"):
        return "./" + path
    return path


def json_safe(text: str) -> str:
    """JSON text with ``[`` written ``\\u005b`` after ``##``: the same document to a JSON reader,
    no command to a CI runner (``[`` after ``#`` only occurs inside strings)."""
    return OPENER.sub(lambda m: m.group(1) + "\\u005b", text)


class CommandSafeFile:
    """A text stream that writes each line through ``no_command`` (a console's file, off a terminal).

    Whole lines are written as they complete; a partial line is held back at ``flush`` only as far
    as a later write could still make it a command (leading whitespace or one ``:``, a trailing run
    of ``#`` and letters), so what is shown is never late by more than that."""

    def __init__(self, raw: IO[str]) -> None:
        self.raw = raw
        self._pending = ""
        self._mid_line = False

    def write(self, text: str) -> int:
        data = self._pending + text
        *lines, self._pending = data.split("\n")
        for line in lines:
            self.raw.write(no_command(line, line_start=not self._mid_line) + "\n")
            self._mid_line = False
        return len(text)

    def flush(self) -> None:
        pending = self._pending
        if pending:
            if not self._mid_line and pending.lstrip() in ("", ":"):
                keep = pending
            else:
                tail = _OPEN_TAIL.search(pending)
                keep = pending[tail.start():] if tail else ""
            head = pending[:len(pending) - len(keep)]
            if head:
                self.raw.write(no_command(head, line_start=not self._mid_line))
                self._mid_line = True
            self._pending = keep
        self.raw.flush()

    def close_line(self) -> None:
        """Write whatever is still held back (at exit: the end of the output)."""
        if not self._pending:
            return
        pending, self._pending = self._pending, ""
        try:
            self.raw.write(no_command(pending, line_start=not self._mid_line))
            self.raw.flush()
        except (OSError, ValueError):  # the stream is gone (closed by a test harness)
            pass

    def isatty(self) -> bool:
        return bool(getattr(self.raw, "isatty", lambda: False)())

    def fileno(self) -> int:
        return self.raw.fileno()

    def writable(self) -> bool:
        return True

    @property
    def encoding(self) -> str:
        return getattr(self.raw, "encoding", None) or "utf-8"

    @property
    def errors(self) -> Any:
        return getattr(self.raw, "errors", None)


__all__ = ["OPENER", "CommandSafeFile", "json_safe", "no_command", "no_opener", "safe_path_start"]
