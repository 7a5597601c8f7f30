"""``dflash-ckpt normalize``: the run behind the command (options are in ``normalize_cmd``).

Reads the draft (config.json and safetensors headers, never tensor data), plans the edits
(``dflash_ckpt.normalize.plan``), applies them to the text (``dflash_ckpt.normalize.config_text``), checks the
result with inspect's checks, and only then writes: a new OUT folder (``dflash_ckpt.normalize.build``),
the draft's config.json in place, or nothing (``--check``, ``--dry-run``).

Imported only when the command runs; the report for people is in ``normalize_report``.
"""

from __future__ import annotations

import difflib
import re
import stat
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

if TYPE_CHECKING:
    from dflash_ckpt.errors import DFlashCkptError
    from dflash_ckpt.normalize.fsops import BuildReport
    from dflash_ckpt.normalize.plan import Known, Overrides, Plan
    from dflash_ckpt.checks.engines import Verdict
    from dflash_ckpt.rules import Finding
    from dflash_ckpt.sources.base import Source
    from dflash_ckpt.spec.resolve import DraftSpec, TargetSpec
    from dflash_ckpt.sources.weights import WeightInventory



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
        from dflash_ckpt.commands.json_out import SCHEMA_VERSION

        return {
            "schema_version": SCHEMA_VERSION,
            "command": "normalize",
            "draft": self.label,
            "draft_path": str(self.draft_dir) if self.draft_dir else None,
            "out": str(req.out) if req.out else None,
            "mode": req.mode,
            "ok": self.exit_code == 0,
            "exit_code": self.exit_code,
            "error": None if self.error is None else {"code": self.error.line_code, "message": self.error.message},
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
                from dflash_ckpt.normalize.lock import unlock_out

                unlock_out(req.out)  # the lock check_out_path took (normalize/lock.py)
    except DFlashCkptError as err:
        outcome.error = err
        outcome.exit_code = err.exit_code
    if req.json_out:  # rich stays unimported on the machine path
        from dflash_ckpt.commands.json_out import print_json

        print_json(outcome.to_json())
        if outcome.error is not None:  # stdout stays one document; the line is for the log
            print(outcome.error.line("dflash-ckpt normalize"), file=sys.stderr)
        return outcome.exit_code
    from dflash_ckpt.commands.normalize_report import render_normalize

    render_normalize(outcome)
    if outcome.error is not None:
        raise outcome.error  # the CLI prints its line after the failed checks
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

    _refuse_cache_in_place(req, None)
    config_src, weights_src = _open_draft(req)
    draft_dir, label = config_src.local_dir, config_src.label
    oc.draft_dir, oc.label = draft_dir, label
    _refuse_cache_in_place(req, draft_dir)
    if req.out is not None:
        from dflash_ckpt.normalize.fsops import check_out_path

        assert draft_dir is not None
        if missing_parents(req.out):
            check_new_parents(draft_dir, req.out)
        else:
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
    oc.findings = [_located(f, oc.after.where) for f in run_checks(oc.after, oc.target)]

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
        if req.out is not None and not missing_parents(req.out):
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
    from dflash_ckpt.normalize.build import build_out
    from dflash_ckpt.normalize.fsops import check_out_path

    created = make_parents(req.out)
    try:
        if created:
            check_out_path(draft_dir, req.out, force=req.force)
        actions = _plan_out(req, draft_dir)
        mode = stat.S_IMODE((draft_dir / "config.json").stat().st_mode)
        progress = None if req.quiet or req.json_out else _progress_bar
        oc.files = build_out(draft_dir, req.out, new, mode, actions, progress=progress, force=req.force)
    except BaseException:
        remove_empty(created)
        raise
    oc.written = True


def _located(f: Finding, where: str) -> Finding:
    """A finding about the planned config points at it (``config.json (normalized)``), apart from the message."""
    if f.path is None and f.message.startswith(where + ": "):
        return f._replace(path=where, message=f.message[len(where) + 2:])
    return f


def missing_parents(out: Path) -> list[Path]:
    """OUT's ancestors that do not exist yet, outermost first (normalize creates them)."""
    missing: list[Path] = []
    parent = out.absolute().parent
    while not parent.exists() and not parent.is_symlink() and parent != parent.parent:
        missing.append(parent)
        parent = parent.parent
    return missing[::-1]


def check_new_parents(draft_dir: Path, out: Path) -> None:
    """Before anything is created: the folders normalize would make for OUT can be made, outside DRAFT."""
    import os

    from dflash_ckpt.errors import InputError, UsageError

    missing = missing_parents(out)
    base = missing[0].parent
    if not base.is_dir():
        raise UsageError(f"OUT {out}: {base} is not a folder, so OUT's parent folders cannot be created there")
    real_out = Path(os.path.realpath(base)) / out.absolute().relative_to(base)
    real_draft = Path(os.path.realpath(draft_dir))
    if real_draft == real_out or real_draft in real_out.parents:
        raise UsageError(f"OUT {out} is inside DRAFT {draft_dir}; give a folder outside it")
    if not os.access(base, os.W_OK | os.X_OK):
        raise InputError(f"{base}: not writable by this user; OUT's parent folders cannot be created there (choose another folder or fix its permissions)")


def make_parents(out: Path) -> list[Path]:
    """Create OUT's missing parent folders; the ones created, outermost first."""
    from dflash_ckpt.errors import InputError
    from dflash_ckpt.sources.base import describe_os_error

    created: list[Path] = []
    for folder in missing_parents(out):
        try:
            folder.mkdir()
        except FileExistsError:
            continue
        except OSError as err:
            remove_empty(created)
            raise InputError(describe_os_error(err, str(folder))) from None
        created.append(folder)
    return created


def remove_empty(created: list[Path]) -> None:
    """Undo ``make_parents`` after a failure: remove the folders it made, innermost first, if empty."""
    for folder in reversed(created):
        try:
            folder.rmdir()
        except OSError:
            return


def _refuse_cache_in_place(req: Request, draft_dir: Path | None) -> None:
    """``--in-place`` on a Hub cache snapshot changes what every other tool loads from the cache
    (and fails ``hf cache verify``): refused unless ``--force``, pointing to a copy instead.

    Called once before anything is fetched (``draft_dir`` None: a Hub repo id always lands in the
    cache) and once the folder is known (a snapshot folder given as a path)."""
    from dflash_ckpt.errors import UsageError
    from dflash_ckpt.sources.resolve import looks_like_path

    if not req.in_place or req.force:
        return
    if draft_dir is None:
        if looks_like_path(req.draft) or Path(req.draft).expanduser().exists():
            return
        repo, where = req.draft.split("@", 1)[0], "its Hugging Face cache snapshot"
    else:
        from dflash_ckpt.sources.hub.cache import hub_cache_snapshot

        found = hub_cache_snapshot(draft_dir)
        if found is None:
            return
        repo, where = found, f"{draft_dir}, a Hugging Face cache snapshot,"
    raise UsageError(
        f"--in-place would rewrite {where} changing what every other tool loads from the cache "
        f"and failing `hf cache verify`; write a normalized copy with `dflash-ckpt normalize {repo} OUT`, "
        "or pass --force to rewrite the cache anyway"
    )


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
