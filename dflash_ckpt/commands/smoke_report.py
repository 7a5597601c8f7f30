"""The rich report of ``smoke-run``: settings, a table per prompt, the histogram, findings, verdict."""

from __future__ import annotations

from typing import Any, Callable

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from dflash_ckpt.draftspec.quant import summary_line
from dflash_ckpt.console import indented, print_error_lines, print_line, print_stacked, render_findings, safe, table_width
from dflash_ckpt.commands.inspect_report import render_result, render_serve
from dflash_ckpt.checks.run_findings import missing_taps, probe_taps_command
from dflash_ckpt.rules import Severity
from dflash_ckpt.run.smoke_result import SmokeResult
from dflash_ckpt.commands.engine_report import num, engine_line, render_comparison
from dflash_ckpt.commands.evidence_report import acceptance_words, confidence_lines, suite_lines

LOSSLESS_TEXT = {"identical": "[green]same[/]", "tie": "[yellow]tie[/]", "differs": "[bold red]DIFFERS[/]",
                 "skipped": "[bold red]overflow[/]", "sampled": "sampled"}
#: Every column of the table, with the line of the legend printed under it (T = target only,
#: D = DFlash).
COLUMN_LEGEND = {
    "prompt": "the prompt's name",
    "new": "new tokens generated (the same count for T and D when the outputs match)",
    "fwd T/D": "target forward passes, T / D (T: one per token; D: one prefill per prompt, then one verify of a "
               "whole block per DFlash step, the steps the histogram counts)",
    "tau/acc": "tau = mean tokens per D step (bonus included); acc = mean drafts accepted per step (tau - 1)",
    "T tok/s": "T's decode speed: 1 / the median one-token step, timed over a short window",
    "D tok/s": "D's decode speed: tau / the median draft+verify step",
    "speedup": "D tok/s / T tok/s, measured side by side; withheld (—) when above tau (DF406) or on too little "
               "evidence (DF408)",
    "output": "D's tokens against T's: same, tie (first difference at a near tie), DIFFERS, or overflow",
}
COLUMNS = tuple(COLUMN_LEGEND)


def render_smoke(console: Console, res: SmokeResult, *, quiet: bool = False, show_text: bool = False) -> None:
    if quiet:
        render_error_lines(console, res)
        return
    if res.refused:
        assert res.precheck is not None
        render_result(console, res.precheck)
        weights = any(f.code == "DF413" for f in res.precheck.findings)
        console.print("[bold red]REFUSED[/]  the pair fails " + ("the weight check (DF413)" if weights else "inspect's checks")
                      + "; fix the errors above before running it")
        if missing_taps(res.precheck.findings):
            console.print(f"target_layer_ids is missing: measure it with [bold]{safe(probe_taps_command(res.draft_label, res.target_label))}[/]")
        return
    console.print(
        f"[bold]{safe(res.draft_label)}[/] on [bold]{safe(res.target_label)}[/]  device {res.device}  "
        f"backend {res.backend}  "
        f"draft {_dtype_note(res.draft_dtype, res.draft_dtype_stored)}  "
        f"target {_dtype_note(res.target_dtype, res.target_dtype_stored)}  block {res.block_size}{_layout_note(res)}  "
        f"chat template {'on' if res.chat_template else 'off'}"
        + (f"  CUDA graphs (captured in {res.capture_s:.2f} s, not in any figure)" if res.cuda_graphs else "")
        + _fallback_note(res)
        + (f"  {'AVX2 bf16 kernel' if res.cpu_linear == 'avx2-kernel' else 'prepacked weights'} ({res.prepacked_weights}, {res.prepack_s:.2f} s,"
           " not in any figure)" if res.prepacked_weights else "")
    )
    if res.sampled:
        console.print(sampling_line(res))
    if res.quantization is not None:
        console.print(safe(summary_line(res.quantization)))
    if res.precheck is not None:
        for f in res.precheck.findings:
            if f.severity == Severity.WARNING:
                print_line(console, f.line(res.draft_label))
    rows = _rows(res)
    table = Table(title=f"smoke-run, {res.backend} backend", title_justify="left", show_edge=False, caption=legend(), caption_justify="left")
    for col in COLUMNS:
        left = col in ("prompt", "output")
        table.add_column(col, justify="left" if left else "right", no_wrap=col != "prompt", overflow="fold",
                         min_width=8 if col == "prompt" else None)
    for i, row in enumerate(rows):
        table.add_row(*row, end_section=len(res.runs) > 1 and i == len(rows) - 1)
    if table_width(COLUMNS, rows) <= console.width:
        console.print(table)
    else:  # too narrow for the columns: one block per prompt, so no figure is ever cut
        render_stacked(console, res.backend, rows)
    if show_text:
        render_texts(console, res)
    stats = res.overall()
    if stats["steps"]:
        console.print(_histogram(stats["histogram"], stats["steps"], stats["target_forwards"]["dflash"]))
    evidence = res.evidence()
    for line in confidence_lines(evidence) + suite_lines(evidence):
        console.print(line, markup=False, highlight=False)
    if (line := engine_line(res)) is not None:
        console.print(line)
    render_comparison(console, res)
    render_findings(console, res.findings)
    console.print(verdict_line(res))
    if res.serve:  # what to run next, as inspect shows it (and --json 'serve' holds)
        render_serve(console, res.serve, res.precheck.unserved() if res.precheck is not None else None)


def _rows(res: SmokeResult) -> list[list[str]]:
    """The table's rows (markup in the prompt and output cells): one per prompt, then overall."""
    block = res.verify_width or res.block_size or 1
    enough = res.evidence().enough  # below the minimum of evidence no speedup is shown (DF408)
    rows = [[safe(run.prompt.name), *_cells(run.figures(block), enough), LOSSLESS_TEXT[run.lossless.status]]
            for run in res.runs]
    if len(res.runs) > 1:
        rows.append(["[bold]overall[/]", *_cells(res.overall(), enough), "sampled" if res.sampled else _matched(res, "match" if any(
            r.lossless.status == "tie" for r in res.runs) else "same")])
    return rows


def _matched(res: SmokeResult, word: str) -> str:
    """``3/3 same``: the prompts whose outputs match, a tie counted as a match and named
    (``16/16 match (1 tie)``): one count for the table's overall row and the verdict line alike."""
    ties = sum(1 for r in res.runs if r.lossless.status == "tie")
    same = sum(1 for r in res.runs if r.lossless.status == "identical") + ties
    return f"{same}/{len(res.runs)} {word}" + (f" ({ties} tie{'s' if ties > 1 else ''})" if ties else "")


def render_stacked(console: Console, backend: str | None, rows: list[list[str]]) -> None:
    """The table for a terminal narrower than its columns: a line per prompt, then the legend."""
    print_stacked(console, f"smoke-run, {backend} backend", list(COLUMNS), rows)
    console.print(legend(), markup=False, highlight=False)


def legend() -> str:
    """The legend under the table: T and D, then one line per column."""
    width = max(map(len, COLUMN_LEGEND))
    lines = ["T = target only, D = DFlash"]
    lines += [f"{escape(col):<{width}}  {escape(text)}" for col, text in COLUMN_LEGEND.items() if col != "prompt"]
    return "\n".join(lines)


def render_texts(console: Console, res: SmokeResult) -> None:
    """``--show-text``: each prompt's DFlash output as text, and the target's where it differs."""
    for run in res.runs:
        console.print(f"[bold]{safe(run.prompt.name)}[/] DFlash output ({len(run.dflash.tokens)} tokens):")
        console.print(indented(run.dflash_text), markup=False, highlight=False)
        if run.target_text != run.dflash_text and run.lossless.status != "sampled":
            console.print(f"[bold]{safe(run.prompt.name)}[/] target-only output ({len(run.target.tokens)} tokens):")
            console.print(indented(run.target_text), markup=False, highlight=False)


def _cells(fig: dict[str, Any], enough: bool = True) -> list[str]:
    fwd = fig["target_forwards"]
    return [
        str(fig["new_tokens"]),
        f"{fwd['target_only']}/{fwd['dflash']}",
        f"{num(fig['tau'])}/{num(fig['accepted_per_step'])}",
        num(fig["target_tok_s"], "{:.1f}"),
        num(fig["dflash_tok_s"], "{:.1f}"),
        num(fig["speedup"] if enough else None, "{:.2f}x"),
    ]


def _histogram(hist: dict[str, int], steps: int, fwd: int) -> str:
    """One line: acceptance length -> steps, as a compact bar per length. The header says how
    the steps relate to the table's fwd D (one prefill per prompt more)."""
    width = 20
    parts = []
    top = max(hist.values()) or 1
    for length, count in hist.items():
        bar = "█" * max(1 if count else 0, round(width * count / top))
        parts.append(f"{length:>2} {bar:<{width}} {count}")
    head = (f"acceptance lengths (tokens per step, bonus included) over {steps} DFlash steps "
            f"(the table's fwd D, {fwd}, counts these and each prompt's prefill):")
    return head + "\n  " + "\n  ".join(parts)


def verdict_line(res: SmokeResult) -> str:
    stats = res.overall() if res.runs else None
    if stats:
        word, tau, speed = acceptance_words(res, stats)
    else:
        word, tau, speed = None, "tau —", "—"
    status = word or ("[bold green]PASS[/]" if res.exit_code == 0 else "[bold red]FAIL[/]")
    against = " (against the dequantized target)" if res.quantization is not None else ""
    outputs = (f"outputs sampled ({res.sampling.rule}; lossless as distributions: tests/test_sampling_lossless.py)"
               if res.sampled else f"outputs match on {_matched(res, 'prompt(s)')}{against}")
    return f"{status}  {tau}, {outputs}, speedup {speed}"


def sampling_line(res: SmokeResult) -> str:
    """The sampled run's settings, its rule and the engines that verify by it (greedy runs print
    no such line: their report is unchanged)."""
    s = res.sampling
    parts = [f"T {s.temperature:g}", f"top-p {s.top_p:g}", f"top-k {s.top_k}" if s.top_k else "top-k off", f"seed {s.seed}"]
    source = " from generation_config.json" if s.source == "generation_config.json" else ""
    return safe(f"sampling{source}: {', '.join(parts)}, rule {s.rule} (engines: {'; '.join(s.engines())}); "
                "eager loop; output: one draw, not compared with T's")


def _dtype_note(ran: str | None, stored: str | None) -> str:
    """The dtype a model ran in against the one its weights are stored in."""
    if stored is None or stored == ran:
        return f"{ran} (as stored)" if stored else str(ran)
    return f"{ran} (stored {stored})"


def render_error_lines(console: Console, res: SmokeResult) -> None:
    findings = list(res.precheck.findings) if res.refused and res.precheck else []
    print_error_lines(console, findings + res.findings, res.draft_label)


def _layout_note(res: Any) -> str:
    """`` anchor-first`` (or the layout ``--layout`` forced) after the block size; 1+N, the
    layout of every z-lab draft, goes without saying."""
    if res.layout and (res.layout != "1+N" or res.layout_source == "--layout"):
        return f" {res.layout}" + (" (--layout)" if res.layout_source == "--layout" else "")
    return ""


def _fallback_note(res: SmokeResult) -> str:
    """The header's note when the static executor failed its self-check and the run went eager."""
    choice = res.loop_choice
    if choice is None or choice.check is None or choice.check.passed:
        return ""
    return f"  eager executor (static self-check: {choice.check.status})"


def report_smoke(run: Callable[..., SmokeResult], *, json_out: bool, quiet: bool, show_text: bool = False,
                 output_format: str = "json", annotations: str = "warnings", report: str | None = None) -> int:
    """Call ``run(progress=, log=)`` as ``output.run_live`` shows it (a bar counting tokens), print
    its report or document, return the exit code."""
    from dflash_ckpt.json_out import print_document
    from dflash_ckpt.console import make_console, run_live

    console = make_console()
    result = run_live(run, json_out=json_out, quiet=quiet, output_format=output_format, unit="tokens")
    if json_out:
        print_document(result.envelope(), output_format, annotations)
    else:
        render_smoke(console, result, quiet=quiet, show_text=show_text)
    from dflash_ckpt.commands.options import write_report_for

    write_report_for(report, result, quiet=quiet, json_out=json_out)
    return result.exit_code
