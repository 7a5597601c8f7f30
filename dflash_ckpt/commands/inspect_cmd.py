"""The body of ``dflash-ckpt inspect``."""

from __future__ import annotations

import sys

from dflash_ckpt.errors import DFlashCkptError
from dflash_ckpt.checks.inspection import InspectResult, inspect_sources, print_json
from dflash_ckpt.sources.base import Source
from dflash_ckpt.sources.resolve import open_source

#: Drafts checked at once. Each check is a handful of small requests (or local reads), so a few
#: threads hide network latency; more would only queue on the Hub's rate limits.
MAX_PARALLEL = 8


def run_inspect(
    drafts: list[str],
    *,
    target: str | None,
    revision: str | None,
    token: str | None,
    json_out: bool,
    quiet: bool,
    strict: bool,
) -> int:
    """Inspect every draft against the (optional) target; return the worst exit code."""
    target_src: Source | None = None
    if target is not None:
        target_src = open_source(target, token=token, role="target")  # InputError -> exit 2 in main
    results = _inspect_all(drafts, target_src, revision, token)
    code = max(r.exit_code(strict) for r in results)
    if json_out:
        if len(results) == 1:
            print_json(results[0].to_json(strict))
        else:
            print_json({
                "ok": all(not r.failed(strict) for r in results),
                "exit_code": code,
                "results": [r.to_json(strict) for r in results],
            })
        return code
    from dflash_ckpt.commands.output import make_console, render_result, render_summary  # rich: people only

    console = make_console()
    if len(results) == 1:
        res = results[0]
        if res.fatal is not None:
            print(f"error: {res.fatal}", file=sys.stderr)
        else:
            render_result(console, res, quiet=quiet, strict=strict)
    else:
        render_summary(console, results, quiet=quiet, strict=strict)
    return code


def _inspect_all(drafts: list[str], target_src: Source | None, revision: str | None, token: str | None) -> list[InspectResult]:
    """Every draft, several at a time when there are several; results in argument order."""
    if len(drafts) == 1:
        return [_inspect_one(drafts[0], target_src, revision, token)]
    from concurrent.futures import ThreadPoolExecutor  # noqa: PLC0415 - only for several drafts

    with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL, len(drafts)), thread_name_prefix="inspect") as pool:
        return list(pool.map(lambda arg: _inspect_one(arg, target_src, revision, token), drafts))


def _inspect_one(arg: str, target_src: Source | None, revision: str | None, token: str | None) -> InspectResult:
    try:
        src = open_source(arg, revision=revision, token=token, role="draft")
    except DFlashCkptError as err:
        from dflash_ckpt.rules import Finding, Severity

        res = InspectResult(label=arg, fatal=err)
        res.findings.append(Finding(err.code or "DF001", Severity.ERROR, err.message))
        return res
    return inspect_sources(src, target_src)
