"""One report per command, from the result the command returned (its ``--json`` result and the
few figures the JSON leaves out, such as a probe candidate's acceptance lengths).

Sections, in the order a reviewer reads them: the verdict, what was checked, where it ran, the
settings, acceptance (tau with its interval, by draft position, the histogram), speed, the
lossless verdict, the findings, the serve lines. A section a command has nothing for is left out
(inspect runs nothing: no acceptance, no speed).
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path
from typing import Any, Sequence

from dflash_ckpt.errors import InputError
from dflash_ckpt.report import markdown as md
from dflash_ckpt.report.chart import matplotlib_missing, position_rates, write_chart

#: What a speedup measured here predicts, and what it does not (every run report says it).
SPEEDUP_MEANS = ("This is a batch-1 speedup measured side by side on this device: it predicts the gain of one "
                 "request at a time on this hardware with this runtime, not the gain under batching, in a serving "
                 "engine, or on another device (a CPU speedup is not a GPU speedup).")


def chart_path(report: Path) -> Path:
    """The PNG beside ``FILE.md``: ``FILE-acceptance.png``."""
    return report.with_name(report.stem + "-acceptance.png")


def require_report_path(path: str) -> Path:
    """``--report FILE``, checked before the run: its folder exists and is writable, FILE is no
    folder (a long run must not fail only when it writes). DF001, exit 2."""
    p = Path(path)
    folder = p.parent if str(p.parent) else Path(".")
    if p.is_dir():
        raise InputError(f"--report {path}: a folder; give a file name such as report.md", code="DF001", path=path)
    if not folder.is_dir():
        raise InputError(f"--report {path}: no folder {folder} to write it in", code="DF001", path=path)
    if not os.access(folder, os.W_OK):
        raise InputError(f"--report {path}: the folder {folder} is not writable", code="DF001", path=path)
    return p


def write_report(path: str | Path, result: Any, *, argv: Sequence[str] | None = None) -> list[Path]:
    """Write the report of ``result`` (an ``InspectRun``, ``SmokeResult`` or ``ProbeResult``) to
    ``path``, and its chart beside it when there is one; the files written."""
    path = Path(path)
    command = result.command
    lengths, drafts = _acceptance_lengths(result)
    chart = chart_path(path)
    missing = matplotlib_missing() if lengths else None
    rates = position_rates(lengths, drafts) if lengths else []
    written = [path]
    if lengths and missing is None:
        write_chart(chart, rates, f"{_short(result)}: acceptance by draft position")
        written.append(chart)
    builder = {"inspect": _inspect, "smoke-run": _smoke, "probe-taps": _probe}[command]
    body = builder(result, argv=argv, rates=rates, chart=chart.name if lengths and missing is None else None,
                   missing=missing)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(body.rstrip("\n") + "\n", encoding="utf-8")
    tmp.replace(path)
    return written


# -- shared sections ----------------------------------------------------------------------------


def _short(result: Any) -> str:
    return str(getattr(result, "draft_label", None) or "the draft")


def _acceptance_lengths(result: Any) -> tuple[list[int], int]:
    """Every DFlash step's acceptance length the report's chart draws, and the drafts per block."""
    if result.command == "smoke-run" and result.runs:
        block = result.verify_width or result.block_size or 1
        return [n for run in result.runs for n in run.dflash.acceptance_lengths], max(block - 1, 1)
    if result.command == "probe-taps" and getattr(result, "best", None) is not None and result.best.lengths:
        return list(result.best.lengths), max((result.block_size or 2) - 1, 1)
    return [], 0


def _checked(draft: str, target: str | None, argv: Sequence[str] | None, pre: Any = None) -> str:
    """Draft and target (a local folder, or a Hub repo at the commit it resolved to), the tool's
    version and commit, the command line. ``pre``: the inspect result that names the commits."""
    from dflash_ckpt.environment import git_commit
    from dflash_ckpt._version import __version__

    def where(name: str, commit: str | None) -> str:
        if commit:
            return f"Hub repo at commit {md.code(commit)}"
        return "local folder" if Path(name).exists() else "Hub repo"

    rows = [["draft", md.code(draft), where(draft, getattr(pre, "commit", None))]]
    if target:
        rows.append(["target", md.code(target), where(target, getattr(pre, "target_commit", None))])
    rows.append(["dflash-ckpt", md.code(__version__), f"commit {md.code(git_commit() or 'unknown (not a git checkout)')}"])
    out = ["## What was checked", "", md.table(["", "name", "what"], rows)]
    if argv:
        out += ["", "Command:", "", md.fenced([shlex.join(["dflash-ckpt", *argv])], "sh")]
    return "\n".join(out)


def _where(result: Any) -> str:
    """The machine: CPU and the path its bf16 products took, torch and the GPU, the engines run."""
    from dflash_ckpt.environment import cpu_facts, torch_facts

    cpu = cpu_facts()
    run = result.command != "inspect"
    rows = [["CPU", md.text(f"{cpu['model'] or 'unknown'} ({cpu['logical_cores']} logical cores, {cpu['machine']})")]]
    if run:
        path = getattr(result, "cpu_linear", None) or cpu["bf16_linear_path"]
        rows.append(["numeric path", md.text(f"bf16 linears: {path}" if str(getattr(result, "device", "cpu")).startswith("cpu")
                                             else "CUDA")])
        t = torch_facts() if "torch" in sys.modules else None
        if t and "error" not in t:
            rows.append(["torch", md.text(t["version"] + (f", CUDA {t['cuda']}" if t["cuda"] else ", CPU build"))])
            for g in t["gpus"]:
                rows.append(["GPU", md.text(f"{g['name']}, {g['memory_gib']} GiB, sm {g['capability']}"
                                            + (f", driver {t['driver']}" if t["driver"] else ""))])
        device = getattr(result, "device", None)
        if device:
            rows.append(["device", md.code(device)])
        threads = getattr(result, "threads", None)
        if threads:
            rows.append(["threads", str(threads)])
        er = getattr(result, "engine_run", None)
        if er:
            rows.append(["engine", md.text(f"vLLM {er.get('version') or ''}".strip())])
    else:
        rows.append(["runs", "nothing: config.json and safetensors headers only (no torch)"])
    import platform

    rows.append(["Python", md.text(platform.python_version())])
    return "\n".join(["## Where it ran", "", md.table(["", ""], rows)])


def _findings(findings: list[dict[str, Any]], title: str = "Findings") -> str:
    if not findings:
        return f"## {title}\n\nNone."
    rows = [[md.code(f["code"]), f["severity"], md.text(f["message"])] for f in findings]
    return "\n".join([f"## {title}", "", md.table(["code", "severity", "message"], rows)])


def _serve(serve: dict[str, list[str]], unserved: dict[str, str] | None = None) -> str:
    """The serve lines as one shell block (TensorRT-LLM: its YAML and its command, readable), and
    the engines left out with why."""
    from dflash_ckpt.checks.engines.tensorrt_llm import readable
    from dflash_ckpt.checks.serve import NOT_SHOWN, shell_line

    if not serve:
        return ""
    lines: list[str] = []
    for engine, argv in serve.items():
        line = shell_line(argv)
        parts = readable(argv) if engine == "tensorrt-llm" and line is not None else None
        lines.append(f"# {engine}")
        if parts is None:
            lines.append(line or f"# {NOT_SHOWN}")
        else:
            lines += [f"cat > dflash-options.yaml <<'EOF'", parts[0], "EOF", parts[1]]
    out = ["## Serve it", "", "Add the engine's tensor-parallel option for several GPUs (argv in `--json` `serve`).", "",
           md.fenced(lines, "sh")]
    for engine, why in (unserved or {}).items():
        out += ["", f"- {md.text(engine)}: {md.text(why)}"]
    return "\n".join(out)


def _positions(rates: list[float], chart: str | None, missing: str | None) -> str:
    out = ["### Acceptance by draft position", ""]
    if chart:
        out += [f"![acceptance by draft position]({chart})", ""]
    elif missing:
        out += [f"No chart: {md.text(missing)}; the table below has the same figures.", ""]
    out.append(md.table(["position", "steps that accepted it"], [[str(k), f"{100 * r:.0f}%"] for k, r in enumerate(rates, 1)],
                        ["r", "r"]))
    return "\n".join(out)


def _histogram(hist: dict[str, int], steps: int) -> str:
    top = max(hist.values(), default=0) or 1
    rows = [[k, str(v), f"{100 * v / steps:.0f}%" if steps else "—", "█" * max(1 if v else 0, round(20 * v / top))]
            for k, v in hist.items()]
    return "\n".join(["### Acceptance lengths", "", f"Tokens per DFlash step, bonus included, over {steps} steps:", "",
                      md.table(["length", "steps", "share", ""], rows, ["r", "r", "r", "l"])])


# -- per command --------------------------------------------------------------------------------


def _inspect(result: Any, *, argv: Sequence[str] | None, **_: Any) -> str:
    from dflash_ckpt.checks.engines.registry import READERS

    out = []
    for res in result.results:
        doc = res.to_json(result.strict)
        ok = "OK" if doc["ok"] else "ERROR" if doc["error"] else "FAIL"
        counts = doc["counts"]
        target = res.target.label if res.target else None
        out += [f"# dflash-ckpt inspect: {md.text(res.label)}", "",
                f"**{ok}**: {counts['error']} error(s), {counts['warning']} warning(s), {counts['info']} info"
                + (" (warnings count as errors: --strict)" if result.strict else ""), "",
                _checked(res.label, target, argv, res), "", _where(result)]
        if res.draft is not None:
            resolved = [[md.code(k), md.code(v), md.text(doc["sources"].get(k, "—"))] for k, v in doc["resolved"].items()]
            out += ["", "## Resolved DFlash keys", "", md.table(["key", "value", "from"], resolved)]
        out += ["", _findings(doc["findings"])]
        if res.readers:
            rows = [[md.text(r.title), "yes" if res.readers[r.key].loads else "**no**",
                     md.text(res.readers[r.key].reason + ("; normalize fixes it" if r.key in res.normalize_fixes else ""))]
                    for r in READERS]
            out += ["", "## Readers", "", md.table(["reader", "loads", "why"], rows)]
            if res.normalize_fixes and res.normalize_command:
                out += ["", f"`{res.normalize_command}` writes a config every reader above loads (weights untouched)."]
        if doc["serve"]:
            out += ["", _serve(doc["serve"], res.unserved())]
        out.append("")
    return "\n".join(out)


def _smoke(result: Any, *, argv: Sequence[str] | None, rates: list[float], chart: str | None,
           missing: str | None) -> str:
    doc = result.to_json()
    s, o = doc["settings"], doc["overall"]
    head = [f"# dflash-ckpt smoke-run: {md.text(result.draft_label)} on {md.text(result.target_label)}", ""]
    head.append(f"**{_smoke_verdict(result)}**")
    out = ["\n".join(head), _checked(result.draft_label, result.target_label, argv, result.precheck), _where(result)]
    if result.refused:
        out.append(_findings(doc["precheck"], "Refused by inspect's checks"))
        return "\n\n".join(out)
    out.append(_smoke_settings(result, s))
    if o:
        out.append(_acceptance(result, o, rates, chart, missing))
        out.append(_speed(o))
        out.append(_lossless(result, doc))
    out.append(_findings(doc["precheck"] + doc["findings"]))
    if doc["serve"]:
        out.append(_serve(doc["serve"], result.precheck.unserved() if result.precheck is not None else None))
    return "\n\n".join(out)


def _smoke_verdict(result: Any) -> str:
    """PASS / FAIL / NO VERDICT / REFUSED, with tau and the outputs matched."""
    if result.refused:
        return "REFUSED: the pair fails inspect's checks"
    return result.headline().replace("pass,", "PASS:", 1).replace("fail,", "FAIL:", 1).replace(
        "no verdict (DF408: too little evidence),", "NO VERDICT (DF408: too little evidence):", 1)


def _smoke_settings(result: Any, s: dict[str, Any]) -> str:
    def dtype(ran: str | None, stored: str | None) -> str:
        return f"{ran} (stored {stored})" if stored and stored != ran else f"{ran} (as stored)"

    samp = s["sampling"]
    opts = result.options
    prompts = (f"suite {md.code(s['suite'])}" if s.get("suite") else
               "custom" if s["custom_prompts"] else "built-in (math, code, chat)")
    names = ", ".join(md.text(r.prompt.name) for r in result.runs)
    rows = [
        ["draft dtype", md.text(dtype(s["draft_dtype"], s["draft_dtype_stored"]))],
        ["target dtype", md.text(dtype(s["target_dtype"], s["target_dtype_stored"]))],
        ["decoding", "greedy (temperature 0)" if samp["greedy"] else
         md.text(f"temperature {samp['temperature']:g}, top-p {samp['top_p']:g}, top-k {samp['top_k'] or 'off'}, seed {samp['seed']}")],
        ["verification", md.text(f"{samp['rule']} ({'; '.join(samp['engines'])})")],
        ["lossless check", md.text(s["lossless"])],
        ["prompts", f"{prompts}: {len(result.runs)} ({names})"],
        ["-n (new tokens per prompt)", str(s["max_new_tokens"])],
        ["block", md.text(f"{s['block_size']} ({s['layout']}; trained {s['trained_block_size']})")],
        ["backend / engine", md.text(f"{s['backend']} / {s['engine']}")],
        ["chat template", ("on" if s["chat_template"] else "off") + (" (thinking)" if s["thinking"] else "")],
        ["min acceptance", f"{s['min_acceptance']:g}"],
        ["tie tolerance", md.text(f"{s['tie_tolerance']:g}" if s["tie_tolerance"] is not None else "—")],
    ]
    if opts.block_size is not None:
        rows.append(["--block-size", str(opts.block_size)])
    return "\n".join(["## Settings", "", md.table(["", ""], rows)])


def _acceptance(result: Any, o: dict[str, Any], rates: list[float], chart: str | None, missing: str | None) -> str:
    ev = o["evidence"]
    tau = (f"**tau {o['tau']:.2f}** ({md.interval(o['tau_ci95'])}, clustered by prompt), "
           f"{o['accepted_per_step']:.2f} drafts accepted per step, over {o['steps']} DFlash steps and {o['prompts']} prompt(s)")
    if not ev["enough"]:
        tau += (f". Too little evidence for a verdict (DF408: at least {ev['min_steps']} steps over "
                f"{ev['min_prompts']} prompts): more -n or more prompts")
    out = ["## Acceptance", "", tau + "."]
    suites = result.evidence().suites_json() if result.runs else None
    if suites:
        rows = [[md.text(name), md.num(v.get("tau")), md.interval(v.get("ci95")), str(v.get("prompts")),
                 md.num(v.get("reference_tau"))] for name, v in suites.items()]
        out += ["", md.table(["suite", "tau", "interval", "prompts", "published"], rows, ["l", "r", "r", "r", "r"])]
    out += ["", _positions(rates, chart, missing), "", _histogram(o["histogram"], o["steps"])]
    return "\n".join(out)


def _speed(o: dict[str, Any]) -> str:
    if o["speedup"] is None:
        why = o.get("speedup_withheld") or "withheld"
        line = f"Speedup withheld: {md.text(why)}."
    else:
        line = (f"**Speedup {o['speedup']:.2f}x** ({md.interval(o['speedup_ci95'], '{:.2f}x')}): DFlash "
                f"{o['dflash_tok_s']:.1f} tok/s against the target alone {o['target_tok_s']:.1f} tok/s, measured back to back.")
    return "\n".join(["## Speed", "", line, "", SPEEDUP_MEANS])


def _lossless(result: Any, doc: dict[str, Any]) -> str:
    if result.sampled:
        return ("## Lossless\n\nSampled: one draw each, not compared token by token with the target's; the "
                "sampling is lossless as distributions (tests/test_sampling_lossless.py).")
    n = len(doc["prompts"])
    same = [p for p in doc["prompts"] if p["lossless"]["status"] == "identical"]
    ties = [p for p in doc["prompts"] if p["lossless"]["status"] == "tie"]
    bad = [p for p in doc["prompts"] if p["lossless"]["status"] in ("differs", "skipped")]
    out = ["## Lossless", "",
           f"Greedy DFlash output against the target alone, judged teacher-forced: identical on {len(same)}/{n}, "
           f"a near tie on {len(ties)}, different on {len(bad)}."]
    for p in ties:
        lo = p["lossless"]
        out.append(f"- tie: {md.text(p['name'])} at new token {lo['position']} (target {lo['target_token']}, DFlash "
                   f"{lo['dflash_token']}, margin {lo['margin']:g} within the tolerance; {lo['ties']} tie(s))")
    for p in bad:
        lo = p["lossless"]
        out.append(f"- **{lo['status']}**: {md.text(p['name'])}" + (f" at new token {lo['position']}" if lo["position"] is not None else ""))
    return "\n".join(out)


def _probe(result: Any, *, argv: Sequence[str] | None, rates: list[float], chart: str | None,
           missing: str | None) -> str:
    doc = result.to_json()
    s = doc["settings"]
    conf = doc["confidence"]
    verdict = "OK" if result.exit_code == 0 else "FAIL"
    best = doc["best"]
    head = [f"# dflash-ckpt probe-taps: {md.text(result.draft_label)} on {md.text(result.target_label)}", "",
            f"**{verdict}**" + (f": best target_layer_ids {md.code(best['target_layer_ids'])}, tau {best['tau']:.2f}"
                                if best and best.get("tau") is not None else "")]
    out = ["\n".join(head), _checked(result.draft_label, result.target_label, argv), _where(result)]
    if doc["refused"]:
        out.append(_findings(doc["precheck"], "Refused by inspect's checks"))
        return "\n\n".join(out)
    rows = [["draft / target dtype", md.text(f"{s['draft_dtype']} / {s['target_dtype']}")],
            ["prompts", "custom" if s["custom_prompts"] else "built-in"], ["-n", str(s["max_new_tokens"])],
            ["block", str(s["block_size"])], ["taps (k)", str(doc["taps"])], ["target depth", str(doc["depth"])]]
    out.append("\n".join(["## Settings", "", md.table(["", ""], rows)]))
    ranked = [[str(i), md.code(c["target_layer_ids"]), md.num(c["tau"]), md.num(c["stderr"], "{:.3f}"), md.text(c["measured_by"])]
              for i, c in enumerate(doc["ranked"][:10], 1)]
    sec = ["## Tap sets", "", md.text(f"verdict: {conf.get('verdict')}") + ".", "",
           md.table(["rank", "target_layer_ids", "tau", "stderr", "measured by"], ranked, ["r", "l", "r", "r", "l"])]
    if doc["configured"]:
        c = doc["configured"]
        sec += ["", f"Configured {md.code(c['target_layer_ids'])}: rank {c['rank']}, tau {md.num(c['tau'])}."]
    out.append("\n".join(sec))
    if rates:
        out.append("## Acceptance (best tap set)\n\n" + _positions(rates, chart, missing))
    out.append(_findings(doc["findings"]))
    if doc["normalize_command"]:
        out.append("## Fix\n\n" + md.fenced([doc["normalize_command"]], "sh"))
    return "\n\n".join(out)


__all__ = ["SPEEDUP_MEANS", "chart_path", "require_report_path", "write_report"]
