"""``inspect`` as a function: source -> spec -> checks -> result, shared by every command; many
drafts at once (``inspect_many``) and the gate a run applies to their findings (``Gate``).

Above both ``checks`` and ``canonical``: it asks the checks, then normalize's plan which failing
readers a rewrite would fix (``normalize_fixes``), and the engines what vLLM is installed."""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from dflash_ckpt.checks import run_checks
from dflash_ckpt.checks.engines.reading import Verdict
from dflash_ckpt.checks.engines.registry import BY_KEY, READER_TITLES
from dflash_ckpt.checks.engines.verdicts import judge_readers
from dflash_ckpt.engine_runners.vllm_facts import reader_check_note as vllm_reader_note
from dflash_ckpt.engine_runners.vllm_facts import version_findings as vllm_version_findings
from dflash_ckpt.errors import DFlashCkptError, InputError
from dflash_ckpt.rules import Finding, Severity, finding
from dflash_ckpt.result import error_json
from dflash_ckpt.sources.base import Source
from dflash_ckpt.sources.resolve import open_source
from dflash_ckpt.draftspec.specs import DraftSpec, TargetSpec, build_spec, read_draft_spec, read_target_spec


#: Drafts checked at once. Each check is a handful of small requests (or local reads), so a few
#: threads hide network latency; more would only queue on the Hub's rate limits.
MAX_PARALLEL = 8


class InspectResult:
    """The outcome of inspecting one draft: what was read, what was found, what engines will do."""

    def __init__(self, label: str, fatal: DFlashCkptError | None = None) -> None:
        self.label = label
        self.draft: DraftSpec | None = None
        self.target: TargetSpec | None = None
        self.findings: list[Finding] = []
        self.readers: dict[str, Verdict] = {}
        self.fatal: DFlashCkptError | None = None
        self.bytes_read = 0
        #: Readers that fail now and would load the config ``normalize_command`` writes.
        self.normalize_fixes: set[str] = set()
        self.normalize_command: str | None = None
        #: engine -> argv that serves the pair (``checks.serve``), for a pair that passes.
        self.serve: dict[str, list[str]] = {}
        #: The commits a Hub draft and a Hub target resolved to (None for a local folder): the
        #: report names them (``report/``).
        self.commit: str | None = None
        self.target_commit: str | None = None
        if fatal is not None:
            self.set_fatal(fatal)

    def set_fatal(self, err: DFlashCkptError) -> None:
        """The input could not be read: the result holds the error, as its one finding too."""
        self.fatal = err
        self.findings.append(Finding(err.line_code, Severity.ERROR, err.text, err.path))

    def keep_findings(self, keep: Callable[[str], bool]) -> None:
        """Drop the findings whose code ``keep`` rejects (``--select``/``--ignore``); an unreadable
        input stays an error whatever is selected, as nothing past it was checked."""
        fatal_code = self.fatal.line_code if self.fatal is not None else None
        self.findings = [f for f in self.findings if keep(f.code) or f.code == fatal_code]

    def require_readers(self, keys: Iterable[str]) -> None:
        """``--require-engines``: each named reader that would not load the config is an error (DF144)."""
        if self.draft is None:
            return
        for key in keys:
            verdict = self.readers.get(key)
            if verdict is None or verdict.loads:
                continue
            fix = (f"; `{self.normalize_command}` writes a config it loads" if key in self.normalize_fixes
                   else "; `dflash-ckpt normalize` alone does not fix it (see `dflash-ckpt rules DF144`)")
            self.findings.append(finding(
                "DF144",
                f"required engine {key} ({READER_TITLES[key]}) would not load it: "
                f"{verdict.reason.removeprefix('fails: ')}{fix}",
                path=self.draft.where,
            ))

    def __repr__(self) -> str:
        state = "unreadable" if self.fatal is not None else "ok" if not self.failed() else "failed"
        return f"InspectResult({self.label!r}, {state}, findings={[f.code for f in self.findings]})"

    def unserved(self) -> dict[str, str]:
        """engine -> why it has no serve line, for each serving engine whose reader fails the draft
        (the serve lines leave it out), with the normalize line where that fixes it."""
        from dflash_ckpt.checks.engines.registry import SERVE_ENGINES

        out = {}
        for key in SERVE_ENGINES:
            verdict = self.readers.get(key)
            if verdict is None or verdict.loads:
                continue
            fix = (f"; serve the copy `{self.normalize_command}` writes" if key in self.normalize_fixes
                   and self.normalize_command else "")
            out[key] = f"no line: {READER_TITLES[key]} {verdict.reason.removeprefix('fails: ')}{fix}"
        return out

    def count(self, severity: Severity) -> int:
        return sum(1 for f in self.findings if f.severity == severity)

    def failed(self, strict: bool = False) -> bool:
        bad = {Severity.ERROR, Severity.WARNING} if strict else {Severity.ERROR}
        return self.fatal is not None or any(f.severity in bad for f in self.findings)

    def exit_code(self, strict: bool = False) -> int:
        if self.fatal is not None:
            return self.fatal.exit_code
        return 1 if self.failed(strict) else 0

    def to_json(self, strict: bool = False) -> dict[str, Any]:
        d = self.draft
        return {
            "draft": self.label,
            "ok": not self.failed(strict),
            "exit_code": self.exit_code(strict),
            "error": error_json(self.fatal),
            "layout": d.layout if d else None,
            "generation": d.generation if d else None,
            "block_layout": block_layout_json(d) if d else None,
            "resolved": d.resolved_json() if d else dict.fromkeys(("block_size", "mask_token_id", "target_layer_ids", "num_target_layers")),
            "sources": d.sources_json() if d else {},
            "target": self.target.to_json() if self.target else None,
            "findings": [f.to_json() for f in self.findings],
            "readers": {k: {**v.to_json(), "fixed_by_normalize": k in self.normalize_fixes,
                            **({"checked_against": vllm_reader_note()} if k == "vllm" else {}),
                            **facts_versions_json(k)}
                        for k, v in self.readers.items()},
            "normalize_command": self.normalize_command if self.normalize_fixes else None,
            "serve": self.serve if not self.failed(strict) else {},
            "counts": {s.value: self.count(s) for s in Severity},
            "bytes_read": self.bytes_read,
        }


def facts_versions_json(key: str) -> dict[str, Any]:
    """``facts_versions`` of a reader (the releases its record was read against) and, for vLLM,
    ``installed_is`` (``below``/``within``/``above`` that range, ``None`` when not installed)."""
    from dflash_ckpt.engine_runners.vllm_facts import installed_standing

    versions = BY_KEY[key].versions if key in BY_KEY else None
    out: dict[str, Any] = {"facts_versions": versions.to_json() if versions else None}
    if key == "vllm":
        out["installed_is"] = installed_standing()
    return out


def block_layout_json(spec: DraftSpec) -> dict[str, Any]:
    """The resolved block layout, with what each engine's path does with it (``checks.layout``)."""
    from dflash_ckpt.checks.layout import engine_paths
    from dflash_ckpt.draftspec.layout import layout_json

    paths = engine_paths(spec)
    return {**layout_json(spec.block_layout), "engines": {k: p.status for k, p in paths.items()}}


def inspect_sources(draft_src: Source, target_src: Source | None = None) -> InspectResult:
    """Check one draft (and its pairing with a target); input errors end up in ``fatal``."""
    draft: DraftSpec | None = None
    try:
        draft = read_draft_spec(draft_src)
        target = read_target_spec(target_src) if target_src is not None else None
    except DFlashCkptError as err:
        result = InspectResult(label=draft_src.label, fatal=err)
        result.commit = _hub_commit(draft_src)
        result.target_commit = _hub_commit(target_src) if target_src is not None else None
        result.draft = draft  # the draft read before the target failed, as the report shows it
        result.bytes_read = draft_src.bytes_read
        return result
    return inspect_specs(draft_src, draft, target_src, target)


def inspect_specs(draft_src: Source, draft: DraftSpec, target_src: Source | None = None,
                  target: TargetSpec | None = None) -> InspectResult:
    """inspect's report on specs already read from these sources (a run reads them once, in
    ``run/pair.open_pair``, and smoke-run asks for this report on the same specs)."""
    result = InspectResult(label=draft_src.label)
    result.commit = _hub_commit(draft_src)
    result.target_commit = _hub_commit(target_src) if target_src is not None else None
    result.draft, result.target = draft, target
    result.findings = run_checks(result.draft, result.target) + pin_finding(draft_src) + cached_layout_findings(draft_src, result.draft)
    result.findings += vllm_version_findings()  # DF430: the installed vLLM outside its record's versions
    result.readers = judge_readers(result.draft, result.target)
    if result.target is not None and target_src is not None and not result.failed():
        from dflash_ckpt.checks.serve import serve_commands

        ref = getattr(draft_src, "ref", None) if draft_src.kind == "hub" else None
        tref = getattr(target_src, "ref", None) if target_src.kind == "hub" else None
        result.serve = serve_commands(
            result.draft, result.target, result.readers,
            draft=ref.repo_id if ref is not None else draft_src.label,
            revision=getattr(draft_src, "commit", None) if ref is not None else None,
            target_name=tref.repo_id if tref is not None else target_src.label,
            target_revision=tref.revision if tref is not None else None)
    result.normalize_fixes, result.normalize_command = normalize_fixes(result.draft, result.target, result.readers)
    result.findings += normalize_finding(result)
    result.bytes_read = draft_src.bytes_read + (target_src.bytes_read if target_src else 0)
    return result


def _hub_commit(source: Source) -> str | None:
    commit = getattr(source, "commit", None) if source.kind == "hub" else None
    return commit if isinstance(commit, str) else None


def cached_layout_findings(source: Source, spec: DraftSpec) -> list[Finding]:
    """DF319: other cached commits of the draft's Hub repo that are another draft (no request made)."""
    folder = getattr(source, "folder", None)
    if source.kind != "hub" and not (isinstance(folder, Path) and Path(os.path.realpath(folder)).parent.name == "snapshots"):
        return []  # a local folder outside any Hub cache (``.../snapshots/<commit>``): the Hub layer stays unimported
    from dflash_ckpt.checks.hub_layout import hub_layout_findings
    from dflash_ckpt.sources.hub.snapshots import other_cached_configs

    commit, others = other_cached_configs(source)
    if not commit:
        return []
    # each other commit as its file is written (no speculators view), as the draft's fingerprint always was
    specs = [(other, build_spec(cfg, label=f"{source.label}@{other}", view=False)) for other, cfg in others]
    return hub_layout_findings(source.label, commit, spec, specs)


def pin_finding(source: Source) -> list[Finding]:
    """DF314: a Hub draft named without a commit, with the commit it resolved to."""
    commit = getattr(source, "commit", None)
    ref = getattr(source, "ref", None)
    if source.kind != "hub" or not isinstance(commit, str) or ref is None:
        return []
    from dflash_ckpt.sources.hub.cache import is_commit

    if is_commit(ref.revision):
        return []
    asked = f"revision {ref.revision!r}" if ref.revision else "no revision"
    return [finding(
        "DF314",
        f"{source.label}: given with {asked}, it resolved to commit {commit}; Hub drafts have changed "
        f"layout between revisions (z-lab/dflash#152), pin it as {ref.repo_id}@{commit}",
        path=source.label,
    )]


def normalize_finding(res: InspectResult) -> list[Finding]:
    """DF148: the readers that cannot load the draft as published and would load what
    ``normalize_command`` writes, each with why; a warning, so ``-q`` and ``--strict`` see what the
    readers table alone showed (and why that engine has no serve line)."""
    if not res.normalize_fixes or not res.normalize_command or res.draft is None:
        return []
    why = "; ".join(f"{READER_TITLES[key]} cannot load it as published ({res.readers[key].reason.removeprefix('fails: ')})"
                    for key in res.readers if key in res.normalize_fixes)
    return [finding("DF148", f"{why}; `{res.normalize_command}` writes a config it loads (weights untouched)",
                    path=res.draft.where)]


def normalize_fixes(spec: DraftSpec, target: TargetSpec | None, readers: dict[str, Verdict]) -> tuple[set[str], str | None]:
    """Which failing readers would load the config ``dflash-ckpt normalize`` writes, and the command.

    The plan is computed as normalize computes it (pure, nothing written), first from the config
    alone, then, when that needs a missing ``num_target_layers``, with the target's depth (the
    command then names ``--target``). A config normalize refuses (a conflict, a missing trained
    key) fixes nothing without the user's values, so no reader is counted.
    """
    failing = [k for k, v in readers.items() if not v.loads]
    if not failing:
        return set(), None
    from dflash_ckpt.canonical.plan import Known, plan_normalize
    from dflash_ckpt.draftspec.specs import as_int

    attempts: list[tuple[Known, str]] = [(Known(), f"dflash-ckpt normalize {shlex.quote(spec.label)} OUT")]
    if target is not None:
        attempts.append((Known(target_depth=as_int(target.num_hidden_layers), target_vocab=as_int(target.vocab_size)),
                         f"dflash-ckpt normalize {shlex.quote(spec.label)} OUT --target {shlex.quote(target.label)}"))
    for known, command in attempts:
        try:
            plan = plan_normalize(spec.document, where=spec.where, known=known)
        except DFlashCkptError:
            continue
        after = judge_readers(build_spec(plan.after, label=spec.label, where=spec.where, weights=spec.weights), target)
        fixed = {k for k in failing if after[k].loads}
        return fixed, (command if fixed else None)
    return set(), None


@dataclass
class Gate:
    """What counts against a draft beyond its errors: ``--strict``, ``--select``/``--ignore``
    (rule codes or their prefixes, as ruff takes them) and ``--require-engines``."""

    strict: bool = False
    select: list[str] = field(default_factory=list)
    ignore: list[str] = field(default_factory=list)
    require_engines: list[str] = field(default_factory=list)

    def keeps(self, code: str) -> bool:
        selected = not self.select or any(code.startswith(p) for p in self.select)
        return selected and not any(code.startswith(p) for p in self.ignore)

    def apply(self, res: InspectResult) -> None:
        """Filter the findings, then add the engine gate's (asked for by name, never filtered out)."""
        if self.select or self.ignore:
            res.keep_findings(self.keeps)
        res.require_readers(self.require_engines)


def inspect_many(drafts: list[str], target_src: Source | None, revision: str | None, token: str | None) -> list[InspectResult]:
    """Every draft against one target, several at a time when there are several; results in
    argument order; whatever goes wrong with one draft is its result's error (``fatal``)."""
    if len(drafts) == 1:
        return [_inspect_one(drafts[0], target_src, revision, token)]
    from concurrent.futures import ThreadPoolExecutor  # noqa: PLC0415 - only for several drafts

    one: Callable[[str], InspectResult] = lambda arg: _inspect_one(arg, target_src, revision, token)  # noqa: E731
    with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL, len(drafts)), thread_name_prefix="inspect") as pool:
        return list(pool.map(one, drafts))


def _inspect_one(arg: str, target_src: Source | None, revision: str | None, token: str | None) -> InspectResult:
    """One draft; whatever goes wrong with it is its result's error, never the whole run's."""
    try:
        src = open_source(arg, revision=revision, token=token, role="draft")
        return inspect_sources(src, target_src)
    except DFlashCkptError as err:
        return InspectResult(label=arg, fatal=err)
    except Exception as err:  # noqa: BLE001 - one draft's bug must not hide the others' reports
        return InspectResult(label=arg, fatal=InputError(
            f"could not be inspected ({type(err).__name__}: {err}); please report this with the file", path=arg))
