"""The console every report prints to, and what each report shares on it.

A console that never wraps a plain line (one-line messages stay one line), fits tables to a
terminal and stacks a table wider than it (``table_width``, ``print_stacked``), writes nothing
that starts a CI runner's workflow command when piped (``neutral``), and the one way every
command shows its findings. Everything taken from a checkpoint (folder and tensor names,
``model_type``, config strings, messages that quote them) goes through ``safe``: its control
characters are written as visible escapes and its rich markup is escaped, so a hostile name
prints as what it is and can neither paint the terminal nor break the renderer. Machines get
one JSON document instead (``json_out``; rich is not imported on that path).
"""

from __future__ import annotations

import os
from typing import Any, Iterable

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from dflash_ckpt.errors import inert
from dflash_ckpt.neutral import no_command
from dflash_ckpt.rules import Finding, Severity

STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "yellow", Severity.INFO: "dim"}
#: Width of a console that is not a terminal (a pipe, a file): lines as long as their content,
#: so a table never wraps a draft name or a message for the program reading it.
PIPE_WIDTH = 100_000


def make_console(stderr: bool = False) -> Console:
    """A console whose plain lines never wrap (one-line messages stay one line) and that leaves
    ``:name:`` as written (a folder called ``:smile:`` is no emoji; rich's emoji table, 4 ms of
    start-up, is never imported).

    On a terminal tables fit its width; piped (and with no ``COLUMNS`` set) nothing is wrapped,
    and every line goes through ``neutral.no_command`` (a folder name cannot start a CI command).
    """
    import sys

    console = Console(stderr=stderr, highlight=False, soft_wrap=True, emoji=False)
    stream = sys.stderr if stderr else sys.stdout
    if not getattr(stream, "isatty", lambda: False)():
        # A pipe a CI runner may read (even where FORCE_COLOR makes rich call it a terminal): no
        # line starts a workflow command.
        import atexit

        from dflash_ckpt.neutral import CommandSafeFile

        safe_file = CommandSafeFile(stream)
        atexit.register(safe_file.close_line)
        console.file = safe_file  # type: ignore[assignment]
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console.width = PIPE_WIDTH
    return console


def safe(text: Any) -> str:
    """``text`` from a checkpoint, ready for ``console.print``: inert, no CI command
    (``neutral.no_command``, so a table lays out the escaped text) and markup-escaped."""
    return escape(no_command(inert(str(text))))


def finding_text(f: Finding) -> str:
    """A finding's message with the file it is about in front (for a table's message column)."""
    return f"{f.path}: {f.message}" if f.path else f.message


def render_findings(console: Console, findings: Iterable[Finding]) -> None:
    """The "Findings" table (code, severity, message), errors first, then by code; nothing when
    there are none. Every command's report shows its findings this one way."""
    found = sorted(findings, key=lambda f: (-f.severity.rank, f.code))
    if not found:
        return
    table = Table(title="Findings", title_justify="left", show_edge=False)
    table.add_column("code", no_wrap=True)
    table.add_column("severity", no_wrap=True)
    table.add_column("message", overflow="fold")  # a long word (a key=value, a path) wraps, never "…"
    for f in found:
        table.add_row(f.code, f"[{STYLE[f.severity]}]{f.severity.value}[/]", safe(finding_text(f)))
    console.print(table)


def print_line(console: Console, line: str) -> None:
    """A line printed exactly as given (no markup, no highlighting): error lines, already inert."""
    console.print(line, markup=False, highlight=False)


def print_error_lines(console: Console, findings: Iterable[Finding], where: str, *, warnings: bool = False) -> None:
    """One ``PATH: CODE severity: message`` line per error (and, with ``warnings``, per warning),
    at ``where`` for a finding about no file: what ``-q`` and a refusal leave of a report."""
    for f in findings:
        if f.severity == Severity.ERROR or warnings and f.severity == Severity.WARNING:
            print_line(console, f.line(where))


def indented(text: str) -> str:
    """Generated text, indented, each line inert (a tokenizer can decode to terminal escapes)."""
    return "\n".join("  " + inert(line) for line in (text.splitlines() or [""]))


def run_live(run: Any, *, json_out: bool, quiet: bool, output_format: str, unit: str = "") -> Any:
    """Call ``run(progress=, log=)`` (smoke-run's or probe-taps' run) with a rich progress bar (an
    ETA, ``unit`` after the count) and the loading lines where a person watches, a progress line
    every few seconds where the output is a log (piped, or a format whose record asks for them:
    github), neither with ``--json`` or ``-q``; return its result."""
    err_console = make_console(stderr=True)
    log = None if json_out or quiet else (lambda msg: err_console.print(f"[dim]{safe(msg)}[/]"))
    if not json_out and not quiet and err_console.is_terminal:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

        units = [TextColumn(unit)] if unit else []
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), *units, TimeElapsedColumn(),
                      TextColumn("eta"), TimeRemainingColumn(), console=err_console, transient=True) as progress:
            return run(progress=progress, log=log)
    from dflash_ckpt.output_formats import FORMATS

    fmt = FORMATS.get(output_format)
    if not quiet and (not json_out or (fmt is not None and fmt.progress_lines)):
        from dflash_ckpt.progress_lines import stderr_progress

        return run(progress=stderr_progress(), log=log)
    return run(log=log)


def table_width(columns: Iterable[str], rows: list[list[str]]) -> int:
    """A table's full width: every header and cell (rich markup) unbroken, one space of padding
    each side and a rule between columns. Wider than the terminal, rich would squeeze the
    columns and cut figures ("0.…"), so the reports stack such a table instead (``print_stacked``)."""
    from rich.text import Text

    widths = [max([len(col), *(Text.from_markup(row[i]).cell_len for row in rows)]) for i, col in enumerate(columns)]
    return sum(widths) + 3 * len(widths) - 1


def print_stacked(console: Console, title: str, columns: list[str], rows: list[list[str]]) -> None:
    """A table for a terminal narrower than its columns: each row one line, its first cell then
    ``column value`` pairs, wrapping between pairs (never inside a figure)."""
    console.print(title)
    for row in rows:
        pairs = [f"{escape(col)} [bold]{cell}[/]" for col, cell in zip(columns[1:], row[1:]) if cell]
        console.print(f"[bold]{row[0]}[/]: " + ",  ".join(pairs))
