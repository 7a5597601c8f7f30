"""``dflash-ckpt normalize``: the run behind the command (options are in ``normalize_cmd``).

Reads the draft (config.json and safetensors headers, never tensor data), plans the edits
(``dflash_ckpt.normalize.plan``), applies them to the text (``dflash_ckpt.normalize.config_text``), checks the
result with inspect's checks, and only then writes: a new OUT folder (``dflash_ckpt.normalize.fsops``),
the draft's config.json in place, or nothing (``--check``, ``--dry-run``).

Imported only when the command runs.
"""

from __future__ import annotations

import difflib
import json
import re
import stat
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

if TYPE_CHECKING:
    from rich.console import Console

    from dflash_ckpt.errors import DFlashCkptError
    from dflash_ckpt.normalize.fsops import BuildReport
    from dflash_ckpt.normalize.plan import Known, Overrides, Plan
    from dflash_ckpt.checks.engines import Verdict
    from dflash_ckpt.rules import Finding
    from dflash_ckpt.sources.base import Source
    from dflash_ckpt.spec.resolve import DraftSpec, TargetSpec
    from dflash_ckpt.sources.weights import WeightInventory

#: Bumped when a field of the JSON document changes meaning or is removed.
JSON_SCHEMA_VERSION = 1


@dataclass
class Request:
    """What the user asked for, parsed."""

    draft: str
    out: Path | None
    in_place: bool
    backup: bool
    check: bool
    dry_run: bool
    force: bool
    copy: bool
    prefer: str | None
    mirrors: bool
    overrides: Overrides
    target: str | None
    revision: str | None
    token: str | None
    json_out: bool
    quiet: bool
    #: DRAFT's links to files outside it: "copy" (their content) or "link" (normalize/fsops.py)
    external_links: str = "copy"

    @property
    def mode(self) -> str:
        if self.check:
            return "check"
        if self.dry_run:
            return "dry-run"
        return "in-place" if self.in_place else "out"


@dataclass
class Outcome:
    """Everything a run found and did, for the report and the JSON document."""

    req: Request
    label: str
    draft_dir: Path | None = None
    plan: Plan | None = None
    before: DraftSpec | None = None
    after: DraftSpec | None = None
    target: TargetSpec | None = None
    readers_before: dict[str, Verdict] = field(default_factory=dict)
    readers_after: dict[str, Verdict] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    diff: str = ""
    files: BuildReport | None = None
    written: bool = False
    backup: Path | None = None
    error: DFlashCkptError | None = None
    exit_code: int = 0

    def to_json(self) -> dict[str, Any]:
        plan, req = self.plan, self.req
        return {
            "schema_version": JSON_SCHEMA_VERSION,
            "draft": self.label,
            "draft_path": str(self.draft_dir) if self.draft_dir else None,
            "out": str(req.out) if req.out else None,
            "mode": req.mode,
            "ok": self.exit_code == 0,
            "exit_code": self.exit_code,
            "error": None if self.error is None else {"code": self.error.code, "message": self.error.message},
            "canonical": None if plan is None else not plan.changed,
            "changed": None if plan is None else plan.changed,
            "layout_before": self.before.layout if self.before else None,
            "layout_after": self.after.layout if self.after else None,
            "resolved_before": self.before.resolved_json() if self.before else None,
            "resolved_after": self.after.resolved_json() if self.after else None,
            "changes": [c.to_json() for c in plan.changes] if plan else [],
            "diff": self.diff,
            "readers_before": {k: v.to_json() for k, v in self.readers_before.items()},
            "readers_after": {k: v.to_json() for k, v in self.readers_after.items()},
            "findings": [f.to_json() for f in self.findings],
            "written": self.written,
            "backup": str(self.backup) if self.backup else None,
            "files": self.files.to_json() if self.files else None,
        }


def parse_layer_ids(text: str) -> list[int]:
    """``1,9,17`` (or ``[1, 9, 17]`` or ``1 9 17``) as a list of ints."""
    from dflash_ckpt.errors import UsageError

    parts = [p for p in re.split(r"[,\s]+", text.strip().strip("[]")) if p]
    ids: list[int] = []
    for p in parts:
        try:
            ids.append(int(p))
        except ValueError:
            raise UsageError(f"--target-layer-ids: {p!r} is not an integer; write e.g. 1,9,17,25,33") from None
    if not ids:
        raise UsageError("--target-layer-ids is empty; write e.g. 1,9,17,25,33")
    return ids


def run_normalize(req: Request) -> int:
    """Do the run; print the report (or JSON); return the exit code."""
    from dflash_ckpt.errors import DFlashCkptError

    outcome = Outcome(req=req, label=req.draft)
    try:
        try:
            _run(req, outcome)
        finally:
            if req.out is not None:
                from dflash_ckpt.normalize.fsops import unlock_out

                unlock_out(req.out)  # the lock check_out_path took (normalize/fsops.py)
    except DFlashCkptError as err:
        outcome.error = err
        outcome.exit_code = err.exit_code
        if not req.json_out:
            _print_report(outcome)
            raise
    if req.json_out:
        sys.stdout.write(json.dumps(outcome.to_json(), indent=2) + "\n")
    else:
        _print_report(outcome)
    return outcome.exit_code


def _run(req: Request, oc: Outcome) -> None:
    from dflash_ckpt.checks import run_checks
    from dflash_ckpt.normalize.config_text import ConfigText
    from dflash_ckpt.errors import CheckFailed
    from dflash_ckpt.normalize.plan import plan_normalize
    from dflash_ckpt.checks.engines import judge_readers
    from dflash_ckpt.rules import Severity
    from dflash_ckpt.sources.resolve import open_source
    from dflash_ckpt.spec.resolve import build_spec, load_target, read_config
    from dflash_ckpt.sources.weights import load_inventory

    config_src, weights_src = _open_draft(req)
    draft_dir, label = config_src.local_dir, config_src.label
    oc.draft_dir, oc.label = draft_dir, label
    if req.out is not None:
        from dflash_ckpt.normalize.fsops import check_out_path

        assert draft_dir is not None
        check_out_path(draft_dir, req.out, force=req.force)
    if req.target is not None:
        oc.target = load_target(open_source(req.target, token=req.token, role="target"))

    config, raw = read_config(config_src)
    where = config_src.where("config.json")
    text = ConfigText(raw, where)
    inventory = load_inventory(weights_src)
    oc.before = build_spec(config, label=label, where=where, weights=inventory, raw=raw)
    oc.readers_before = judge_readers(oc.before, oc.target)

    plan = plan_normalize(
        config, where=where, prefer=req.prefer, mirrors=req.mirrors,
        overrides=req.overrides, known=_known(inventory, oc.before, oc.target),
    )
    oc.plan = plan
    new = text.render(plan.edits, plan.after)
    new_where = str(req.out / "config.json") if req.out is not None else where + " (normalized)"
    # findings name the planned file: nothing is written unless they pass
    oc.after = build_spec(plan.after, label=label, where=where + " (normalized)", weights=inventory, raw=new)
    oc.readers_after = judge_readers(oc.after, oc.target)
    oc.diff = unified_diff(raw, new, where, new_where)
    oc.findings = run_checks(oc.after, oc.target)

    errors = [f for f in oc.findings if f.severity == Severity.ERROR]
    if errors:
        codes = ", ".join(sorted({f.code for f in errors}))
        raise CheckFailed(
            f"{label}: the normalized config fails {len(errors)} check(s) ({codes}); nothing written "
            "(`dflash-ckpt inspect` explains each, `dflash-ckpt rules CODE` the fix)"
        )
    if req.check:
        oc.exit_code = 1 if plan.changed else 0
        return
    if req.dry_run:
        if req.out is not None:
            assert draft_dir is not None
            _plan_out(req, draft_dir)
        return
    if req.in_place:
        if plan.changed:
            from dflash_ckpt.normalize.fsops import write_in_place

            assert draft_dir is not None
            oc.backup = write_in_place(draft_dir, new, raw, backup=req.backup, force=req.force)
            oc.written = True
        return
    assert req.out is not None and draft_dir is not None
    from dflash_ckpt.normalize.fsops import build_out

    actions = _plan_out(req, draft_dir)
    mode = stat.S_IMODE((draft_dir / "config.json").stat().st_mode)
    progress = None if req.quiet or req.json_out else _progress_bar
    oc.files = build_out(draft_dir, req.out, new, mode, actions, progress=progress)
    oc.written = True


def _open_draft(req: Request) -> tuple[Source, Source]:
    """Where config.json is read (and written) from, and where the weight headers are read.

    OUT needs every file on this machine; ``--in-place`` needs config.json in a folder (for a Hub
    id: its cache snapshot, fetching only that file); ``--check`` and ``--dry-run`` read the
    config and the headers wherever they are, downloading no weights.
    """
    from dflash_ckpt.sources.local import LocalSource
    from dflash_ckpt.sources.resolve import local_folder, looks_like_path, open_source

    local = looks_like_path(req.draft) or Path(req.draft).expanduser().exists()
    if req.out is not None or (req.in_place and local):
        folder, label = local_folder(req.draft, revision=req.revision, token=req.token, role="draft")
        src = LocalSource(folder, label=label)
        return src, src
    headers = open_source(req.draft, revision=req.revision, token=req.token, role="draft")
    if not req.in_place:
        return headers, headers
    folder, label = local_folder(req.draft, revision=req.revision, token=req.token, role="draft", allow_patterns=["config.json"])
    return LocalSource(folder, label=label), headers


def _plan_out(req: Request, draft_dir: Path) -> list[Any]:
    from dflash_ckpt.normalize.fsops import check_free_space, plan_files

    assert req.out is not None
    actions = plan_files(draft_dir, req.out, copy_weights=req.copy, external_links=req.external_links)
    check_free_space(req.out.absolute().parent, sum(a.size for a in actions if a.how == "copy"))
    return actions


def _known(inventory: WeightInventory, spec: DraftSpec, target: TargetSpec | None) -> Known:
    from dflash_ckpt.normalize.plan import Known
    from dflash_ckpt.spec.resolve import as_int

    return Known(
        fc_taps=fc_taps(inventory, spec.dims.hidden_size),
        target_label=target.label if target else None,
        target_depth=as_int(target.num_hidden_layers) if target else None,
        target_vocab=as_int(target.vocab_size) if target else None,
        target_pad=as_int(target.pad_token_id) if target else None,
    )


def fc_taps(inventory: WeightInventory, hidden: int | None) -> int | None:
    """k in ``fc.weight [H, k*H]`` (a ``model.``-style prefix tolerated); ``None`` if unknown."""
    for name, info in inventory.tensors.items():
        if name == "fc.weight" or (name.endswith(".fc.weight") and name.count(".") == 2):
            shape = tuple(info.shape)
            h = hidden if hidden else (shape[0] if len(shape) == 2 else None)
            if len(shape) == 2 and h and shape[0] == h and shape[1] % h == 0 and shape[1] > 0:
                return shape[1] // h
            return None
    return None


def unified_diff(old: bytes, new: bytes, old_name: str, new_name: str) -> str:
    """The change to config.json as a unified diff ('' when nothing changes)."""
    if old == new:
        return ""
    a = old.decode("utf-8-sig").splitlines(keepends=True)
    b = new.decode("utf-8-sig").splitlines(keepends=True)
    lines = list(difflib.unified_diff(a, b, old_name, new_name))
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)


def _progress_bar(total: int) -> Any:
    """A rich progress bar on stderr for a large copy (silent when stderr is not a terminal)."""
    from contextlib import contextmanager

    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

    @contextmanager
    def bar() -> Iterator[Callable[[int], None]]:
        console = Console(stderr=True)
        with Progress(
            TextColumn("copying weights"), BarColumn(), DownloadColumn(), TransferSpeedColumn(), TimeRemainingColumn(),
            console=console, transient=True, disable=not console.is_terminal,
        ) as progress:
            task = progress.add_task("copy", total=total)
            yield lambda n: progress.advance(task, n)

    return bar()


# -- the report ------------------------------------------------------------------------------------


def _print_report(oc: Outcome) -> None:
    from rich.markup import escape
    from rich.table import Table

    from dflash_ckpt.normalize.fsops import human_bytes
    from dflash_ckpt.checks.engines import READERS
    from dflash_ckpt.commands.output import make_console
    from dflash_ckpt.rules import Severity

    req = oc.req
    if oc.error is not None:
        # the error line itself is printed by the CLI; failed checks are listed first
        err_console = make_console(stderr=True)
        for f in oc.findings:
            if f.severity == Severity.ERROR:
                err_console.print(f"{f.code} error: {escape(f.message)}")
        return
    if req.quiet:
        return
    console = make_console()
    plan = oc.plan
    assert plan is not None and oc.before is not None and oc.after is not None
    layouts = oc.before.layout if oc.before.layout == oc.after.layout else f"{oc.before.layout} -> {oc.after.layout}"
    state = "canonical" if not plan.changed else f"{len(plan.changes)} change(s)"
    console.print(f"[bold]{escape(oc.label)}[/]  layout [cyan]{layouts}[/]  {state}")
    if oc.diff:
        _print_diff(console, oc.diff)
        for c in plan.changes:
            sign = {"add": "[green]+[/]", "set": "[yellow]~[/]", "remove": "[red]-[/]"}[c.op]
            shown = "" if c.op == "remove" else " = " + escape(json.dumps(c.value))
            console.print(f"  {sign} {escape(c.path)}{shown}  [dim]{escape(c.reason)}[/]")
    table = Table(title="Readers", title_justify="left", show_edge=False)
    for col in ("reader", "before", "after", "why (after)"):
        table.add_column(col, no_wrap=col != "why (after)")
    for reader in READERS:
        b, a = oc.readers_before.get(reader.key), oc.readers_after.get(reader.key)
        if a is None or b is None:
            continue
        why = a.reason if a.loads == b.loads or not a.loads else f"loads as is now; before it {b.reason}"
        table.add_row(reader.title, _yes(b.loads), _yes(a.loads), escape(why))
    console.print(table)
    for f in oc.findings:
        if f.severity == Severity.WARNING:
            console.print(f"[yellow]warning[/] {f.code}: {escape(f.message)}")
    if req.check:
        if plan.changed:
            console.print(f"[bold red]not canonical[/]: normalize would make {len(plan.changes)} change(s) to config.json")
        else:
            console.print("[bold green]canonical[/]: normalize would change nothing")
    elif req.dry_run:
        console.print(f"dry run: {len(plan.changes)} change(s), nothing written")
    elif req.in_place:
        if oc.written:
            backup = f", the old one kept as {oc.backup}" if oc.backup else ""
            console.print(f"[bold green]rewrote[/] {escape(str(Path(oc.draft_dir or '.') / 'config.json'))}{escape(backup)}")
        else:
            console.print("already canonical: nothing written")
    elif oc.files is not None:
        files = oc.files
        parts = [f"config.json {'rewritten' if plan.changed else 'unchanged'}"]
        if files.linked:
            parts.append(f"{len(files.linked)} weight file(s) hard-linked ({human_bytes(files.bytes_linked)})")
        if files.copied:
            parts.append(f"{len(files.copied)} file(s) copied ({human_bytes(files.bytes_copied)})")
        console.print(f"[bold green]wrote[/] {escape(str(req.out))}: " + ", ".join(parts))


def _yes(ok: bool) -> str:
    return "[green]yes[/]" if ok else "[red]no[/]"


def _print_diff(console: Console, diff: str) -> None:
    from rich.markup import escape

    for line in diff.splitlines():
        style = "bold" if line.startswith(("---", "+++")) else "green" if line.startswith("+") else "red" if line.startswith("-") else "cyan" if line.startswith("@@") else ""
        console.print(f"[{style}]{escape(line)}[/]" if style else escape(line))

