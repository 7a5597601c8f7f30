"""The body of ``dflash-ckpt inspect``."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from typing import Any, Callable

from dflash_ckpt.checks.inspection import InspectResult, inspect_sources
from dflash_ckpt.commands.json_out import document, print_json
from dflash_ckpt.errors import DFlashCkptError, InputError, UsageError
from dflash_ckpt.sources.base import Source
from dflash_ckpt.sources.resolve import open_source

#: Drafts checked at once. Each check is a handful of small requests (or local reads), so a few
#: threads hide network latency; more would only queue on the Hub's rate limits.
MAX_PARALLEL = 8

_CODE_PREFIX = re.compile(r"DF\d{0,3}")


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
    from dflash_ckpt.checks.engines import READER_TITLES

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


def run_inspect(
    drafts: list[str],
    *,
    target: str | None,
    revision: str | None,
    token: str | None,
    json_out: bool,
    quiet: bool,
    gate: Gate,
    output_format: str = "json",
) -> int:
    """Inspect every draft against the (optional) target; return the worst exit code.

    With ``json_out`` the document is printed in ``output_format`` (json, github or sarif)."""
    target_src: Source | None = None
    if target is not None:
        try:
            target_src = open_source(target, token=token, role="target")
        except DFlashCkptError as err:
            if not json_out:
                raise  # the CLI prints its line, exit 2
            _emit(envelope([], gate.strict, err.exit_code, error=err), output_format)
            print(err.line(), file=sys.stderr)
            return err.exit_code
    results = _inspect_all(drafts, target_src, revision, token)
    for res in results:
        gate.apply(res)
    code = max(r.exit_code(gate.strict) for r in results)
    if json_out:
        _emit(envelope(results, gate.strict, code), output_format)
        return code
    from dflash_ckpt.commands.output import make_console, render_result, render_summary  # rich: people only

    console = make_console()
    if len(results) == 1:
        res = results[0]
        if res.fatal is not None:
            print(res.fatal.line(), file=sys.stderr)
        else:
            render_result(console, res, quiet=quiet, strict=gate.strict)
    else:
        render_summary(console, results, quiet=quiet, strict=gate.strict)
    return code


def _emit(doc: dict[str, Any], output_format: str) -> None:
    """The run's document on stdout: as JSON, or as GitHub annotations or SARIF (``output_formats``)."""
    if output_format == "json":
        print_json(doc)
        return
    from dflash_ckpt.output_formats import render

    sys.stdout.write(render(doc, output_format))


def envelope(results: list[InspectResult], strict: bool, code: int, error: DFlashCkptError | None = None) -> dict[str, Any]:
    """The one JSON document of a run, the same shape for one draft or many; ``error`` is what
    stopped the run before any draft was checked (an unreadable target)."""
    return document(
        "inspect",
        ok=error is None and all(not r.failed(strict) for r in results),
        exit_code=code,
        error=None if error is None else {"code": error.line_code, "message": error.message},
        results=[r.to_json(strict) for r in results],
    )


def _inspect_all(drafts: list[str], target_src: Source | None, revision: str | None, token: str | None) -> list[InspectResult]:
    """Every draft, several at a time when there are several; results in argument order."""
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
            f"{arg}: could not be inspected ({type(err).__name__}: {err}); please report this with the file"))
