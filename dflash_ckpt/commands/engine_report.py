"""The report lines of ``smoke-run --engine vllm|both``: which vLLM ran and its own counters, and
(``both``) one table of the reference runtime against vLLM on the same ids."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from dflash_ckpt.console import safe


def num(value: float | None, fmt: str = "{:.2f}") -> str:
    return "—" if value is None else fmt.format(value)


def engine_line(res: Any) -> str | None:
    """vLLM's version, its engine starts and its own tau (from its counters), or None."""
    run = res.engine_run
    if not run:
        return None
    m = run["vllm_metrics"]
    starts = run["start_s"]
    return (f"vLLM {safe(run.get('version'))} ({safe(run.get('distribution'))}, {safe(run.get('python') or '')}): "
            f"engine start "
            f"{starts['dflash']:.1f} s with DFlash, {starts['target_only']:.1f} s target only; its counters: "
            f"{m['drafts']} drafts, {m['accepted']} accepted, tau {num(run['vllm_tau'])}, per position "
            f"{m['accepted_per_pos']}" + (f"; sampled, verified by vLLM's {run['rule']} rule, tokens not compared"
                                           if run.get("sampling") else "")
            + (served_line(run["served"]) if run.get("served") else ""))


def _est(est: dict[str, Any], spec: str = "{:.2f}") -> str:
    ci = est.get("ci95")
    return num(est.get("mean"), spec) + (f" [{spec.format(ci[0])}, {spec.format(ci[1])}]" if ci else "")


def served_line(served: dict[str, Any]) -> str:
    """``--engine vllm-serve``: what was added to the printed line, and the load phase's figures."""
    load = served["load"]
    return (f"; served: the printed serve line + {safe(' '.join(served['local_additions']))}; at concurrency "
            f"{load['concurrency']}: tau {_est(load['with_draft']['tau'])}, output tok/s "
            f"{_est(load['with_draft']['tok_s'], '{:.1f}')} with the draft, "
            f"{_est(load['without_draft']['tok_s'], '{:.1f}')} without, speedup {_est(load['speedup'])}, "
            f"outputs equal {load['outputs_equal']}/{load['outputs']}")


def render_comparison(console: Console, res: Any) -> None:
    """``--engine both``: per prompt, tokens, acceptance lengths, tau and tok/s of each engine."""
    if not res.comparisons:
        return
    table = Table(title="reference runtime (R) against vLLM (V), same ids", title_justify="left", show_edge=False)
    for col in ("prompt", "tokens", "acceptance", "tau R/V", "T tok/s R/V", "D tok/s R/V"):
        table.add_column(col, justify="left" if col in ("prompt", "tokens", "acceptance") else "right",
                         no_wrap=col != "prompt", overflow="fold")
    for c in res.comparisons:
        if c.difference == "sampled":
            tokens = "not compared (sampled)"
        elif c.tokens_equal:
            tokens = "[green]equal[/]"
        else:
            gap = "" if c.margin is None else f", gap {c.margin:.3g}"
            colour = "yellow" if c.difference == "tie" else "bold red"
            tokens = f"[{colour}]{c.difference} at {c.first_difference}[/]{gap}"
        lengths = "[green]equal[/]" if c.lengths_equal else f"part at step {c.first_step_apart}"
        table.add_row(safe(c.name), tokens, lengths, f"{num(c.reference_tau)}/{num(c.engine_tau)}",
                      f"{num(c.reference_tok_s['target_only'], '{:.1f}')}/{num(c.engine_tok_s['target_only'], '{:.1f}')}",
                      f"{num(c.reference_tok_s['dflash'], '{:.1f}')}/{num(c.engine_tok_s['dflash'], '{:.1f}')}")
    console.print(table)
