"""``inspect`` as a function: source -> spec -> checks -> result, shared by every command."""

from __future__ import annotations

import json
import sys
from typing import Any

from dflash_ckpt.checks import run_checks
from dflash_ckpt.errors import DFlashCkptError
from dflash_ckpt.checks.engines import Verdict, judge_readers
from dflash_ckpt.rules import Finding, Severity
from dflash_ckpt.sources.base import Source
from dflash_ckpt.sources.resolve import open_source
from dflash_ckpt.spec.resolve import DraftSpec, TargetSpec, load_draft, load_target

#: Bumped when a field of the JSON document changes meaning or is removed.
JSON_SCHEMA_VERSION = 1


class InspectResult:
    """The outcome of inspecting one draft: what was read, what was found, what engines will do."""

    def __init__(self, label: str, fatal: DFlashCkptError | None = None) -> None:
        self.label = label
        self.draft: DraftSpec | None = None
        self.target: TargetSpec | None = None
        self.findings: list[Finding] = []
        self.readers: dict[str, Verdict] = {}
        self.fatal = fatal
        self.bytes_read = 0

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
            "schema_version": JSON_SCHEMA_VERSION,
            "draft": self.label,
            "ok": not self.failed(strict),
            "exit_code": self.exit_code(strict),
            "error": None if self.fatal is None else {"code": self.fatal.code, "message": self.fatal.message},
            "layout": d.layout if d else None,
            "generation": d.generation if d else None,
            "resolved": d.resolved_json() if d else dict.fromkeys(("block_size", "mask_token_id", "target_layer_ids", "num_target_layers")),
            "sources": d.sources_json() if d else {},
            "target": self.target.to_json() if self.target else None,
            "findings": [f.to_json() for f in self.findings],
            "readers": {k: v.to_json() for k, v in self.readers.items()},
            "counts": {s.value: self.count(s) for s in Severity},
            "bytes_read": self.bytes_read,
        }


def print_json(doc: Any) -> None:
    """One JSON document on stdout (rich is not imported on the machine-readable path)."""
    sys.stdout.write(json.dumps(doc, indent=2) + "\n")


def inspect_sources(draft_src: Source, target_src: Source | None = None) -> InspectResult:
    """Check one draft (and its pairing with a target); input errors end up in ``fatal``."""
    result = InspectResult(label=draft_src.label)
    try:
        result.draft = load_draft(draft_src)
        if target_src is not None:
            result.target = load_target(target_src)
    except DFlashCkptError as err:
        result.fatal = err
        result.findings.append(Finding(err.code or "DF001", Severity.ERROR, err.message))
        result.bytes_read = draft_src.bytes_read
        return result
    result.findings = run_checks(result.draft, result.target)
    result.readers = judge_readers(result.draft, result.target)
    result.bytes_read = draft_src.bytes_read + (target_src.bytes_read if target_src else 0)
    return result


def inspect_checkpoint(
    draft: str,
    target: str | None = None,
    *,
    revision: str | None = None,
    token: str | None = None,
    target_source: Source | None = None,
) -> InspectResult:
    """Open ``draft`` (and ``target``) from the command line's arguments and check them."""
    try:
        draft_src = open_source(draft, revision=revision, token=token, role="draft")
        if target_source is None and target is not None:
            target_source = open_source(target, token=token, role="target")
    except DFlashCkptError as err:
        res = InspectResult(label=draft, fatal=err)
        res.findings.append(Finding(err.code or "DF001", Severity.ERROR, err.message))
        return res
    return inspect_sources(draft_src, target_source)
