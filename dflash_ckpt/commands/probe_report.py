"""The run and report of ``probe-taps``: settings, the ranked candidates, confidence, findings, what next."""

from __future__ import annotations

from typing import Any, Callable

from rich.console import Console
from rich.table import Table

from dflash_ckpt.json_out import print_document
from dflash_ckpt.console import make_console, print_error_lines, print_line, print_stacked, render_findings, run_live, safe, table_width
from dflash_ckpt.run.probe_result import ProbeResult
from dflash_ckpt.errors import inert


def report_probe(run: Callable[..., ProbeResult], *, json_out: bool, quiet: bool, output_format: str = "json",
                 annotations: str = "warnings", report: str | None = None) -> int:
    """Call ``run(log=, copy_progress=)`` (``run_probe_taps`` with the options bound), print the
    report or the JSON document, return the exit code; a failed ``--write`` is raised as its line
    after the report."""
    console = make_console()
    copy = not (quiet or json_out)
    res = run_live(lambda **live: run(copy_progress=copy, **live), json_out=json_out, quiet=quiet,
                   output_format=output_format)
    from dflash_ckpt.commands.options import write_report_for

    if json_out:
        print_document(res.envelope(), output_format, annotations)
        write_report_for(report, res, quiet=quiet, json_out=True)
        return res.exit_code
    write_report_for(report, res, quiet=True, json_out=False)  # said after the report, below
    if quiet:
        render_errors(console, res)
        if res.write and res.write.get("written"):
            print_line(console, inert(wrote_line(res)))
    else:
        render_probe(console, res)
        if report is not None:
            print_line(console, inert(f"report: {report}"))
    if res.write_error is not None:
        raise res.write_error
    return res.exit_code


def wrote_line(res: ProbeResult) -> str:
    """What ``--write`` wrote and the verdict of what it wrote (shown with ``-q`` too)."""
    best = res.best
    assert best is not None and best.tau is not None
    ok = best.tau >= res.options.min_acceptance
    return (f"wrote {res.options.write}: a normalized copy of {res.draft_label} with target_layer_ids "
            f"{_ids(best.target_layer_ids)}, measured at tau {best.tau:.2f} ({'passes' if ok else 'below'} "
            f"--min-acceptance {res.options.min_acceptance:g})")


def render_errors(console: Console, res: ProbeResult) -> None:
    print_error_lines(console, [*res.refused, *res.findings], res.draft_label)


def _ids(ids: Any) -> str:
    return "[" + ", ".join(str(i) for i in ids) + "]"


def render_probe(console: Console, res: ProbeResult) -> None:
    if res.refused:
        for f in res.refused:
            print_line(console, f.line(res.draft_label))
        console.print("[bold red]REFUSED[/]  the pair fails inspect's checks (with valid tap layers supplied); "
                      "fix the errors above first")
        return
    o, s = res.options, res.search
    console.print(
        f"[bold]{safe(res.draft_label)}[/] on [bold]{safe(res.target_label)}[/]  device {res.device}  "
        f"draft {res.draft_dtype}  target {res.target_dtype}  block {res.block_size}  "
        f"{res.k} taps of {res.depth} layers  {len(res.prompts)} prompt(s), up to {o.max_new_tokens} tokens each"
    )
    if res.configured is None:
        console.print("configured target_layer_ids: none (recovering them)")
    else:
        problem = f" ({safe(res.configured_problem)})" if res.configured_problem else ""
        console.print(f"configured target_layer_ids: {_ids(res.configured)}{problem} (checking them)")
    if s is not None:
        how = "every candidate" if s.method == "exhaustive" else f"a search from {len(s.starts)} starts"
        capped = ", stopped by the budget" if s.budget_exhausted else ""
        console.print(
            f"measured {s.evaluated} of C({res.depth}, {res.k}) = {s.space:,} candidate tap sets ({how}{capped}; "
            f"{len(s.bounds)} given up once sure to lose): {res.draft_forwards:,} draft calls, {s.seconds:.1f} s; "
            f"the target ran once per prompt ({res.record_s:.1f} s); "
            f"{sum(1 for c in res.ranked if c.tau_loop is not None)} finalist(s) re-measured with smoke-run's loop "
            f"({res.confirm_s:.1f} s)")
        gap = res.simulation_gap()
        if gap:
            console.print(
                f"the simulation was off by up to {gap:.2f} tau on the finalists: on this CPU's path "
                f"({res.cpu_linear or res.device}) a product's last bits depend on how many rows share it, so "
                "the features of one whole-text forward and of the loop's blocks differ at near ties; "
                "the finalists are ranked by the loop's tau")
    rounds = (res.evidence or {}).get("rounds") or []
    if len(rounds) > 1:
        more = ", ".join(str(r["max_new_tokens"]) for r in rounds[1:])
        console.print(f"narrow lead at {rounds[0]['max_new_tokens']} tokens: the leading candidates measured again with up to "
                      f"{more} tokens per prompt ({len(rounds[-1]['prompts'])} prompt(s); the figures below are the last round's)")
    if not res.ranked:  # stopped before the search: a degenerate pair (DF414/DF415) ranks nothing
        render_findings(console, res.findings)
        console.print("[bold red]FAIL[/]  no tap set ranked: on this pair every one would \"work\"; fix the findings above")
        return
    table = Table(title="probe-taps", title_justify="left", show_edge=False,
                  caption="tau = mean tokens per DFlash step (bonus included); ± its standard error; "
                          "loop = measured as smoke-run measures, probe = simulated from the recorded features, "
                          "cut = given up once sure to lose (tau below the bound shown)",
                  caption_justify="left")
    columns = ["rank", "target_layer_ids", "tau", "±", "measured", "note"]
    for col in columns:
        table.add_column(col, justify="right" if col in ("rank", "tau", "±") else "left", no_wrap=True)
    shown = res.ranked[: o.top]
    conf = res.candidate(res.configured)
    if conf is not None and conf not in shown:
        shown = [*shown, conf]
    rows = []
    for cand in shown:
        rank = res.ranked.index(cand) + 1
        note = "configured" if conf is cand else ""
        se = cand.stderr
        tau = f"{cand.tau:.2f}" if cand.tau is not None else f"< {cand.tau_below:.2f}"
        how = "loop" if cand.tau_loop is not None else "probe" if cand.tau_probe is not None else "cut"
        rows.append([str(rank), _ids(cand.target_layer_ids), tau, "—" if se is None else f"{se:.2f}", how, note])
    if table_width(columns, rows) <= console.width:
        for row in rows:
            table.add_row(*row)
        console.print(table)
    else:  # too narrow for the columns: a line per candidate, no figure cut
        print_stacked(console, "probe-taps", columns, [[f"rank {row[0]}", *row[1:]] for row in rows])
        console.print(table.caption, markup=False, highlight=False)
    c = res.confidence()
    if c["gap"] is not None:
        z = "—" if c["z"] is None else f"{c['z']:.1f}"
        console.print(f"confidence: the best leads the runner-up by {c['gap']:.2f} tau ({100 * c['relative_gap']:.0f}%, "
                      f"{z} standard errors): [bold]{c['verdict']}[/]")
    if conf is not None and res.best is not None:
        if conf is res.best:
            console.print(f"the configured target_layer_ids {_ids(conf.target_layer_ids)} are the best measured")
        elif not any(f.code == "DF410" for f in res.findings):
            z = res.best.z_over(conf)
            console.print(f"the configured target_layer_ids {_ids(conf.target_layer_ids)} trail the best only within "
                          f"measurement noise ({'—' if z is None else f'{z:.1f}'} standard errors): they stay")
    m = res.layout
    if m is not None and len(m.by_layout) > 1:
        taus = ", ".join(f"{name} tau {c.tau:.2f} ± {c.stderr or 0:.2f}" for name, c in m.ranked())
        z = m.z
        console.print(f"block layout with {_ids(m.taps)} (smoke-run's loop): {taus}: [bold]{m.best}[/] "
                      f"({'—' if z is None else f'{z:.1f}'} standard errors, {m.verdict()}); the config says "
                      f"{m.declared.layout} ({safe(m.declared.source)})")
    render_findings(console, res.findings)
    best = res.best
    if best is None:
        return
    if res.write and res.write.get("written"):
        console.print(safe(wrote_line(res)))
    elif res.configured is None:
        console.print(f"to write it: {safe(res.normalize_command() or '')}  (or rerun with --write OUT)")
    elif res.configured != best.target_layer_ids and any(f.code == "DF410" for f in res.findings):
        console.print("to write it: rerun with --write OUT (a normalized copy with the measured ids; "
                      "normalize alone only supplies missing ids)")
    if res.wrote_fix and res.configured is not None and res.configured != best.target_layer_ids:
        console.print(f"[bold green]PASS[/]  the copy {safe(str(o.write))} with target_layer_ids "
                      f"{_ids(best.target_layer_ids)} measures tau {best.tau:.2f} (min {o.min_acceptance:g}); "
                      f"DRAFT itself is unchanged and its ids {_ids(res.configured)} lose (DF410)")
        return
    status = "[bold green]PASS[/]" if res.exit_code == 0 else "[bold red]FAIL[/]"
    kept = (f"configured target_layer_ids {_ids(conf.target_layer_ids)} hold; "
            if conf is not None and res.exit_code == 0 else "")
    console.print(f"{status}  {kept}best target_layer_ids {_ids(best.target_layer_ids)} at tau {best.tau:.2f} "
                  f"(min {o.min_acceptance:g})")
