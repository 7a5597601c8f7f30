"""The output sink for people: the rich report of inspect (and the pieces other commands reuse).

Machines get one JSON document instead (``json_out``; rich is not imported on
that path). Everything taken from a checkpoint (folder and tensor names, ``model_type``, config
strings, messages that quote them) goes through ``safe``: its control characters are written as
visible escapes and its rich markup is escaped, so a hostile name prints as what it is and can
neither paint the terminal nor break the renderer.
"""

from __future__ import annotations

import io
import json
import os
from typing import Any, Iterable

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from dflash_ckpt.checks.engines.registry import READERS
from dflash_ckpt.inspection import InspectResult
from dflash_ckpt.engines.vllm_facts import reader_check_note as vllm_reader_note
from dflash_ckpt.errors import inert
from dflash_ckpt.neutral import no_command
from dflash_ckpt.rules import RULES, Finding, Rule, Severity

STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "yellow", Severity.INFO: "dim"}
SOURCE_TEXT = {"dflash_config": "dflash_config", "top_level": "top level", "missing": "missing", "conflict": "CONFLICT"}
#: Width of a console that is not a terminal (a pipe, a file): lines as long as their content,
#: so a table never wraps a draft name or a message for the program reading it.
PIPE_WIDTH = 100_000


def make_console(stderr: bool = False) -> Console:
    """A console whose plain lines never wrap (one-line messages stay one line).

    On a terminal tables fit its width; piped (and with no ``COLUMNS`` set) nothing is wrapped,
    and every line goes through ``neutral.no_command`` (a folder name cannot start a CI command).
    """
    import sys

    console = Console(stderr=stderr, highlight=False, soft_wrap=True)
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


def _fmt(value: Any) -> str:
    return "—" if value is None else json.dumps(value)


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


def render_result(console: Console, res: InspectResult, *, quiet: bool = False, strict: bool = False) -> None:
    """The full report of one draft (or, with ``quiet``, its error lines only)."""
    d = res.draft
    if quiet or d is None:
        render_errors(console, [res], strict=strict)
        return
    bl = d.block_layout
    console.print(f"[bold]{safe(res.label)}[/]  layout [cyan]{d.layout}[/]  generation [cyan]{d.generation}[/]  "
                  f"block [cyan]{bl.layout}[/] ({safe(bl.source)}{', conflict' if bl.conflict else ''})")
    keys = Table(title="Resolved DFlash keys", title_justify="left", show_edge=False)
    keys.add_column("key", overflow="fold")
    keys.add_column("value", overflow="fold")
    keys.add_column("from", overflow="fold")
    sources = d.sources_json()
    for key, value in d.resolved_json().items():
        src = sources[key]
        style = "bold red" if src in ("missing", "conflict") else ""
        shown = _fmt(value)
        if src == "conflict":
            rk = d.keys[key]
            shown = f"{_fmt(rk.nested)} (nested) vs {_fmt(rk.top)} (top)"
        keys.add_row(key, safe(shown), f"[{style}]{SOURCE_TEXT[src]}[/]" if style else SOURCE_TEXT[src])
    console.print(keys)
    if res.target is not None:
        t = res.target
        via = " via text_config" if t.text_config_used else ""
        console.print(
            f"target [bold]{safe(t.label)}[/]: {safe(t.model_type or '?')}{via}, "
            f"{safe(_fmt(t.num_hidden_layers))} layers, hidden {safe(_fmt(t.hidden_size))}, vocab {safe(_fmt(t.vocab_size))}"
        )
    render_findings(console, res.findings)
    if res.readers:
        table = Table(title="Readers", title_justify="left", show_edge=False)
        table.add_column("reader", no_wrap=True)
        table.add_column("loads", no_wrap=True)
        table.add_column("why", overflow="fold")
        for reader in READERS:
            v = res.readers[reader.key]
            why = v.reason + ("; normalize fixes it" if reader.key in res.normalize_fixes else "")
            table.add_row(reader.title, "[green]yes[/]" if v.loads else "[red]no[/]", safe(why))
        console.print(table)
        if "vllm" in res.readers and (note := vllm_reader_note())["installed"]:
            console.print(f"vLLM row: measured against vLLM {note['measured_against']}; installed here: "
                          f"{safe(note['installed'])} (smoke-run --engine vllm runs it)")
        if res.normalize_fixes and res.normalize_command:
            names = ", ".join(r.title for r in READERS if r.key in res.normalize_fixes)
            console.print(f"{safe(names)} would load it after [bold]{safe(res.normalize_command)}[/] (weights untouched)")
    console.print(_summary_line(res, strict))
    if res.serve and not res.failed(strict):
        render_serve(console, res.serve)


def render_serve(console: Console, serve: dict[str, list[str]]) -> None:
    """The lines that serve a pair that passed, one per engine (inspect's, and smoke-run's after PASS)."""
    from dflash_ckpt.checks.serve import NOT_SHOWN, shell_line

    console.print("serve it with (argv in --json 'serve'; add the engine's tensor-parallel option for several GPUs):")
    for engine, argv in serve.items():
        print_line(console, inert(f"  {engine}: {shell_line(argv) or NOT_SHOWN}"))


def _summary_line(res: InspectResult, strict: bool) -> str:
    e, w, i = (res.count(s) for s in (Severity.ERROR, Severity.WARNING, Severity.INFO))
    return f"{_status(res, strict)}  {e} error(s), {w} warning(s), {i} info"


def _status(res: InspectResult, strict: bool) -> str:
    if res.fatal is not None:
        return "[bold red]ERROR[/]"
    return "[bold red]FAIL[/]" if res.failed(strict) else "[bold green]OK[/]"


def render_errors(console: Console, results: Iterable[InspectResult], *, strict: bool = False) -> None:
    """One ``PATH: CODE severity: message`` line per error (and, with ``strict``, per warning)."""
    for res in results:
        for f in res.findings:
            if f.severity == Severity.ERROR or strict and f.severity == Severity.WARNING:
                print_line(console, f.line(res.label))


def render_summary(console: Console, results: list[InspectResult], *, quiet: bool = False, strict: bool = False) -> None:
    """Several drafts: one table (a draft that could not be read is a row too), then the error lines.

    A draft's name is never split: where the table would not fit the terminal, each draft's name
    gets a line of its own with its figures on the next (the same columns, labelled)."""
    if not quiet:
        cols = ("draft", "layout", "gen", "block", "taps", "err", "warn", "readers", "status")
        rows = [_summary_row(res, strict) for res in results]
        table = Table(title="DFlash drafts", title_justify="left", show_edge=False, pad_edge=False)
        for col in cols:
            table.add_column(col, no_wrap=True)
        for row in rows:
            table.add_row(*row)
        if _natural_width(table) <= console.width:
            console.print(table)
        else:
            console.print("[bold]DFlash drafts[/]")
            for row in rows:
                console.print(row[0], no_wrap=True, overflow="ignore", crop=False)
                figures = "  ".join(f"{c} {v}" if c not in ("layout", "gen", "status") else v for c, v in zip(cols[1:], row[1:]))
                console.print("  " + figures, soft_wrap=False)  # figures may wrap (between words); the name above never does
    render_errors(console, results, strict=strict)


def _natural_width(table: Table) -> int:
    """The width ``table`` takes when nothing in it wraps (rendered once, off screen)."""
    from rich.cells import cell_len

    probe = Console(width=PIPE_WIDTH, file=io.StringIO(), color_system=None, highlight=False)
    with probe.capture() as cap:
        probe.print(table)
    return max((cell_len(line) for line in cap.get().splitlines()), default=0)


def _summary_row(res: InspectResult, strict: bool) -> list[str]:
    d = res.draft
    loads = sum(1 for v in res.readers.values() if v.loads)
    return [
        safe(res.label),
        d.layout if d else "—",
        d.generation if d else "—",
        safe(_fmt(d.block_size)) if d else "—",
        str(len(d.target_layer_ids)) if d and d.target_layer_ids else "—",
        str(res.count(Severity.ERROR)),
        str(res.count(Severity.WARNING)),
        f"{loads}/{len(res.readers)}" if res.readers else "—",
        _status(res, strict),
    ]


def render_rules(console: Console, rules: Iterable[Rule]) -> None:
    table = Table(show_edge=False)
    table.add_column("code", no_wrap=True)
    table.add_column("name", no_wrap=True)
    table.add_column("severity", no_wrap=True)
    table.add_column("summary")
    for r in rules:
        table.add_row(r.code, r.name, f"[{STYLE[r.severity]}]{r.severity.value}[/]", escape(r.summary))
    console.print(table)


def render_rule(console: Console, rule: Rule) -> None:
    console.print(f"[bold]{rule.code}[/] {rule.name} ({rule.severity.value})")
    console.print(escape(rule.summary))
    console.print()
    console.print(escape(rule.explanation))
    console.print()
    console.print(f"[bold]Fix:[/] {escape(rule.fix)}")


__all__ = ["RULES", "finding_text", "make_console", "print_line", "render_result", "render_rule", "render_rules", "render_summary", "safe"]


def run_live(run: Any, *, json_out: bool, quiet: bool, output_format: str, unit: str = "") -> Any:
    """Call ``run(progress=, log=)`` (smoke-run's or probe-taps' run) with a rich progress bar (an
    ETA, ``unit`` after the count) and the loading lines where a person watches, a progress line
    every few seconds where the output is a log (piped, or the github format), neither with
    ``--json`` or ``-q``; return its result."""
    err_console = make_console(stderr=True)
    log = None if json_out or quiet else (lambda msg: err_console.print(f"[dim]{safe(msg)}[/]"))
    if not json_out and not quiet and err_console.is_terminal:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

        units = [TextColumn(unit)] if unit else []
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), *units, TimeElapsedColumn(),
                      TextColumn("eta"), TimeRemainingColumn(), console=err_console, transient=True) as progress:
            return run(progress=progress, log=log)
    if not quiet and (not json_out or output_format == "github"):
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
