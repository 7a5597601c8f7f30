"""Render inspect results: a rich report for people, one JSON document for machines."""

from __future__ import annotations

import json
from typing import Any, Iterable

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from dflash_ckpt.checks.inspection import InspectResult
from dflash_ckpt.checks.engines import READERS
from dflash_ckpt.rules import RULES, Rule, Severity

STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "yellow", Severity.INFO: "dim"}
SOURCE_TEXT = {"dflash_config": "dflash_config", "top_level": "top level", "missing": "missing", "conflict": "CONFLICT"}


def make_console(stderr: bool = False) -> Console:
    """A console whose plain lines never wrap (one-line messages stay one line); tables fit the width."""
    return Console(stderr=stderr, highlight=False, soft_wrap=True)


def _fmt(value: Any) -> str:
    return "—" if value is None else json.dumps(value)


def render_result(console: Console, res: InspectResult, *, quiet: bool = False, strict: bool = False) -> None:
    """The full report of one draft (or, with ``quiet``, its error lines only)."""
    if quiet:
        render_errors(console, [res], strict=strict)
        return
    d = res.draft
    if d is None:
        render_errors(console, [res], strict=strict)
        return
    console.print(f"[bold]{escape(res.label)}[/]  layout [cyan]{d.layout}[/]  generation [cyan]{d.generation}[/]")
    keys = Table(title="Resolved DFlash keys", title_justify="left", show_edge=False)
    keys.add_column("key")
    keys.add_column("value")
    keys.add_column("from")
    sources = d.sources_json()
    for key, value in d.resolved_json().items():
        src = sources[key]
        style = "bold red" if src in ("missing", "conflict") else ""
        shown = _fmt(value)
        if src == "conflict":
            rk = d.keys[key]
            shown = f"{_fmt(rk.nested)} (nested) vs {_fmt(rk.top)} (top)"
        keys.add_row(key, escape(shown), f"[{style}]{SOURCE_TEXT[src]}[/]" if style else SOURCE_TEXT[src])
    console.print(keys)
    if res.target is not None:
        t = res.target
        via = " via text_config" if t.text_config_used else ""
        console.print(
            f"target [bold]{escape(t.label)}[/]: {t.model_type or '?'}{via}, "
            f"{_fmt(t.num_hidden_layers)} layers, hidden {_fmt(t.hidden_size)}, vocab {_fmt(t.vocab_size)}"
        )
    if res.findings:
        table = Table(title="Findings", title_justify="left", show_edge=False)
        table.add_column("code", no_wrap=True)
        table.add_column("severity", no_wrap=True)
        table.add_column("message")
        for f in sorted(res.findings, key=lambda f: (-f.severity.rank, f.code)):
            table.add_row(f.code, f"[{STYLE[f.severity]}]{f.severity.value}[/]", escape(f.message))
        console.print(table)
    if res.readers:
        table = Table(title="Readers", title_justify="left", show_edge=False)
        table.add_column("reader", no_wrap=True)
        table.add_column("loads", no_wrap=True)
        table.add_column("why")
        for reader in READERS:
            v = res.readers[reader.key]
            table.add_row(reader.title, "[green]yes[/]" if v.loads else "[red]no[/]", escape(v.reason))
        console.print(table)
    console.print(_summary_line(res, strict))


def _summary_line(res: InspectResult, strict: bool) -> str:
    e, w, i = (res.count(s) for s in (Severity.ERROR, Severity.WARNING, Severity.INFO))
    status = "[bold red]FAIL[/]" if res.failed(strict) else "[bold green]OK[/]"
    return f"{status}  {e} error(s), {w} warning(s), {i} info"


def render_errors(console: Console, results: Iterable[InspectResult], *, strict: bool = False) -> None:
    """One line per error (and, with ``strict``, per warning); every message names its file."""
    for res in results:
        for f in res.findings:
            if f.severity == Severity.ERROR or strict and f.severity == Severity.WARNING:
                console.print(f"{f.code} {f.severity.value}: {escape(f.message)}")


def render_summary(console: Console, results: list[InspectResult], *, quiet: bool = False, strict: bool = False) -> None:
    """Several drafts: one table, then the lines of their errors."""
    if not quiet:
        table = Table(title="DFlash drafts", title_justify="left", show_edge=False)
        for col in ("draft", "layout", "gen", "block", "taps", "err", "warn", "readers", "status"):
            table.add_column(col, no_wrap=col != "draft", overflow="fold")
        for res in results:
            d = res.draft
            loads = sum(1 for v in res.readers.values() if v.loads)
            table.add_row(
                escape(res.label),
                d.layout if d else "—",
                d.generation if d else "—",
                _fmt(d.block_size) if d else "—",
                str(len(d.target_layer_ids)) if d and d.target_layer_ids else "—",
                str(res.count(Severity.ERROR)),
                str(res.count(Severity.WARNING)),
                f"{loads}/{len(res.readers)}" if res.readers else "—",
                "[bold red]FAIL[/]" if res.failed(strict) else "[bold green]OK[/]",
            )
        console.print(table)
    render_errors(console, results, strict=strict)


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


__all__ = ["RULES", "make_console", "render_result", "render_rule", "render_rules", "render_summary"]
