"""inspect's report for people (the resolved keys, findings, readers and serve lines of each
draft, the summary of many) and the ``rules`` listing; the console they print to, and the
pieces every report shares, are ``dflash_ckpt/console.py``."""

from __future__ import annotations

import io
import json
from typing import Any, Iterable

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from dflash_ckpt.checks.engines.registry import READERS
from dflash_ckpt.inspection import InspectResult
from dflash_ckpt.engine_runners.vllm_facts import reader_check_note as vllm_reader_note
from dflash_ckpt.errors import inert
from dflash_ckpt.console import PIPE_WIDTH, STYLE, print_error_lines, print_line, render_findings, safe
from dflash_ckpt.rules import Rule, Severity

SOURCE_TEXT = {"dflash_config": "dflash_config", "top_level": "top level", "missing": "missing", "conflict": "CONFLICT"}




def _fmt(value: Any) -> str:
    return "—" if value is None else json.dumps(value)





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
        keys.add_row(key, safe(shown), f"[{style}]{SOURCE_TEXT.get(src, src)}[/]" if style else safe(SOURCE_TEXT.get(src, src)))
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
        elif "vllm" in res.readers and note.get("probe_error"):
            console.print(f"vLLM row: measured against vLLM {note['measured_against']}; not checked here: "
                          f"{safe(note['probe_error'])}")
        if res.normalize_fixes and res.normalize_command:
            names = ", ".join(r.title for r in READERS if r.key in res.normalize_fixes)
            console.print(f"{safe(names)} would load it after [bold]{safe(res.normalize_command)}[/] (weights untouched)")
    console.print(_summary_line(res, strict))
    if res.serve and not res.failed(strict):
        render_serve(console, res.serve, res.unserved())


def render_serve(console: Console, serve: dict[str, list[str]], unserved: dict[str, str] | None = None) -> None:
    """The lines that serve a pair that passed, one per engine (inspect's, and smoke-run's after
    PASS); an engine left out because its reader fails the draft says so (``unserved``)."""
    from dflash_ckpt.checks.serve import NOT_SHOWN, shell_line

    from dflash_ckpt.checks.engines.tensorrt_llm import readable

    console.print("serve it with (argv in --json 'serve'; add the engine's tensor-parallel option for several GPUs):")
    for engine, argv in serve.items():
        line = shell_line(argv)
        parts = readable(argv) if engine == "tensorrt-llm" and line is not None else None
        if parts is None:
            print_line(console, inert(f"  {engine}: {line or NOT_SHOWN}"))
            continue
        yaml, command = parts  # the YAML, then the command that reads it (argv: one sh -c line)
        print_line(console, inert(f"  {engine}: write dflash-options.yaml: {yaml}"))
        print_line(console, inert(f"    then run: {command}"))
    for engine, why in (unserved or {}).items():
        print_line(console, inert(f"  {engine}: {why}"))


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
        print_error_lines(console, res.findings, res.label, warnings=strict)


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

    probe = Console(width=PIPE_WIDTH, file=io.StringIO(), color_system=None, highlight=False, emoji=False)
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
