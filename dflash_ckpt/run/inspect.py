"""``inspect``'s run: its code and engine options parsed, every draft checked under one gate.

``run_inspect`` takes ``run/options.InspectOptions`` and returns an ``InspectRun`` (a result per
draft, in argument order); it prints nothing. The checks themselves are ``inspection.py``;
the report is ``commands/inspect_cmd.py``'s.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, ClassVar

from dflash_ckpt.inspection import Gate, InspectResult, inspect_many
from dflash_ckpt.errors import DFlashCkptError, UsageError
from dflash_ckpt.result import ResultShape
from dflash_ckpt.rules import Finding
from dflash_ckpt.run.inspect_options import InspectOptions
from dflash_ckpt.sources.resolve import open_source

_CODE_PREFIX = re.compile(r"DF\d{0,3}")


def parse_codes(values: list[str], option: str) -> list[str]:
    """``DF2,DF101`` (repeatable, comma-separated) as code prefixes; each must match a rule."""
    from dflash_ckpt.rules import RULES

    out: list[str] = []
    for part in (p.strip().upper() for v in values for p in v.split(",")):
        if not part:
            continue
        if part == "ALL":
            part = "DF"
        if not _CODE_PREFIX.fullmatch(part) or not any(code.startswith(part) for code in RULES):
            raise UsageError(f"{option} {part}: no rule code starts with it; `dflash-ckpt rules` lists them (a prefix such as DF2 takes a group)")
        out.append(part)
    return out


def parse_engines(values: list[str]) -> list[str]:
    """``sglang,vllm`` (repeatable) as reader keys; an unknown name is a usage error listing them."""
    from dflash_ckpt.checks.engines.registry import READER_TITLES

    out: list[str] = []
    for part in (p.strip().lower() for v in values for p in v.split(",")):
        if not part:
            continue
        if part == "all":
            out += [k for k in READER_TITLES if k not in out]
            continue
        if part not in READER_TITLES:
            raise UsageError(f"--require-engines: unknown engine {part!r}; give some of {', '.join(READER_TITLES)} (or all)")
        if part not in out:
            out.append(part)
    return out


@dataclass
class InspectRun(ResultShape):
    """One ``inspect`` run: a result per draft (argument order) under one gate."""

    command: ClassVar[str] = "inspect"
    results: list[InspectResult]
    strict: bool = False

    @property
    def exit_code(self) -> int:
        return max(r.exit_code(self.strict) for r in self.results)

    @property
    def findings(self) -> list[Finding]:
        return [f for r in self.results for f in r.findings]

    def to_json(self) -> dict[str, Any]:
        """The draft's result; a run over several drafts has one each (``envelope()["results"]``)."""
        if len(self.results) != 1:
            raise ValueError(f"{len(self.results)} drafts were inspected: read envelope()['results']")
        return self.results[0].to_json(self.strict)

    def results_json(self) -> list[dict[str, Any]]:
        return [r.to_json(self.strict) for r in self.results]

    def run_error(self) -> DFlashCkptError | None:
        """The first draft that could not be read (exit 2); each result carries its own too."""
        return next((r.fatal for r in self.results if r.fatal is not None), None)


def run_inspect(opts: InspectOptions) -> InspectRun:
    """``dflash-ckpt inspect DRAFT... [--target T]``. Prints nothing; raises ``DFlashCkptError``
    for a usage error or an unreadable target (an unreadable draft is a result, exit 2)."""
    drafts = [opts.draft] if isinstance(opts.draft, str) else list(opts.draft)
    gate = Gate(strict=opts.strict, select=parse_codes(list(opts.select), "--select"),
                ignore=parse_codes(list(opts.ignore), "--ignore"), require_engines=parse_engines(list(opts.require_engines)))
    target_src = open_source(opts.target, token=opts.token, role="target") if opts.target is not None else None
    results = inspect_many(drafts, target_src, opts.revision, opts.token)
    for res in results:
        gate.apply(res)
    return InspectRun(results, strict=opts.strict)


__all__ = ["InspectOptions", "InspectRun", "parse_codes", "parse_engines", "run_inspect"]
