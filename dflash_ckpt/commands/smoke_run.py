"""``smoke-run``: prove that a draft/target pair works, and measure it.

Steps: resolve both folders; run ``inspect``'s checks on the pair and refuse it on errors;
refuse what the reference runtime does not implement (exit 2); plan the run once
(``runtime/plan.py``); load both models; warm up; for each prompt time target-only decoding over
a short window, decode with DFlash, and check the DFlash output with ONE teacher-forced target
forward over prompt + output (every position's argmax and top-2 margin: greedy decoding
reproduces the output exactly when every argmax is its token, so the target never decodes
everything a second time); gather acceptance and speed figures (``runtime/measure.py``); judge
(``checks/run_findings.py``).

Verdict (exit code): 0 pass; 1 when the pair was refused by the checks, DFlash's output differs
from the target's beyond a tie (DF401), the mean acceptance length is below ``--min-acceptance``
(DF403), or non-finite values reached the draft (DF404), or the pair is degenerate: a weight matrix
reads back as zeros or one constant (DF413, sampled before loading), the target's logits tie at
every position (DF414), every output is one token repeated (DF415); 2 for usage errors and unsupported pairs.
The thresholds (``--min-acceptance`` 2.0, the tie tolerance) are explained in ``runtime/measure.py``.

``run_smoke_run`` is the command's work with the CLI's long options as keywords: no printing, no
``sys.exit``; it raises ``DFlashCkptError`` for one-line errors and returns a ``SmokeResult``.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar, Sequence

from dflash_ckpt.checks.acceptance import refuse_unimplemented
from dflash_ckpt.checks.degenerate import smoke_degenerate_findings
from dflash_ckpt.sources.weight_sample import unfilled_weights
from dflash_ckpt.inspection import InspectResult, inspect_sources
from dflash_ckpt.checks.precision import precision_findings
from dflash_ckpt.checks.layout_findings import smoke_layout_findings
from dflash_ckpt.draftspec.layout import resolve_layout
from dflash_ckpt.checks.run_findings import prompt_format_causes, smoke_findings, special_token_texts
from dflash_ckpt.checks.target_config import check_target_config
from dflash_ckpt.draftspec.quant_layers import summarize
from dflash_ckpt.draftspec.quant_scheme import read_scheme
from dflash_ckpt.commands.options import DEFAULT_MAX_NEW_TOKENS, DEFAULT_MIN_ACCEPTANCE
from dflash_ckpt.engines.smoke_engine import EngineRun, validate_engine_options
from dflash_ckpt.errors import UsageError
from dflash_ckpt.result import ResultShape
from dflash_ckpt.rules import Finding, Severity
from dflash_ckpt.runtime.backend import select_backend
from dflash_ckpt.runtime.generate import step_clock
from dflash_ckpt.runtime.loading import dtype_name, load_draft
from dflash_ckpt.runtime.loops import make_loop
from dflash_ckpt.runtime.measure import TIE_TOLERANCE, TIMING_TOKENS, PromptRun, measure_prompts, overall_figures
from dflash_ckpt.runtime.memory import check_fits, estimate_run, needed_bytes
from dflash_ckpt.runtime.prepack import prepack_pair
from dflash_ckpt.runtime.plan import RunOptions, encode_prompts, plan_run, resolve_folders, set_threads
from dflash_ckpt.sources.local import LocalSource
from dflash_ckpt.sources.prompts import stop_token_ids
from dflash_ckpt.sources.weights import load_inventory


@dataclass
class SmokeOptions(RunOptions):
    """``RunOptions`` and smoke-run's own."""

    tie_tolerance: float | None = None
    warmup: bool = True
    threads: int | None = None
    compile: bool = True
    #: ``reference`` (our runtime), ``vllm`` or ``both`` (``engines/``), and what goes through to vLLM.
    engine: str = "reference"
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    max_model_len: int | None = None
    engine_arg: list[str] = field(default_factory=list)
    engine_timeout: float | None = None

    def validate_own(self) -> None:
        validate_engine_options(self)
        if self.tie_tolerance is not None and (not math.isfinite(self.tie_tolerance) or self.tie_tolerance < 0):
            raise UsageError(f"--tie-tolerance {self.tie_tolerance}: must be a number >= 0")
        if self.threads is not None and self.threads < 1:
            raise UsageError(f"--threads {self.threads}: must be at least 1")


@dataclass
class SmokeResult(ResultShape):
    command: ClassVar[str] = "smoke-run"
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
    #: Weights reordered once into oneDNN's layout (CPU, bf16; ``runtime/prepack.py``), and the
    #: seconds that took (apart from every other figure).
    prepacked_weights: int = 0
    prepack_s: float = 0.0
    #: What times the steps: ``thread`` (the decoding thread's CPU time) or ``wall``.
    step_clock: str = "wall"
    #: ``--engine vllm|both``: which vLLM ran, its own counters, and (``both``) the comparison.
    engine_run: dict[str, Any] | None = None
    #: ``--engine both``: vLLM's runs and their comparison with ``runs`` (in ``engine_run`` as JSON).
    engine_runs: list[PromptRun] = field(default_factory=list)
    comparisons: list[Any] = field(default_factory=list)
    #: A quantized target's format and what was dequantized (``quant_layers.summarize``), else None.
    quantization: dict[str, Any] | None = None
    #: The block layout that ran (``1+N`` or ``anchor-first``), what decided it (a config key,
    #: ``architectures``, ``default`` or ``--layout``) and the verify width it gives.
    layout: str | None = None
    layout_source: str | None = None
    verify_width: int | None = None

    @property
    def exit_code(self) -> int:
        errors = any(f.severity == Severity.ERROR for f in self.findings)
        return 1 if self.refused or errors else 0

    def overall(self) -> dict[str, Any]:
        return overall_figures(self.runs, self.verify_width or self.block_size or 1)

    def to_json(self) -> dict[str, Any]:
        o = self.options
        return {
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
                "layout": self.layout,
                "layout_source": self.layout_source,
                "verify_width": self.verify_width,
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
                "prepacked_weights": self.prepacked_weights,
                "prepack_s": self.prepack_s,
                "step_clock": self.step_clock,
                "timing_tokens": min(TIMING_TOKENS, o.max_new_tokens),
                "engine": o.engine,
            },
            "engine_run": self.engine_run,
            "overall": self.overall() if self.runs else None,
            "prompts": [r.to_json(self.verify_width or self.verify_width or self.block_size or 1) for r in self.runs],
            "quantization": self.quantization,
        }


# -- the run -----------------------------------------------------------------------------------


def run_smoke_run(draft: str, target: str, *, prompt: Sequence[str] = (), prompts: str | None = None,
                  max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS, min_acceptance: float = DEFAULT_MIN_ACCEPTANCE,
                  draft_dtype: str = "bfloat16", target_dtype: str | None = None, device: str = "auto",
                  backend: str = "auto", block_size: int | None = None, layout: str | None = None,
                  thinking: bool = False,
                  no_chat_template: bool = False, tokenizer: str | None = None, ignore_eos: bool = False,
                  tie_tolerance: float | None = None, revision: str | None = None, token: str | None = None,
                  threads: int | None = None, no_compile: bool = False, engine: str = "reference",
                  tensor_parallel_size: int = 1, pipeline_parallel_size: int = 1, max_model_len: int | None = None,
                  engine_arg: Sequence[str] = (), engine_timeout: float | None = None,
                  progress: Any = None, log: Callable[[str], None] | None = None) -> SmokeResult:
    """``dflash-ckpt smoke-run DRAFT --target TARGET``: keywords are its long options (``prompt`` is
    ``-p``, repeatable; ``prompts`` the JSONL file). ``progress``: a rich ``Progress``; ``log``: where
    the loading line goes. Returns the result; raises ``DFlashCkptError`` for one-line errors."""
    opts = SmokeOptions(
        draft=draft, target=target, prompts=list(prompt), prompts_file=prompts, max_new_tokens=max_new_tokens,
        min_acceptance=min_acceptance, draft_dtype=draft_dtype, target_dtype=target_dtype, device=device,
        backend=backend, block_size=block_size, layout=layout, thinking=thinking, chat_template=not no_chat_template,
        tokenizer=tokenizer, ignore_eos=ignore_eos, tie_tolerance=tie_tolerance, revision=revision, token=token,
        threads=threads, compile=not no_compile, engine=engine, tensor_parallel_size=tensor_parallel_size,
        pipeline_parallel_size=pipeline_parallel_size, max_model_len=max_model_len, engine_arg=list(engine_arg),
        engine_timeout=engine_timeout)
    return run_smoke(opts, progress=progress, log=log)


def _tied(config: dict[str, Any]) -> bool:
    """Whether the target ties its head to its embeddings (Qwen3's small sizes do)."""
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    return text.get("tie_word_embeddings", config.get("tie_word_embeddings")) is True


def run_smoke(opts: SmokeOptions, progress: Any = None, log: Callable[[str], None] | None = None) -> SmokeResult:
    """Everything ``smoke-run`` does short of printing. ``progress`` is a rich ``Progress`` (or None)."""
    opts.validate()
    engine = EngineRun.start(opts) if opts.engine != "reference" else None  # DF420/DF421 before anything is read
    say = log or (lambda _msg: None)
    draft_dir, draft_label, target_dir, target_label = resolve_folders(opts)
    result = SmokeResult(draft_label, target_label, opts)

    pre = inspect_sources(LocalSource(Path(draft_dir), label=draft_label), LocalSource(Path(target_dir), label=target_label))
    result.precheck = pre
    if pre.fatal is not None:
        raise pre.fatal
    assert pre.draft is not None and pre.target is not None
    refuse_unimplemented(pre.draft)  # DF151, exit 2: never measure a draft without its acceptance keys
    check_target_config(pre.target.config, pre.target.where)  # either backend, before anything is built
    if engine is not None:
        engine.refuse_pair(pre.draft, pre.target)  # DF422-DF424, exit 2, before an engine starts
    backend = select_backend(opts.backend, pre.draft, pre.target.config, pre.target.where)
    headers = load_inventory(LocalSource(Path(target_dir), label=target_label))  # unreadable: refused below
    check_target_config(pre.target.config, pre.target.where, headers.tensors)
    target_inv = headers if headers.tensors and not headers.problems else None
    if pre.failed():
        result.refused = True
        return result

    prompts, encoder, encoded = encode_prompts(opts, target_dir)
    plan = plan_run(opts, draft=pre.draft, draft_dir=Path(draft_dir), target_dir=Path(target_dir),
                    target_label=target_label, target_config=pre.target.config, target_where=pre.target.where,
                    backend=backend, prompts=prompts, encoded=encoded, target_inv=target_inv)
    result.backend = plan.backend
    result.prompt_format = prompt_format_causes(
        prompts, chat_template=encoder.uses_template, thinking=opts.thinking,
        custom=bool(opts.prompts or opts.prompts_file), special_tokens=special_token_texts(encoder.special_tokens))
    stops = [] if opts.ignore_eos else stop_token_ids(Path(target_dir), pre.target.config, encoder.eos_token_id)

    device = plan.device
    result.trained_block_size = plan.trained_block_size
    result.device = str(device)
    result.draft_dtype, result.target_dtype = dtype_name(plan.draft_dtype), dtype_name(plan.target_dtype)
    result.block_size = plan.block_size
    layout = plan.draft_args.block_layout
    result.layout, result.layout_source = layout.layout, layout.source
    result.verify_width = layout.verify_width(plan.block_size)
    result.tie_tolerance = opts.tie_tolerance if opts.tie_tolerance is not None else TIE_TOLERANCE[plan.target_dtype]
    result.chat_template = encoder.uses_template
    result.stop_token_ids = stops
    scheme = read_scheme(pre.target.config, pre.target.where) if plan.backend == "native" else None
    if scheme is not None:
        result.quantization = summarize(scheme, plan.target_inv.tensors, result.target_dtype,
                                        tied=_tied(pre.target.config))

    if engine is not None:
        engine.prepare(draft_dir=Path(draft_dir), target_dir=Path(target_dir), plan=plan, encoded=encoded, stops=stops,
                       max_new_tokens=opts.max_new_tokens, where=target_label, max_positions=pre.target.config.get("max_position_embeddings"))
    if opts.engine == "vllm":
        say(f"running vLLM {engine.facts.version} on target {target_label} and draft {draft_label} in a child process")
        engine.run_into(result, prompts, encoded, encoder)
        result.findings = smoke_findings(result, target_layer_ids=plan.draft_args.target_layer_ids,
                                         mask_token_id=plan.draft_args.mask_token_id)
        return result
    longest = max(len(ids) for ids in encoded) + opts.max_new_tokens
    check_fits(estimate_run(target_config=pre.target.config,
                            target_file_bytes=needed_bytes(plan.target_inv.tensors, plan.target_dtype),
                            target_dtype=plan.target_dtype, draft_config=pre.draft.config,
                            draft_file_bytes=needed_bytes(plan.draft_inv.tensors, plan.draft_dtype),
                            draft_dtype=plan.draft_dtype, capacity=plan.capacity, longest=longest,
                            block=plan.block_size, backend=plan.backend, taps=len(plan.draft_args.target_layer_ids),
                            prepacked=device.type == "cpu" and opts.compile),
               device, target_label, target_dtype=plan.target_dtype)
    unfilled = unfilled_weights(Path(draft_dir), plan.draft_inv, Path(target_dir), plan.target_inv)  # DF413
    if unfilled:  # sampled after the memory check (about the machine), before anything is loaded
        pre.findings += unfilled
        result.refused = True
        return result
    say(f"loading target {target_label} ({plan.target.model_type}, {result.target_dtype}, {plan.backend} backend) and draft "
        f"{draft_label} ({result.draft_dtype}) on {device}")
    result.threads = set_threads(opts.threads, device)
    target_model = plan.target.load(Path(target_dir), plan.target_dtype, device, target_label, plan.target_inv)
    draft_model = load_draft(Path(draft_dir), plan.draft_args, dtype=plan.draft_dtype, device=device, label=draft_label,
                             inv=plan.draft_inv)
    if device.type == "cpu" and opts.compile:
        result.prepacked_weights, result.prepack_s = prepack_pair(target_model, draft_model)
    loop = make_loop(target_model, draft_model, plan.capacity, block_size=plan.block_size,
                     graphs=device.type == "cuda" and opts.compile)
    result.static_path = loop.static
    result.cuda_graphs = loop.static and device.type == "cuda" and opts.compile
    result.capture_s = loop.capture_s

    # One CPU thread: time each step by the thread's own CPU time, which other processes do not
    # inflate; otherwise (threads, or a GPU doing the work) by the wall clock at the step's sync.
    result.step_clock = "thread" if device.type == "cpu" and result.threads == 1 else "wall"
    with step_clock(time.thread_time if result.step_clock == "thread" else time.perf_counter):
        result.runs = measure_prompts(loop, prompts, encoded, encoder, max_new_tokens=opts.max_new_tokens, stop_ids=stops,
                                      tie_tolerance=result.tie_tolerance, warmup=opts.warmup, progress=progress)
    for run in result.runs:
        run.input_text = encoder.render(run.prompt)
    result.findings = smoke_findings(result, target_layer_ids=plan.draft_args.target_layer_ids,
                                     mask_token_id=plan.draft_args.mask_token_id) + smoke_degenerate_findings(result)
    result.findings += smoke_layout_findings(layout, resolve_layout(pre.draft.config))
    capability = None
    if device.type == "cuda":
        import torch  # noqa: PLC0415 - the run has loaded it already; inspect never gets here

        capability = torch.cuda.get_device_capability(device)
    result.findings += precision_findings(draft_label, str(device), capability, result.draft_dtype, result.target_dtype)
    if engine is not None:  # --engine both: vLLM on the same ids, after the reference has let go of the CPU
        del target_model, draft_model, loop
        say(f"running vLLM {engine.facts.version} on the same ids in a child process")
        result.findings += engine.compare_into(result, prompts, encoded, encoder)
    return result


__all__ = ["SmokeOptions", "SmokeResult", "run_smoke", "run_smoke_run"]
