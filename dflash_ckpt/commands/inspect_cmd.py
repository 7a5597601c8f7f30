"""``inspect``'s report: the run (``run/inspect.run_inspect``) printed for people or as one document."""

from __future__ import annotations

import sys
from typing import Callable

from dflash_ckpt.json_out import print_document
from dflash_ckpt.rules import Severity
from dflash_ckpt.run.inspect import InspectRun


def report_inspect(run: Callable[[], InspectRun], *, json_out: bool, quiet: bool, strict: bool,
                   output_format: str = "json", annotations: str = "warnings", report: str | None = None) -> int:
    """Run, print the report or the document (``output_format``: json, github or sarif), write the
    ``--report`` file, return the exit code (an error that stops the run is the CLI's: its line, and
    with ``--json`` the envelope)."""
    from dflash_ckpt.commands.options import write_report_for

    result = run()
    if json_out:
        print_document(result.envelope(), output_format, annotations)
        write_report_for(report, result, quiet=quiet, json_out=True)
        return result.exit_code
    results = result.results
    shown = (Severity.ERROR, Severity.WARNING) if strict else (Severity.ERROR,)
    if quiet and not any(res.fatal is not None or any(f.severity in shown for f in res.findings) for res in results):
        write_report_for(report, result, quiet=quiet, json_out=False)  # -q with no error line: rich unimported
        return result.exit_code
    from dflash_ckpt.console import make_console
    from dflash_ckpt.commands.inspect_report import render_result, render_summary  # rich: people only

    console = make_console()
    if len(results) == 1:
        res = results[0]
        if res.fatal is not None:
            print(res.fatal.line(), file=sys.stderr)
        else:
            render_result(console, res, quiet=quiet, strict=strict)
    else:
        render_summary(console, results, quiet=quiet, strict=strict)
    write_report_for(report, result, quiet=quiet, json_out=False)
    return result.exit_code
