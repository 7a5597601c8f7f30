"""The body of ``dflash-ckpt inspect``: its options parsed, ``run_inspect`` (no printing), the report."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Sequence

from dflash_ckpt.inspection import Gate, InspectResult, inspect_many
from dflash_ckpt.commands.json_out import print_document
from dflash_ckpt.errors import DFlashCkptError, UsageError
from dflash_ckpt.result import ResultShape
from dflash_ckpt.rules import Finding
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


def run_inspect(draft: str | Sequence[str], target: str | None = None, *, revision: str | None = None,
                token: str | None = None, strict: bool = False, select: Sequence[str] = (), ignore: Sequence[str] = (),
                require_engines: Sequence[str] = ()) -> InspectRun:
    """``dflash-ckpt inspect DRAFT... [--target T]``: keywords are its long options (``select``,
    ``ignore``, ``require_engines``: lists of codes or names, comma lists allowed). Prints nothing;
    raises ``DFlashCkptError`` for a usage error or an unreadable target."""
    drafts = [draft] if isinstance(draft, str) else list(draft)
    gate = Gate(strict=strict, select=parse_codes(list(select), "--select"), ignore=parse_codes(list(ignore), "--ignore"),
                require_engines=parse_engines(list(require_engines)))
    target_src = open_source(target, token=token, role="target") if target is not None else None
    results = inspect_many(drafts, target_src, revision, token)
    for res in results:
        gate.apply(res)
    return InspectRun(results, strict=strict)


def report_inspect(run: Callable[[], InspectRun], *, json_out: bool, quiet: bool, strict: bool,
                   output_format: str = "json", annotations: str = "warnings") -> int:
    """Run, print the report or the document (``output_format``: json, github or sarif), return the
    exit code (an error that stops the run is the CLI's: its line, and with ``--json`` the envelope)."""
    result = run()
    if json_out:
        print_document(result.envelope(), output_format, annotations)
        return result.exit_code
    from dflash_ckpt.commands.output import make_console, render_result, render_summary  # rich: people only

    console = make_console()
    results = result.results
    if len(results) == 1:
        res = results[0]
        if res.fatal is not None:
            print(res.fatal.line(), file=sys.stderr)
        else:
            render_result(console, res, quiet=quiet, strict=strict)
    else:
        render_summary(console, results, quiet=quiet, strict=strict)
    return result.exit_code
