"""``smoke-run``: prove that a draft/target pair works, and measure it.

Steps: resolve both folders; run ``inspect``'s checks on the pair and refuse it on errors;
refuse what the reference runtime does not implement (exit 2); load both models; warm up; for
each prompt time target-only decoding over a short window, decode with DFlash, and check the
DFlash output with ONE teacher-forced target forward over prompt + output (every position's
argmax and how far DFlash's token sits below it, ``runtime/judge.py``: greedy decoding reproduces the output exactly when every argmax is
its token, so the target never decodes everything a second time); gather acceptance and speed
figures; judge.

Timing: each decoding step is timed at its one host sync; the figures are medians over steps
(steps on the static path all have the same shape, so each is a repeat of the same work), with
their spread in ``--json``: T tok/s = 1 / median T step, D tok/s = tau / median D step. A
speedup above tau cannot be real (a D step costs at least a T step) and is withheld (DF406).

Verdict (exit code): 0 pass; 1 when the pair was refused by the checks, DFlash's output differs
from the target's beyond a tie (DF401), the mean acceptance length is below ``--min-acceptance``
(DF403), or non-finite values reached the draft (DF404); 2 for usage errors and unsupported pairs.

Two thresholds are decisions of this tool:
- ``DEFAULT_MIN_ACCEPTANCE`` = 2.0 tokens per step. Every step yields at least one token (the
  bonus), so tau 1.0 means no draft was ever accepted. A draft reading the wrong tap layers gets
  features it was never trained on; what it still gets right comes from the anchor's embedding
  alone (mostly the first draft position), which keeps tau close to 1 (a random draft measures
  1.0 here). Working drafts reach 4 to 8 at block 16 (paper, docs/DESIGN.md section 7), and this
  project's tiny trained pair must reach 4 at block 8 while the same weights with every tap
  moved by one must fall under 2. 2.0 sits between the two with margin on both sides, and below
  it DFlash barely pays for its extra draft and verify passes, so such a pair is not worth
  deploying anyway.
- ``TIE_TOLERANCE`` (``runtime/judge.py``, with the reasons): a position where DFlash's token is
  not the target's argmax is a tie when its logit is within this much of the maximum, at any
  rank. ``compare_outputs`` below (top-2 only) is no longer what smoke-run judges with.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from dflash_ckpt.errors import UsageError
from dflash_ckpt.checks.inspection import InspectResult, inspect_sources
from dflash_ckpt.rules import Finding, Severity, finding
from dflash_ckpt.runtime.args import DraftArgs
from dflash_ckpt.runtime.generate import Generation, decode, dflash_decode, step_clock, teacher_forced_logits
from dflash_ckpt.runtime.judge import TIE_TOLERANCE, Verdict, judge_logits
from dflash_ckpt.runtime.static import StaticRunner, supports_static
from dflash_ckpt.runtime.loading import dtype_name, inventory, load_draft
from dflash_ckpt.runtime.memory import check_fits, estimate_run, needed_bytes
from dflash_ckpt.sources.prompts import Prompt, stop_token_ids
from dflash_ckpt.commands.smoke_backend import BACKENDS, plan_target, select_backend
from dflash_ckpt.commands.smoke_advice import (block_size_findings, check_positions, prompt_format_causes,
                                               prompt_format_note, special_token_texts)
from dflash_ckpt.commands.run_setup import (DEFAULT_MIN_ACCEPTANCE, RunOptions, encode_prompts, pick_device, resolve_dtypes,
                                           resolve_folders, set_threads)
from dflash_ckpt.sources.local import LocalSource
from dflash_ckpt.commands.json_out import SCHEMA_VERSION as JSON_SCHEMA_VERSION  # one version for every document

WARMUP_TOKENS = 4
#: Target-only tokens timed per prompt (the first comes with the prefill and is not a step).
TIMING_TOKENS = 16


@dataclass
class SmokeOptions(RunOptions):
    """``RunOptions`` and smoke-run's own."""

    tie_tolerance: float | None = None
    warmup: bool = True
    #: ``auto``, ``native`` or ``transformers`` (commands/smoke_backend.py).
    backend: str = "auto"
    threads: int | None = None
    compile: bool = True

    def validate_own(self) -> None:
        if not math.isfinite(self.min_acceptance) or self.min_acceptance < 0:
            raise UsageError(f"--min-acceptance {self.min_acceptance}: must be a number >= 0")
        if self.tie_tolerance is not None and (not math.isfinite(self.tie_tolerance) or self.tie_tolerance < 0):
            raise UsageError(f"--tie-tolerance {self.tie_tolerance}: must be a number >= 0")
        if self.backend not in BACKENDS:
            raise UsageError(f"--backend {self.backend!r}: use auto, native or transformers")
        if self.threads is not None and self.threads < 1:
            raise UsageError(f"--threads {self.threads}: must be at least 1")


# -- the lossless check ------------------------------------------------------------------------


@dataclass
class Lossless:
    """How DFlash's tokens compare with the target's: ``identical``, ``tie``, ``differs``, or
    ``skipped`` (a run stopped on non-finite values)."""

    status: str
    compared: int
    position: int | None = None
    target_token: int | None = None
    dflash_token: int | None = None
    margin: float | None = None
    runner_up: int | None = None
    #: The DFlash token's rank in the target's logits at ``position`` (1 = the best).
    rank: int | None = None
    #: Positions judged ties (``runtime/judge.py``: every position is judged).
    ties: int = 0
    largest_margin: float | None = None

    @classmethod
    def of(cls, verdict: Verdict) -> Lossless:
        """From the judge's verdict (``runtime/judge.py``); ``runner_up`` is kept for readers
        of the JSON as the DFlash token when it is the target's second choice."""
        p = verdict.position
        if p is None:
            return cls(verdict.status, verdict.compared)
        return cls(verdict.status, verdict.compared, p.index, p.target_token, p.dflash_token, p.margin,
                   p.dflash_token if p.rank == 2 else None, p.rank, verdict.ties, verdict.largest_margin)

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status, "compared": self.compared, "position": self.position,
            "target_token": self.target_token, "dflash_token": self.dflash_token,
            "margin": self.margin, "runner_up": self.runner_up, "rank": self.rank, "ties": self.ties,
            "largest_margin": self.largest_margin,
        }


def compare_outputs(
    target_tokens: list[int],
    dflash_tokens: list[int],
    top2_values: list[list[float]],
    top2_ids: list[list[int]],
    tolerance: float,
) -> Lossless:
    """Compare two greedy outputs; judge the first divergence by the target's top-2 margin there.

    ``top2_*[j]`` are the target-only run's two best logits (and ids) when it chose token ``j``.
    The divergence is a tie when the margin is within ``tolerance`` and DFlash chose the
    target's runner-up; anything else (or outputs of different length with equal prefixes)
    differs.
    """
    n = min(len(target_tokens), len(dflash_tokens))
    for j in range(n):
        if target_tokens[j] != dflash_tokens[j]:
            values, ids = top2_values[j], top2_ids[j]
            margin = float(values[0] - values[1])
            runner_up = ids[1] if ids[0] == target_tokens[j] else ids[0]
            tie = margin <= tolerance and dflash_tokens[j] == runner_up
            return Lossless("tie" if tie else "differs", j, j, target_tokens[j], dflash_tokens[j], margin, runner_up)
    if len(target_tokens) != len(dflash_tokens):
        return Lossless("differs", n, n,
                        target_tokens[n] if n < len(target_tokens) else None,
                        dflash_tokens[n] if n < len(dflash_tokens) else None)
    return Lossless("identical", n)


# -- figures -----------------------------------------------------------------------------------


def acceptance_stats(lengths: list[int], block_size: int) -> dict[str, Any]:
    """tau (mean new tokens per step, bonus included), mean accepted drafts, histogram 1..B."""
    hist = {str(k): 0 for k in range(1, block_size + 1)}
    for n in lengths:
        hist[str(n)] = hist.get(str(n), 0) + 1
    steps = len(lengths)
    tau = sum(lengths) / steps if steps else None
    return {
        "steps": steps,
        "tau": tau,
        "accepted_per_step": tau - 1 if tau is not None else None,
        "histogram": hist,
    }


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def step_stats(steps: list[float]) -> dict[str, Any] | None:
    """Median and spread of step times, in milliseconds."""
    if not steps:
        return None
    ms = sorted(x * 1e3 for x in steps)
    q1, _, q3 = statistics.quantiles(ms, n=4, method="inclusive") if len(ms) > 1 else (ms[0],) * 3
    return {"n": len(ms), "median": statistics.median(ms), "min": ms[0], "p25": q1, "p75": q3, "max": ms[-1]}


def speed_figures(target_steps: list[float], dflash_steps: list[float], tau: float | None) -> dict[str, Any]:
    """T tok/s = 1 / median T step, D tok/s = tau / median D step, their ratio; a ratio above
    tau is physically impossible (a D step costs at least a T step), so it is withheld
    (``speedup`` None, ``speedup_plausible`` false) and flagged by ``judge`` (DF406)."""
    t_med = statistics.median(target_steps) if target_steps else None
    d_med = statistics.median(dflash_steps) if dflash_steps else None
    target_tok_s = 1 / t_med if t_med else None
    dflash_tok_s = tau / d_med if d_med and tau else None
    measured = _ratio(dflash_tok_s, target_tok_s)
    plausible = measured is None or tau is None or measured <= tau
    return {
        "target_tok_s": target_tok_s,
        "dflash_tok_s": dflash_tok_s,
        "speedup": measured if plausible else None,
        "speedup_measured": measured,
        "speedup_plausible": plausible,
        "timing": {"target_step_ms": step_stats(target_steps), "dflash_step_ms": step_stats(dflash_steps)},
    }


@dataclass
class PromptRun:
    prompt: Prompt
    input_ids: list[int]
    #: Target-only decoding over the timing window (``TIMING_TOKENS``, in two runs whose tokens
    #: and step times are concatenated here).
    target: Generation
    dflash: Generation
    lossless: Lossless
    #: The target's greedy choice at each DFlash position (teacher forced): the target-only
    #: output wherever the two agree, which is everywhere unless ``lossless`` says otherwise.
    target_tokens: list[int] = field(default_factory=list)
    target_text: str = ""
    dflash_text: str = ""
    input_text: str = ""

    def figures(self, block_size: int) -> dict[str, Any]:
        stats = acceptance_stats(self.dflash.acceptance_lengths, block_size)
        return {
            "new_tokens": len(self.dflash.tokens),
            # Target-only greedy decoding needs one forward per new token.
            "target_forwards": {"target_only": len(self.dflash.tokens), "dflash": self.dflash.target_forwards},
            "draft_forwards": self.dflash.draft_forwards,
            **stats,
            "prefill_s": {"target_only": self.target.prefill_s, "dflash": self.dflash.prefill_s},
            "decode_s": {"target_only": self.target.decode_s, "dflash": self.dflash.decode_s},
            "timed_tokens": {"target_only": len(self.target.tokens), "dflash": len(self.dflash.tokens)},
            **speed_figures(self.target.step_s, self.dflash.step_s, stats["tau"]),
        }

    def to_json(self, block_size: int) -> dict[str, Any]:
        return {
            **self.prompt.to_json(),
            "input_ids": self.input_ids,
            "output_ids": self.dflash.tokens,
            "target_output_ids": self.target_tokens,
            "acceptance_lengths": self.dflash.acceptance_lengths,
            "output_text": self.dflash_text,
            "target_output_text": self.target_text,
            "input_text": self.input_text,
            "overflow": self.dflash.overflow or self.target.overflow,
            "lossless": self.lossless.to_json(),
            **self.figures(block_size),
        }


@dataclass
class SmokeResult:
    draft_label: str
    target_label: str
    options: SmokeOptions
    precheck: InspectResult | None = None
    findings: list[Finding] = field(default_factory=list)
    runs: list[PromptRun] = field(default_factory=list)
    device: str | None = None
    draft_dtype: str | None = None
    target_dtype: str | None = None
    block_size: int | None = None
    tie_tolerance: float | None = None
    chat_template: bool | None = None
    stop_token_ids: list[int] = field(default_factory=list)
    refused: bool = False
    trained_block_size: int | None = None
    prompt_format: list[str] = field(default_factory=list)
    #: The runtime that ran the target: ``native`` or ``transformers``.
    backend: str | None = None
    threads: int | None = None
    static_path: bool = False
    cuda_graphs: bool = False
    #: Seconds spent capturing CUDA graphs (the "compile time"), apart from every other figure.
    capture_s: float = 0.0
    #: What times the steps: ``thread`` (the decoding thread's CPU time) or ``wall``.
    step_clock: str = "wall"

    @property
    def exit_code(self) -> int:
        errors = any(f.severity == Severity.ERROR for f in self.findings)
        return 1 if self.refused or errors else 0

    def overall(self) -> dict[str, Any]:
        block = self.block_size or 1
        lengths = [n for r in self.runs for n in r.dflash.acceptance_lengths]
        stats = acceptance_stats(lengths, block)
        return {
            "prompts": len(self.runs),
            "new_tokens": sum(len(r.dflash.tokens) for r in self.runs),
            "target_forwards": {
                "target_only": sum(len(r.dflash.tokens) for r in self.runs),
                "dflash": sum(r.dflash.target_forwards for r in self.runs),
            },
            **stats,
            **speed_figures([x for r in self.runs for x in r.target.step_s],
                            [x for r in self.runs for x in r.dflash.step_s], stats["tau"]),
        }

    def to_json(self) -> dict[str, Any]:
        o = self.options
        return {
            "schema_version": JSON_SCHEMA_VERSION,
            "command": "smoke-run",
            "ok": self.exit_code == 0,
            "exit_code": self.exit_code,
            "draft": self.draft_label,
            "target": self.target_label,
            "refused": self.refused,
            "precheck": [f.to_json() for f in self.precheck.findings] if self.precheck else [],
            "findings": [f.to_json() for f in self.findings],
            "settings": {
                "device": self.device,
                "backend": self.backend,
                "draft_dtype": self.draft_dtype,
                "target_dtype": self.target_dtype,
                "block_size": self.block_size,
                "max_new_tokens": o.max_new_tokens,
                "min_acceptance": o.min_acceptance,
                "tie_tolerance": self.tie_tolerance,
                "chat_template": self.chat_template,
                "thinking": o.thinking,
                "trained_block_size": self.trained_block_size,
                "custom_prompts": bool(o.prompts or o.prompts_file),
                "stop_token_ids": self.stop_token_ids,
                "threads": self.threads,
                "static_path": self.static_path,
                "cuda_graphs": self.cuda_graphs,
                "capture_s": self.capture_s,
                "step_clock": self.step_clock,
                "timing_tokens": min(TIMING_TOKENS, o.max_new_tokens),
            },
            "overall": self.overall() if self.runs else None,
            "prompts": [r.to_json(self.block_size or 1) for r in self.runs],
        }


# -- orchestration -----------------------------------------------------------------------------


def run_smoke(opts: SmokeOptions, progress: Any = None, log: Callable[[str], None] | None = None) -> SmokeResult:
    """Everything ``smoke-run`` does short of printing. ``progress`` is a rich ``Progress`` (or None)."""
    opts.validate()
    say = log or (lambda _msg: None)
    draft_dir, draft_label, target_dir, target_label = resolve_folders(opts)
    result = SmokeResult(draft_label, target_label, opts)

    pre = inspect_sources(LocalSource(Path(draft_dir), label=draft_label), LocalSource(Path(target_dir), label=target_label))
    result.precheck = pre
    if pre.fatal is not None:
        raise pre.fatal
    assert pre.draft is not None and pre.target is not None
    backend = select_backend(opts.backend, pre.draft, pre.target.config, pre.target.where)
    if pre.failed():
        result.refused = True
        return result
    plan = plan_target(backend, pre.target.config, pre.target.where)
    result.backend = plan.backend
    draft_args = DraftArgs.from_spec(pre.draft)

    prompts, encoder, encoded = encode_prompts(opts, target_dir)
    if plan.max_position_embeddings:
        check_positions(prompts, encoded, opts.max_new_tokens, opts.block_size or draft_args.block_size,
                        plan.max_position_embeddings, pre.target.where)
    result.prompt_format = prompt_format_causes(
        prompts, chat_template=encoder.uses_template, thinking=opts.thinking,
        custom=bool(opts.prompts or opts.prompts_file), special_tokens=special_token_texts(encoder.special_tokens))
    stops = [] if opts.ignore_eos else stop_token_ids(Path(target_dir), pre.target.config, encoder.eos_token_id)

    device, draft_dtype, target_dtype, target_inv = resolve_dtypes(opts, target_dir, target_label, plan.dtype)
    block = opts.block_size or draft_args.block_size
    result.trained_block_size = draft_args.block_size
    result.device = str(device)
    result.draft_dtype, result.target_dtype = dtype_name(draft_dtype), dtype_name(target_dtype)
    result.block_size = block
    result.tie_tolerance = opts.tie_tolerance if opts.tie_tolerance is not None else TIE_TOLERANCE[target_dtype]
    result.chat_template = encoder.uses_template
    result.stop_token_ids = stops

    draft_inv = inventory(Path(draft_dir), draft_label)
    longest = max(len(ids) for ids in encoded) + opts.max_new_tokens
    check_fits(estimate_run(target_config=pre.target.config, target_file_bytes=needed_bytes(target_inv.tensors, target_dtype),
                            target_dtype=target_dtype, draft_config=pre.draft.config,
                            draft_file_bytes=needed_bytes(draft_inv.tensors, draft_dtype), draft_dtype=draft_dtype,
                            capacity=longest + block + 1, longest=longest, block=block, backend=plan.backend,
                            taps=len(draft_args.target_layer_ids)),
               device, target_label, target_dtype=target_dtype)
    say(f"loading target {target_label} ({plan.model_type}, {result.target_dtype}, {plan.backend} backend) and draft "
        f"{draft_label} ({result.draft_dtype}) on {device}")
    result.threads = set_threads(opts.threads, device)
    target = plan.load(Path(target_dir), target_dtype, device, target_label, target_inv)
    draft = load_draft(Path(draft_dir), draft_args, dtype=draft_dtype, device=device, label=draft_label, inv=draft_inv)
    capacity = max(len(ids) for ids in encoded) + opts.max_new_tokens + block + 1
    runner: StaticRunner | None = None
    tcache = dcache = None
    if supports_static(target, draft):
        result.static_path = True
        result.cuda_graphs = device.type == "cuda" and opts.compile
        runner = StaticRunner(target, draft, capacity, block_size=block, graphs=result.cuda_graphs)
        result.capture_s = runner.capture_s
    else:
        tcache, dcache = target.new_cache(capacity), draft.new_cache(capacity)

    def run_target(ids: list[int], budget: int) -> Generation:
        return decode(target, ids, max_new_tokens=budget, stop_ids=stops, cache=tcache, runner=runner)

    def run_dflash(ids: list[int], budget: int, on_tokens: Callable[[int], None] | None = None) -> Generation:
        return dflash_decode(target, draft, ids, max_new_tokens=budget, stop_ids=stops, target_cache=tcache,
                             draft_cache=dcache, block_size=block, on_tokens=on_tokens, runner=runner)

    # One CPU thread: time each step by the thread's own CPU time, which other processes do not
    # inflate; otherwise (threads, or a GPU doing the work) by the wall clock at the step's sync.
    result.step_clock = "thread" if device.type == "cpu" and result.threads == 1 else "wall"
    with step_clock(time.thread_time if result.step_clock == "thread" else time.perf_counter):
        decode_all(result, opts, prompts, encoded, encoder, run_target, run_dflash, target, tcache, runner, progress)
    for run in result.runs:
        run.input_text = encoder.render(run.prompt)
    result.findings = judge(result, draft_args)
    return result


def decode_all(result: SmokeResult, opts: SmokeOptions, prompts: list[Prompt], encoded: list[list[int]], encoder: Any,
               run_target: Callable[..., Generation], run_dflash: Callable[..., Generation], target: Any, tcache: Any,
               runner: StaticRunner | None, progress: Any) -> None:
    """Warm up, then per prompt: time target-only decoding, decode with DFlash, check it."""
    window = min(TIMING_TOKENS, opts.max_new_tokens)
    if opts.warmup:
        run_target(encoded[0], min(WARMUP_TOKENS, opts.max_new_tokens))
        run_dflash(encoded[0], min(WARMUP_TOKENS, opts.max_new_tokens))
    task = progress.add_task("generating", total=opts.max_new_tokens * len(prompts)) if progress else None
    for prompt, ids in zip(prompts, encoded):
        advance = (lambda n: progress.advance(task, n)) if progress else None
        if progress:
            progress.update(task, description=f"{prompt.name}")
        # Target-only steps are timed in two halves around the DFlash run, so that both speeds
        # sample the same stretch of the machine's load.
        ref = run_target(ids, max(window // 2, 1))
        spec = run_dflash(ids, opts.max_new_tokens, advance)
        if window - len(ref.tokens) >= 1 and not ref.overflow and not ref.stopped:
            more = run_target(ids, window - len(ref.tokens))
            ref.tokens += more.tokens
            ref.step_s += more.step_s
            ref.decode_s += more.decode_s
            ref.overflow = more.overflow
        if progress:
            # Early stops leave part of the budget unused; count it so the bar ends full.
            progress.advance(task, opts.max_new_tokens - len(spec.tokens))
        target_tokens: list[int] = []
        if ref.overflow or spec.overflow:
            lossless = Lossless("skipped", 0)
        else:
            verdict = judge_logits(teacher_forced_logits(target, ids, spec.tokens, cache=tcache, runner=runner),
                                   spec.tokens, result.tie_tolerance)
            target_tokens, lossless = verdict.target_tokens, Lossless.of(verdict)
        result.runs.append(PromptRun(prompt, ids, ref, spec, lossless, target_tokens=target_tokens,
                                     target_text=encoder.decode(target_tokens), dflash_text=encoder.decode(spec.tokens)))


def judge(result: SmokeResult, draft_args: DraftArgs) -> list[Finding]:
    """Findings DF401-DF406 from the settings and the runs."""
    out: list[Finding] = block_size_findings(result.block_size or draft_args.block_size, draft_args.block_size)
    opts = result.options
    for run in result.runs:
        name = run.prompt.name
        for gen, who in ((run.target, "target-only"), (run.dflash, "DFlash")):
            if gen.overflow:
                out.append(finding("DF404", overflow_message(name, who, gen.overflow, result)))
        lo = run.lossless
        if lo.status in ("differs", "tie"):
            where = (f"prompt {name!r}: DFlash output differs from target-only output at new token {lo.position} "
                     f"(target {lo.target_token}, DFlash {lo.dflash_token})")
            if lo.margin is None:
                out.append(finding("DF401", f"{where}; one output is a prefix of the other"))
            elif lo.status == "tie":
                out.append(finding("DF402", f"{where}, a near tie: DFlash's token (rank {lo.rank} in the target's "
                                            f"logits) is {lo.margin:.4g} below the maximum <= tolerance "
                                            f"{result.tie_tolerance:g}; {lo.ties} tie(s), the largest {lo.largest_margin:.4g}"))
            else:
                out.append(finding("DF401", f"{where}; DFlash's token (rank {lo.rank} in the target's logits) is "
                                            f"{lo.margin:.4g} below the maximum (tolerance {result.tie_tolerance:g}), "
                                            "not a tie; rerun with --json and report it"))
    stats = result.overall() if result.runs else None
    tau = stats["tau"] if stats else None
    if stats and not stats["speedup_plausible"]:
        # Judged on the overall figures (medians over every prompt's steps, the most robust);
        # a single prompt's implausible figure is withheld in its row without a finding.
        out.append(finding(
            "DF406",
            f"measured speedup {stats['speedup_measured']:.2f}x is above tau {stats['tau']:.2f}: impossible, since "
            "a DFlash step costs at least one target step; the machine's load changed while timing, so the "
            "speedup is withheld; rerun on an idle machine or with --threads 1"))
    if tau is not None and tau < opts.min_acceptance:
        ids = list(draft_args.target_layer_ids)
        out.append(finding(
            "DF403",
            f"mean acceptance length tau {tau:.2f} is below --min-acceptance {opts.min_acceptance:g}: a draft "
            f"reading the wrong tap layers loads cleanly and lands here; check target_layer_ids {ids} against "
            f"the draft's model card (they are the 0-based outputs of target layers, not HF hidden_states "
            f"indices), mask_token_id {draft_args.mask_token_id}, and keep the draft in bfloat16"
            + prompt_format_note(result.prompt_format),
        ))
    return out


def overflow_message(name: str, who: str, where: str, result: SmokeResult) -> str:
    if where == "fused features":
        return (f"prompt {name!r}: the fused features (fc output) hold inf/NaN in the draft's "
                f"{result.draft_dtype}; target hidden-state outliers overflow there; keep the draft in bfloat16 "
                "(--draft-dtype bfloat16), target tensors are cast to it")
    return (f"prompt {name!r} ({who}): the target's {where} hold inf/NaN in {result.target_dtype}; its hidden "
            "states overflow that dtype; run the target in bfloat16 (--target-dtype bfloat16) and keep the "
            "draft in bfloat16")


__all__ = [
    "DEFAULT_MIN_ACCEPTANCE", "TIE_TOLERANCE", "Lossless", "SmokeOptions", "SmokeResult",
    "compare_outputs", "acceptance_stats", "run_smoke", "pick_device",
]
