"""The human report of ``dflash-ckpt normalize``: what changes, what each engine reads before and
after, and what was written. Imported only when the command prints for people (rich)."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console
from rich.table import Table

from dflash_ckpt.checks.engines.registry import READERS
from dflash_ckpt.canonical.run import Outcome
from dflash_ckpt.console import make_console, print_error_lines, print_line, safe
from dflash_ckpt.errors import error_line
from dflash_ckpt.canonical.fsops import human_bytes
from dflash_ckpt.rules import Severity


def render_normalize(oc: Outcome) -> None:
    """The report for people (with ``-q``: nothing but the error lines of a refusal)."""
    req = oc.req
    if oc.error is not None:
        # the error line itself is printed by the CLI; failed checks are listed first
        print_error_lines(make_console(stderr=True), oc.findings, oc.label)
        return
    if req.quiet:
        if req.check and oc.plan is not None and oc.plan.changed:
            print_line(make_console(), not_canonical_line(oc))
        return
    console = make_console()
    plan = oc.plan
    assert plan is not None and oc.before is not None and oc.after is not None
    layouts = oc.before.layout if oc.before.layout == oc.after.layout else f"{oc.before.layout} -> {oc.after.layout}"
    state = "canonical" if not plan.changed else f"{len(plan.changes)} change(s)"
    console.print(f"[bold]{safe(oc.label)}[/]  layout [cyan]{layouts}[/]  {state}")
    if oc.diff:
        _print_diff(console, oc.diff)
        for c in plan.changes:
            sign = {"add": "[green]+[/]", "set": "[yellow]~[/]", "remove": "[red]-[/]"}[c.op]
            shown = "" if c.op == "remove" else " = " + safe(json.dumps(c.value))
            console.print(f"  {sign} {safe(c.path)}{shown}  [dim]{safe(c.reason)}[/]")
    table = Table(title="Readers", title_justify="left", show_edge=False)
    for col in ("reader", "before", "after", "why (after)"):
        table.add_column(col, no_wrap=col != "why (after)")
    for reader in READERS:
        b, a = oc.readers_before.get(reader.key), oc.readers_after.get(reader.key)
        if a is None or b is None:
            continue
        why = a.reason if a.loads == b.loads or not a.loads else f"loads as is now; before it {b.reason}"
        table.add_row(reader.title, _yes(b.loads), _yes(a.loads), safe(why))
    console.print(table)
    for f in oc.findings:
        if f.severity == Severity.WARNING:
            print_line(console, f.line(oc.label))
    if req.check:
        if plan.changed:
            print_line(console, not_canonical_line(oc))
        else:
            console.print("[bold green]canonical[/]: normalize would change nothing")
    elif req.dry_run:
        console.print(f"dry run: {len(plan.changes)} change(s), nothing written")
    elif req.in_place:
        if oc.written:
            backup = f", the old one kept as {oc.backup}" if oc.backup else ""
            console.print(f"[bold green]rewrote[/] {safe(str(Path(oc.draft_dir or '.') / 'config.json'))}{safe(backup)}")
        else:
            console.print("already canonical: nothing written")
    elif oc.files is not None:
        files = oc.files
        parts = [f"config.json {'rewritten' if plan.changed else 'unchanged'}"]
        if files.linked:
            parts.append(f"{len(files.linked)} weight file(s) hard-linked ({human_bytes(files.bytes_linked)})")
        if files.copied:
            parts.append(f"{len(files.copied)} file(s) copied ({human_bytes(files.bytes_copied)})")
        console.print(f"[bold green]wrote[/] {safe(str(req.out))}: " + ", ".join(parts))


def not_canonical_line(oc: Outcome) -> str:
    """``--check``'s verdict on a config normalize would change, as one finding line (DF020), the
    one line ``-q`` prints (as ``ruff format --check`` prints "Would reformat")."""
    import shlex

    assert oc.plan is not None
    where = oc.before.where if oc.before is not None else oc.label
    keys = ", ".join(dict.fromkeys(c.path for c in oc.plan.changes))
    fix = f"dflash-ckpt normalize {shlex.quote(oc.label)} --in-place"
    return error_line(where, "DF020", "error",
                      f"not canonical: normalize would make {len(oc.plan.changes)} change(s) ({keys}); run `{fix}` or write a copy to OUT")


def _yes(ok: bool) -> str:
    return "[green]yes[/]" if ok else "[red]no[/]"


def _print_diff(console: Console, diff: str) -> None:

    for line in diff.splitlines():
        style = "bold" if line.startswith(("---", "+++")) else "green" if line.startswith("+") else "red" if line.startswith("-") else "cyan" if line.startswith("@@") else ""
        console.print(f"[{style}]{safe(line)}[/]" if style else safe(line))

