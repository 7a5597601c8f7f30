"""``smoke-run``: prove that a draft/target pair works, and measure it.

Steps: resolve both folders; open the pair as every run opens it (``run/pair.open_pair``, one
order: what the runtime does not implement is refused, exit 2; ``inspect``'s checks on the pair
refuse it on errors; the run is planned once, ``runtime/plan.py``); load both models; choose the loop, the static one (CUDA graphs on a GPU)
only after it agreed with the eager executor on a short input (``loops.checked_loop``,
``runtime/self_check.py``: else the whole run is eager, and the JSON says why); warm up; for each prompt time target-only decoding over
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
Below the minimum of evidence (``stats/confidence.py``: 32 DFlash steps over 3 prompts) tau gets
no verdict: DF408, a warning, instead of DF403, and the speedup is withheld; a suite far below the
published figure of a known draft is DF409, a warning (``checks/evidence_findings.py``).
The thresholds (``--min-acceptance`` 2.0, the tie tolerance) are explained in ``runtime/measure.py``.

A CUDA failure (out of device memory, a busy or lost device, a driver that does not match torch,
a GPU without the dtype's kernels) is one coded line, exit 2 (``runtime/device_errors.py``).

``run_smoke_run`` is the command's work from its options (``run/options.SmokeOptions``): no
printing, no ``sys.exit``; it raises ``DFlashCkptError`` for one-line errors and returns a
``SmokeResult`` (``run/smoke_result.py``).

Sampling (``--temperature`` > 0, or ``--sampling generation-config`` with a sampling file): the
settings are checked before anything is read and the file before anything is loaded; both
decoders sample from one generator seeded by ``--seed`` on the eager loop (``runtime/loops.py``),
the named rule verifies each block, and the teacher-forced check (DF401) is skipped: a sampled
output is one draw, judged lossless as a distribution by tests/test_sampling_lossless.py.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from dflash_ckpt.checks.degenerate import smoke_degenerate_findings
from dflash_ckpt.checks.evidence_findings import evidence_findings
from dflash_ckpt.checks.published import published_draft
from dflash_ckpt.inspection import inspect_specs
from dflash_ckpt.checks.layout_findings import smoke_layout_findings
from dflash_ckpt.checks.mask_row import mask_row_findings
from dflash_ckpt.checks.precision import precision_findings
from dflash_ckpt.checks.run_findings import prompt_format_causes, smoke_findings, special_token_texts
from dflash_ckpt.draftspec.quant import summarize
from dflash_ckpt.draftspec.specs import DraftSpec, TargetSpec
from dflash_ckpt.engine_runners.smoke_engine import EngineRun
from dflash_ckpt.engine_runners.vllm_facts import version_findings as vllm_version_findings
from dflash_ckpt.errors import UsageError
from dflash_ckpt.run.options import SmokeOptions
from dflash_ckpt.rules import Finding, Severity, finding
from dflash_ckpt.run.pair import Check, OpenPair, PairFolders, Refused, open_pair, resolve_pair
from dflash_ckpt.run.smoke_result import SmokeResult
from dflash_ckpt.runtime.generate import step_clock
from dflash_ckpt.runtime.loading import dtype_name, stored_dtype
from dflash_ckpt.runtime.device_errors import DeviceFailures
from dflash_ckpt.runtime.loops import checked_loop
from dflash_ckpt.runtime.self_check import check_input
from dflash_ckpt.runtime.sampling import Sampler
from dflash_ckpt.runtime.measure import TIE_TOLERANCE, measure_prompts
from dflash_ckpt.runtime.prepack import cpu_linear_path, kernel_failed_note, prepack_pair, slow_path_note
from dflash_ckpt.run.sampling_settings import SamplingSettings, from_generation_config, make_settings
from dflash_ckpt.sources.jsonfile import decode_json_bytes
from dflash_ckpt.sources.local import LocalSource


def sampling_settings(opts: SmokeOptions, target_dir: Any, target_label: str) -> SamplingSettings:
    """The run's sampling: the options' values, or (``--sampling generation-config``) the
    target's ``generation_config.json`` read through the sources layer (torch-free); a target
    without that file is a usage error (DF004, exit 2)."""
    if opts.sampling == "options":
        return make_settings(opts.temperature, opts.top_p, opts.top_k, opts.seed, opts.verify)
    source = LocalSource(target_dir, label=target_label)
    name = "generation_config.json"
    if not source.exists(name):
        raise UsageError(f"--sampling generation-config: {source.where(name)} does not exist; give --temperature "
                         "(and --top-p, --top-k) instead", key="--sampling")
    config = decode_json_bytes(source.read_json_bytes(name), source.where(name))
    if not isinstance(config, dict):
        raise UsageError(f"--sampling generation-config: {source.where(name)} is not a JSON object", key="--sampling")
    return from_generation_config(config, seed=opts.seed, rule=opts.verify, where=source.where(name))


def run_smoke_run(opts: SmokeOptions, *, progress: Any = None, log: Callable[[str], None] | None = None) -> SmokeResult:
    """Everything ``smoke-run`` does short of printing. ``progress``: a rich ``Progress`` (or
    None); ``log``: where the loading line goes."""
    opts.validate()
    engine = engine_runner(opts.engine).start(opts) if opts.engine != "reference" else None  # DF420/DF421 before anything is read
    say = log or (lambda _msg: None)
    folders = resolve_pair(opts)
    result = SmokeResult(folders.draft_label, folders.target_label, opts)
    result.sampling = sampling_settings(opts, folders.target_dir, folders.target_label)  # before anything is loaded
    pair = open_pair(opts, folders, check=_precheck(folders, result), engine=engine,
                     sampling=result.sampling, loads=opts.engine != "vllm", prepacks=opts.compile)
    if isinstance(pair, Refused):
        result.refused = True
        if result.precheck is not None:
            result.precheck.findings += pair.unfilled
        return result
    skipped = skipped_suite_findings(pair.skipped, opts, pair.target.where)  # DF433, said whatever the run finds
    describe_plan(result, pair, opts)
    if opts.engine == "vllm":
        assert engine is not None
        say(f"running vLLM {engine.facts.version} on target {folders.target_label} and draft {folders.draft_label} "
            "in a child process")
        engine.run_into(result, pair.prompts, pair.encoded, pair.encoder)
        result.findings = _run_findings(result, pair, opts.min_acceptance) + skipped + vllm_version_findings()  # DF430
        return result
    plan = pair.plan
    with DeviceFailures(plan.device, where=folders.target_label, dtype=plan.target_dtype) as failures:
        failures.budget = pair.budget
        models, mask_row = _load_and_measure(opts, pair, result, say, progress)
    result.findings = reference_findings(result, pair, mask_row, skipped, opts.min_acceptance)
    if engine is not None:  # --engine both: vLLM on the same ids, after the reference has let go of the CPU
        del models
        say(f"running vLLM {engine.facts.version} on the same ids in a child process" if opts.engine == "both" else
            f"serving the printed vllm serve line with vLLM {engine.facts.version}: the same ids, then "
            f"{engine.concurrency} requests at once with and without the draft")
        result.findings += engine.compare_into(result, pair.prompts, pair.encoded, pair.encoder) + vllm_version_findings()
    return result


def _precheck(folders: PairFolders, result: SmokeResult) -> Check:
    """smoke-run's checks: inspect's report on both specs (``result.precheck``, in the JSON); its
    errors refuse the pair."""
    def check(draft: DraftSpec, target: TargetSpec) -> list[Finding]:
        result.precheck = inspect_specs(LocalSource(folders.draft_dir, label=folders.draft_label), draft,
                                        LocalSource(folders.target_dir, label=folders.target_label), target)
        return [f for f in result.precheck.findings if f.severity == Severity.ERROR]
    return check


def describe_plan(result: SmokeResult, pair: OpenPair, opts: SmokeOptions) -> None:
    """What the run is about to do, into ``result``: backend, device, dtypes, block and layout,
    prompt format, stops, the tie tolerance and a quantized target's layers."""
    plan, encoder = pair.plan, pair.encoder
    result.backend = plan.backend
    result.published_draft = published_draft(pair.draft)  # by the weights' fingerprint, never by a name
    result.prompt_format = prompt_format_causes(
        pair.prompts, chat_template=encoder.uses_template, thinking=opts.thinking,
        custom=opts.custom_prompts, special_tokens=special_token_texts(encoder.special_tokens))
    result.trained_block_size, result.block_size = plan.trained_block_size, plan.block_size
    result.device = str(plan.device)
    result.draft_dtype, result.target_dtype = dtype_name(plan.draft_dtype), dtype_name(plan.target_dtype)
    result.draft_dtype_stored, result.target_dtype_stored = stored_dtype(plan.draft_inv), stored_dtype(plan.target_inv)
    layout = plan.draft_args.block_layout
    result.layout, result.layout_source, result.verify_width = layout.layout, layout.source, plan.verify_width
    result.tie_tolerance = opts.tie_tolerance if opts.tie_tolerance is not None else TIE_TOLERANCE[plan.target_dtype]
    result.chat_template, result.stop_token_ids = encoder.uses_template, pair.stops
    scheme = pair.target.quant_scheme() if plan.backend == "native" else None
    if scheme is not None:
        result.quantization = summarize(scheme, plan.target_inv.tensors, result.target_dtype,
                                        tied=pair.target.tie_word_embeddings())


def _run_findings(result: SmokeResult, pair: OpenPair, min_acceptance: float) -> list[Finding]:
    """The measured run's verdicts on lossless output and tap use (DF401...), then on its evidence
    (DF403, DF408, DF409)."""
    args = pair.plan.draft_args
    return (smoke_findings(result, target_layer_ids=args.target_layer_ids, mask_token_id=args.mask_token_id)
            + evidence_findings(result.evidence(), min_acceptance=min_acceptance))


def reference_findings(result: SmokeResult, pair: OpenPair, mask_row: list[Finding], skipped: list[Finding],
                       min_acceptance: float) -> list[Finding]:
    """The reference run's findings, in report order: the run's verdicts, the degenerate pair's
    (DF413-DF415), the block layout's and the mask row's, the evidence, the suite left out and
    the precision of the dtypes on this device."""
    plan = pair.plan
    for run in result.runs:
        run.input_text = pair.encoder.render(run.prompt)
    args = plan.draft_args
    found = smoke_findings(result, target_layer_ids=args.target_layer_ids, mask_token_id=args.mask_token_id)
    found += smoke_degenerate_findings(result)
    found += smoke_layout_findings(args.block_layout, pair.draft.block_layout) + mask_row
    found += evidence_findings(result.evidence(), min_acceptance=min_acceptance)  # DF408, DF409
    capability = None
    if plan.device.type == "cuda":
        import torch  # noqa: PLC0415 - the run has loaded it already; inspect never gets here

        capability = torch.cuda.get_device_capability(plan.device)
    return found + skipped + precision_findings(result.draft_label, str(plan.device), capability, result.draft_dtype,
                                                result.target_dtype)


def _load_and_measure(opts: SmokeOptions, pair: OpenPair, result: SmokeResult, say: Callable[[str], None],
                      progress: Any) -> tuple[tuple[Any, Any, Any], list[Finding]]:
    """Load both models, choose the loop (self-checked) and measure every prompt into ``result``;
    returns the models and the loop (``--engine both`` lets go of them before vLLM starts) and the
    mask row's findings (DF431: judged on the loaded values, which no header holds)."""
    plan, prompts, encoder, encoded, stops = pair.plan, pair.prompts, pair.encoder, pair.encoded, pair.stops
    device = plan.device
    target_model, draft_model, result.threads = pair.load(opts.threads, say, plan.target.model_type)
    mask_row = mask_row_findings(target_model.embed_tokens.weight, plan.draft_args.mask_token_id, pair.folders.draft_dir,
                                 plan.draft_inv.tensors, pair.folders.target_label)
    if device.type == "cpu" and opts.compile:
        result.prepacked_weights, result.prepack_s = prepack_pair(target_model, draft_model)
        if note := slow_path_note(target_model, draft_model):
            say(note)
    if device.type == "cpu":
        result.cpu_linear = cpu_linear_path(target_model, draft_model)
    sampler = None if result.sampling.greedy else Sampler.of(result.sampling, device)
    # The static loop only after its self-check against the eager executor (runtime/self_check.py).
    loop, choice = checked_loop(target_model, draft_model, plan.capacity, block_size=plan.block_size,
                                graphs=device.type == "cuda" and opts.compile, sampler=sampler,
                                check_prompt=check_input(encoded), max_new_tokens=opts.max_new_tokens, say=say)
    result.static_path = loop.static
    result.cuda_graphs = choice.executor == "static-graphs"
    result.capture_s = choice.capture_s
    result.loop_choice = choice

    # One CPU thread: time each step by the thread's own CPU time, which other processes do not
    # inflate; otherwise (threads, or a GPU doing the work) by the wall clock at the step's sync.
    result.step_clock = "thread" if device.type == "cpu" and result.threads == 1 else "wall"
    with step_clock(time.thread_time if result.step_clock == "thread" else time.perf_counter):
        result.runs = measure_prompts(loop, prompts, encoded, encoder, max_new_tokens=opts.max_new_tokens, stop_ids=stops,
                                      tie_tolerance=result.tie_tolerance, warmup=opts.warmup, progress=progress)
    if result.cpu_linear == "avx2-kernel" and (note := kernel_failed_note()):  # torch's path took over mid-run
        result.cpu_linear = "torch"
        say(note)
    return (target_model, draft_model, loop), mask_row


def skipped_suite_findings(skipped: list[str], opts: SmokeOptions, target_where: str) -> list[Finding]:
    """DF433: the ``--suite`` prompts left out because they do not fit the target's positions."""
    if not skipped:
        return []
    return [finding(
        "DF433",
        f"--suite {opts.suite}: {len(skipped)} prompt(s) left out ({', '.join(skipped)}): with -n "
        f"{opts.max_new_tokens} and one verify block they need more positions than the target's "
        "max_position_embeddings; the suite's figures are over the other prompts",
        path=target_where, key="max_position_embeddings")]


def engine_runner(name: str) -> type[EngineRun]:
    """The engine's runner: ``vllm`` and ``both`` the offline one, ``vllm-serve`` the served one."""
    if name == "vllm-serve":
        from dflash_ckpt.engine_runners.serve_engine import ServeRun

        return ServeRun
    return EngineRun


__all__ = ["SmokeOptions", "SmokeResult", "run_smoke_run", "skipped_suite_findings"]
