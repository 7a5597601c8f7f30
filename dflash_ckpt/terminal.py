"""What the CLI shows a person on a terminal beyond the report: a note while the runtime loads, and
help texts that the terminal wraps.

Imported at every start of the CLI: the standard library only (typer for its type, when checking).
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import TYPE_CHECKING, Iterator

if TYPE_CHECKING:
    from typer import Typer


#: Whether the command runs with ``-q`` (errors only): the notes a command writes on stderr as it
#: goes (the Hub's retry lines) are left out. Set by each command (``commands.options``); a list,
#: so the flag is one object however it is imported.
_QUIET = [False]


#: The command line of the command running (``cli.run``), which a report names.
_ARGV: list[str] = []


def set_argv(argv: list[str]) -> None:
    _ARGV[:] = list(argv)


def command_argv() -> list[str]:
    """The arguments after ``dflash-ckpt`` of the command running (empty from the Python API)."""
    return list(_ARGV)


def set_quiet(on: bool) -> None:
    """``-q`` for this command (each command sets it, so an earlier one's does not carry over)."""
    _QUIET[0] = on


def quiet() -> bool:
    """Whether ``-q`` asked for errors only."""
    return _QUIET[0]


@contextmanager
def loading_note(command: str, draft: str, target: str, silent: bool) -> Iterator[None]:
    """While torch and the runtime load (seconds of silence otherwise), one line on a terminal's
    stderr saying so; it is erased when the block ends, so the command's own lines (or its one
    error line) follow on a clean line. Nothing with ``-q``/``--json`` or off a terminal."""
    show = not silent and sys.stderr.isatty()
    if show:
        from dflash_ckpt.errors import inert

        sys.stderr.write(inert(f"{command}: loading torch and the reference runtime for {draft} on {target} ..."))
        sys.stderr.flush()
    try:
        yield
    finally:
        if show:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()


def reflow(doc: str | None) -> str | None:
    """A command's docstring as help text that the terminal wraps, not the source file.

    typer's rich help keeps every line break after the first paragraph, so a docstring wrapped
    at 100 columns in the source breaks mid-sentence at 80 and leaves short lines at 120. Each
    paragraph becomes one line (list items, ``- ...``, keep their own line)."""
    if not doc:
        return doc
    import inspect
    import re

    paragraphs = inspect.cleandoc(doc).split("\n\n")
    out = []
    for para in paragraphs:
        lines = [line.strip() for line in para.splitlines() if line.strip()]
        text = ""
        for line in lines:
            if text and not re.match(r"([-*•]|\d+[.)]) ", line):
                text += " " + line
            else:
                text += ("\n" if text else "") + line
        out.append(text)
    return "\n\n".join(out)


def reflow_help(app: Typer) -> None:
    """``reflow`` every command's help (its ``help=`` or its docstring) and the app's own."""
    for info in app.registered_commands:
        info.help = reflow(info.help or (info.callback.__doc__ if info.callback else None))
    if app.registered_callback is not None:
        cb = app.registered_callback
        cb.help = reflow(cb.help or (cb.callback.__doc__ if cb.callback else None))
