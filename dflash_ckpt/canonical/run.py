"""The ``normalize`` run: read the draft (config.json and safetensors headers, never tensor data),
plan the edits (``canonical.plan``), apply them to the text (``canonical.config_text``), check the
result with inspect's checks, and only then write: a new OUT folder (``canonical.build``), the
draft's config.json in place, or nothing (``--check``, ``--dry-run``).

``normalize_into`` is the entry point ``run/normalize.py`` (the command) and
``probe-taps --write`` share; ``Outcome`` is what a run found and did (its ``--json`` document).
"""

from __future__ import annotations

import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ClassVar

from dflash_ckpt.result import ResultShape

if TYPE_CHECKING:
    from dflash_ckpt.checks.engines.reading import Verdict
    from dflash_ckpt.errors import DFlashCkptError
    from dflash_ckpt.canonical.fsops import BuildReport
    from dflash_ckpt.canonical.plan import Known, Overrides, Plan
    from dflash_ckpt.rules import Finding
    from dflash_ckpt.sources.base import Source
    from dflash_ckpt.sources.weights import WeightInventory
    from dflash_ckpt.draftspec.specs import DraftSpec, TargetSpec


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
    #: DRAFT's links to files outside it: "copy" (their content) or "link" (canonical/fsops.py)
    external_links: str = "copy"

    @property
    def mode(self) -> str:
        if self.check:
            return "check"
        if self.dry_run:
            return "dry-run"
        return "in-place" if self.in_place else "out"


@dataclass
class Outcome(ResultShape):
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
    command: ClassVar[str] = "normalize"

    def run_error(self) -> DFlashCkptError | None:
        return self.error

    def to_json(self) -> dict[str, Any]:
        """The run's result (``results[0]`` of the envelope; its refusal is the envelope's ``error``)."""
        plan, req = self.plan, self.req
        return {
            "draft": self.label,
            "draft_path": str(self.draft_dir) if self.draft_dir else None,
            "out": str(req.out) if req.out else None,
            "mode": req.mode,
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


def normalize_into(req: Request, oc: Outcome, *, guard: Callable[[Request, Path | None], None] | None = None,
                   copy_bar: Callable[[int], Any] | None = None) -> None:
    """Fill ``oc`` with the run's findings and what it wrote; raises on a refusal (the caller
    unlocks OUT: ``run.normalize.execute``). ``guard(req, folder)`` may refuse the
    draft before it is opened (folder None) and once its folder is known; ``copy_bar(total)``
    is the progress bar of a large copy (none with ``-q``/``--json``)."""
    from dflash_ckpt.checks import run_checks
    from dflash_ckpt.canonical.config_text import ConfigText
    from dflash_ckpt.errors import CheckFailed
    from dflash_ckpt.canonical.plan import plan_normalize
    from dflash_ckpt.checks.engines.verdicts import judge_readers
    from dflash_ckpt.rules import Severity
    from dflash_ckpt.sources.resolve import open_source
    from dflash_ckpt.draftspec.specs import build_spec, read_config, read_target_spec
    from dflash_ckpt.sources.weights import load_inventory
    from dflash_ckpt.canonical.config_text import unified_diff
    from dflash_ckpt.canonical.outdir import require_new_parents, make_parents, missing_parents, remove_empty

    if guard is not None:
        guard(req, None)
    config_src, weights_src = _open_draft(req)
    draft_dir, label = config_src.local_dir, config_src.label
    oc.draft_dir, oc.label = draft_dir, label
    if guard is not None:
        guard(req, draft_dir)
    if req.out is not None:
        from dflash_ckpt.canonical.fsops import require_out_path

        assert draft_dir is not None
        if missing_parents(req.out):
            require_new_parents(draft_dir, req.out)
        else:
            require_out_path(draft_dir, req.out, force=req.force)
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
    oc.findings = run_checks(oc.after, oc.target)  # located at the planned config (its spec's where)

    errors = [f for f in oc.findings if f.severity == Severity.ERROR]
    if errors:
        codes = ", ".join(sorted({f.code for f in errors}))
        raise CheckFailed(
            f"the normalized config fails {len(errors)} check(s) ({codes}); nothing written "
            "(`dflash-ckpt inspect` explains each, `dflash-ckpt rules CODE` the fix)", path=label
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
            from dflash_ckpt.canonical.fsops import write_in_place

            assert draft_dir is not None
            oc.backup = write_in_place(draft_dir, new, raw, backup=req.backup, force=req.force)
            oc.written = True
        return
    assert req.out is not None and draft_dir is not None
    from dflash_ckpt.canonical.build import build_out
    from dflash_ckpt.canonical.fsops import require_out_path

    created = make_parents(req.out)
    try:
        if created:
            require_out_path(draft_dir, req.out, force=req.force)
        actions = _plan_out(req, draft_dir)
        mode = stat.S_IMODE((draft_dir / "config.json").stat().st_mode)
        progress = None if req.quiet or req.json_out else copy_bar
        oc.files = build_out(draft_dir, req.out, new, mode, actions, progress=progress, force=req.force)
    except BaseException:
        remove_empty(created)
        raise
    oc.written = True


def _open_draft(req: Request) -> tuple[Source, Source]:
    """Where config.json is read (and written) from, and where the weight headers are read.

    OUT needs every file on this machine; ``--in-place`` needs config.json in a folder (for a Hub
    id: its cache snapshot, fetching only that file); ``--check`` and ``--dry-run`` read the
    config and the headers wherever they are, downloading no weights.
    """
    from dflash_ckpt.sources.local import LocalSource
    from dflash_ckpt.sources.base import user_path
    from dflash_ckpt.sources.resolve import local_folder, looks_like_path, open_source

    local = looks_like_path(req.draft) or user_path(req.draft).exists()
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
    from dflash_ckpt.canonical.fsops import require_free_space, plan_files

    assert req.out is not None
    actions = plan_files(draft_dir, req.out, copy_weights=req.copy, external_links=req.external_links)
    require_free_space(req.out.absolute().parent, sum(a.size for a in actions if a.how == "copy"))
    return actions


def _known(inventory: WeightInventory, spec: DraftSpec, target: TargetSpec | None) -> Known:
    from dflash_ckpt.canonical.plan import Known
    from dflash_ckpt.draftspec.specs import as_int, fc_taps

    return Known(
        fc_taps=fc_taps(inventory, spec.dims.hidden_size),
        target_label=target.label if target else None,
        target_depth=as_int(target.num_hidden_layers) if target else None,
        target_vocab=as_int(target.vocab_size) if target else None,
        target_pad=as_int(target.pad_token_id) if target else None,
    )
