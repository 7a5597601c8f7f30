"""``dflash-ckpt normalize``: the run behind the command (options are in ``normalize_cmd``).

Reads the draft (config.json and safetensors headers, never tensor data), plans the edits
(``dflash_ckpt.normalize.plan``), applies them to the text (``dflash_ckpt.normalize.config_text``), checks the
result with inspect's checks, and only then writes: a new OUT folder (``dflash_ckpt.normalize.fsops``),
the draft's config.json in place, or nothing (``--check``, ``--dry-run``).

Imported only when the command runs; the report (for people, or JSON) is in ``normalize_report``.
``run_normalize`` is the command's work with the CLI's long options as keywords.
"""

from __future__ import annotations

import re
import stat
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

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` document."""
        return self.to_json()

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


def run_normalize(draft: str, out: str | Path | None = None, *, in_place: bool = False, no_backup: bool = False,
                  check: bool = False, dry_run: bool = False, force: bool = False, copy: bool = False,
                  external_links: str = "copy", target_layer_ids: str | list[int] | None = None,
                  block_size: int | None = None, mask_token_id: int | None = None, num_target_layers: int | None = None,
                  layer_types: str | list[str] | None = None, prefer: str | None = None, no_mirrors: bool = False,
                  target: str | None = None, revision: str | None = None, token: str | None = None,
                  progress: bool = False) -> Outcome:
    """``dflash-ckpt normalize DRAFT [OUT]``: keywords are its long options. Prints nothing
    (``progress``: a bar on stderr while weights are copied); raises ``DFlashCkptError`` for a
    refusal, with nothing written; returns the outcome (``.ok``, ``.exit_code``, ``.to_dict()``)."""
    req = make_request(
        draft, None if out is None else Path(out), in_place=in_place, no_backup=no_backup, check=check,
        dry_run=dry_run, force=force, copy=copy, external_links=external_links, target_layer_ids=target_layer_ids,
        block_size=block_size, mask_token_id=mask_token_id, num_target_layers=num_target_layers,
        layer_types=layer_types, prefer=prefer, no_mirrors=no_mirrors, target=target, revision=revision,
        token=token, json_out=not progress, quiet=not progress)
    outcome = execute(req)
    if outcome.error is not None:
        raise outcome.error
    return outcome


def make_request(draft: str, out: Path | None, *, in_place: bool, no_backup: bool, check: bool, dry_run: bool,
                 force: bool, copy: bool, external_links: str, target_layer_ids: str | list[int] | None,
                 block_size: int | None, mask_token_id: int | None, num_target_layers: int | None,
                 layer_types: str | list[str] | None, prefer: str | None, no_mirrors: bool, target: str | None,
                 revision: str | None, token: str | None, json_out: bool, quiet: bool) -> Request:
    """The options checked against each other (usage errors, exit 2) and parsed into a ``Request``."""
    from dflash_ckpt.errors import UsageError
    from dflash_ckpt.normalize.plan import Overrides, parse_layer_types

    if out is not None and in_place:
        raise UsageError("give OUT or --in-place, not both")
    if check and (out is not None or in_place):
        raise UsageError("--check writes nothing; drop OUT and --in-place")
    if out is None and not (in_place or check or dry_run):
        raise UsageError("give OUT (a new folder), or --in-place, --check or --dry-run")
    if no_backup and not in_place:
        raise UsageError("--no-backup only applies to --in-place")
    if copy and out is None:
        raise UsageError("--copy only applies to OUT")
    overrides = Overrides(
        block_size=block_size,
        mask_token_id=mask_token_id,
        target_layer_ids=parse_layer_ids(target_layer_ids) if isinstance(target_layer_ids, str) else target_layer_ids,
        num_target_layers=num_target_layers,
        layer_types=parse_layer_types(layer_types) if isinstance(layer_types, str) else layer_types,
    )
    return Request(
        draft=draft, out=out.expanduser() if out is not None else None, in_place=in_place,
        backup=not no_backup, check=check, dry_run=dry_run, force=force, copy=copy,
        external_links=external_links, prefer=prefer, mirrors=not no_mirrors,
        overrides=overrides, target=target, revision=revision, token=token, json_out=json_out, quiet=quiet,
    )


def execute(req: Request) -> Outcome:
    """Do the run; a refusal lands in ``outcome.error`` (and its exit code), beside what was found."""
    from dflash_ckpt.errors import DFlashCkptError

    outcome = Outcome(req=req, label=req.draft)
    try:
        try:
            normalize_into(req, outcome)
        finally:
            if req.out is not None:
                from dflash_ckpt.normalize.fsops import unlock_out

                unlock_out(req.out)  # the lock check_out_path took (normalize/fsops.py)
    except DFlashCkptError as err:
        outcome.error = err
        outcome.exit_code = err.exit_code
    return outcome


def normalize_into(req: Request, oc: Outcome) -> None:
    """Fill ``oc`` with the run's findings and what it wrote; raises on a refusal (the caller
    unlocks OUT: ``execute``)."""
    from dflash_ckpt.checks import run_checks
    from dflash_ckpt.normalize.config_text import ConfigText
    from dflash_ckpt.errors import CheckFailed
    from dflash_ckpt.normalize.plan import plan_normalize
    from dflash_ckpt.checks.engines import judge_readers
    from dflash_ckpt.rules import Severity
    from dflash_ckpt.sources.resolve import open_source
    from dflash_ckpt.spec.resolve import build_spec, read_config, read_target_spec
    from dflash_ckpt.sources.weights import load_inventory
    from dflash_ckpt.normalize.config_text import unified_diff
    from dflash_ckpt.normalize.outdir import require_new_parents, make_parents, missing_parents, remove_empty

    _refuse_cache_in_place(req, None)
    config_src, weights_src = _open_draft(req)
    draft_dir, label = config_src.local_dir, config_src.label
    oc.draft_dir, oc.label = draft_dir, label
    _refuse_cache_in_place(req, draft_dir)
    if req.out is not None:
        from dflash_ckpt.normalize.fsops import check_out_path

        assert draft_dir is not None
        if missing_parents(req.out):
            require_new_parents(draft_dir, req.out)
        else:
            check_out_path(draft_dir, req.out, force=req.force)
    if req.target is not None:
        oc.target = read_target_spec(open_source(req.target, token=req.token, role="target"))

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
    from dflash_ckpt.normalize.fsops import build_out, check_out_path

    created = make_parents(req.out)
    try:
        if created:
            check_out_path(draft_dir, req.out, force=req.force)
        actions = _plan_out(req, draft_dir)
        mode = stat.S_IMODE((draft_dir / "config.json").stat().st_mode)
        progress = None if req.quiet or req.json_out else _progress_bar
        oc.files = build_out(draft_dir, req.out, new, mode, actions, progress=progress)
    except BaseException:
        remove_empty(created)
        raise
    oc.written = True


def _located(f: Finding, where: str) -> Finding:
    """A finding about the planned config points at it (``config.json (normalized)``), apart from the message."""
    if f.path is None and f.message.startswith(where + ": "):
        return f._replace(path=where, message=f.message[len(where) + 2:])
    return f


def hub_cache_snapshot(folder: Path) -> str | None:
    """The repo id when ``folder`` is a snapshot in a Hugging Face cache
    (``.../models--org--name/snapshots/<commit>``), else ``None``."""
    snapshots, repo_dir = folder.absolute().parent, folder.absolute().parent.parent
    if snapshots.name != "snapshots" or not (repo_dir / "blobs").is_dir():
        return None
    kind, sep, rest = repo_dir.name.partition("--")
    if not sep or kind not in ("models", "datasets", "spaces") or "--" not in rest:
        return None
    return rest.replace("--", "/", 1)


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
    from dflash_ckpt.spec.resolve import as_int, fc_taps

    return Known(
        fc_taps=fc_taps(inventory, spec.dims.hidden_size),
        target_label=target.label if target else None,
        target_depth=as_int(target.num_hidden_layers) if target else None,
        target_vocab=as_int(target.vocab_size) if target else None,
        target_pad=as_int(target.pad_token_id) if target else None,
    )


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
