"""smoke-run's ``--engine vllm|both``: the steps the command takes around a vLLM run, in order.

``EngineRun.start`` reads the install's facts and refuses a missing vLLM or one without DFlash
(DF420/DF421) before anything else is read; ``refuse_pair`` refuses what vLLM would refuse or die
on after starting (DF422-DF424); ``prepare`` builds the child's request from the run's plan (the
reference path's ids, stops, block and dtype) and checks vLLM's own memory budget (DF407);
``run_into`` fills a ``SmokeResult`` with vLLM's runs (``--engine vllm``); ``compare_into``
runs vLLM beside the reference's runs and returns DF426/DF427 (``--engine both``).

Sampled runs (temperature > 0): vLLM samples with the run's temperature, top-p, top-k and seed
and verifies with its own rejection sampler (``vllm_smoke.RULE``); with DFlash's argmax drafts
``match`` and ``rejection`` have the same law, so its acceptance is compared with ours whichever
rule the reference ran, and the rule vLLM ran is named (``--engine vllm`` records it as the run's
rule). Tokens are not compared (no DF427), acceptance is (DF426, ``acceptance_summary``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Sequence

from dflash_ckpt.checks.engine_compare import acceptance_summary, compare_prompts, engine_findings
from dflash_ckpt.draftspec.specs import DraftSpec, TargetSpec
from dflash_ckpt.engine_runners.vllm_facts import VllmFacts, read_facts
from dflash_ckpt.engine_runners.engine_args import flag_values, parse_engine_args
from dflash_ckpt.engine_runners.vllm_run import DEFAULT_TIMEOUT_S, MAX_TIMEOUT_S, refuse_install, refuse_pair
from dflash_ckpt.engine_runners.vllm_smoke import (RULE, EngineOptions, build_request, require_engine_memory,
                                            engine_summary, run_vllm, to_runs)
from dflash_ckpt.errors import UsageError
from dflash_ckpt.rules import Finding

ENGINES = ("reference", "vllm", "both", "vllm-serve")


def validate_engine_options(opts: Any) -> None:
    """Usage errors in ``--engine`` and the options it passes through (exit 2, DF004)."""
    if opts.engine not in ENGINES:
        raise UsageError(f"--engine {opts.engine}: choose reference, vllm, both or vllm-serve", key="--engine")
    concurrency = getattr(opts, "concurrency", None)
    if concurrency is not None:
        from dflash_ckpt.engine_runners.serve_load import MAX_CONCURRENCY

        if opts.engine != "vllm-serve":
            raise UsageError("--concurrency: only with --engine vllm-serve (the load phase of the served run)",
                             key="--concurrency")
        if not 1 <= concurrency <= MAX_CONCURRENCY:
            raise UsageError(f"--concurrency {concurrency}: must be 1 to {MAX_CONCURRENCY}", key="--concurrency")
    for name in ("tensor_parallel_size", "pipeline_parallel_size", "max_model_len"):
        value = getattr(opts, name)
        if value is not None and value < 1:
            raise UsageError(f"--{name.replace('_', '-')} {value}: must be at least 1", key=f"--{name.replace('_', '-')}")
    if opts.engine_timeout is not None and not (math.isfinite(opts.engine_timeout)
                                                and 0 < opts.engine_timeout <= MAX_TIMEOUT_S):
        raise UsageError(f"--engine-timeout {opts.engine_timeout:g}: must be a number of seconds above 0 and at most "
                         f"{MAX_TIMEOUT_S:g} (24 h); a hung engine is stopped at this deadline", key="--engine-timeout")
    engine_options(opts)
    if opts.engine == "vllm-serve":
        given = [flag for flag, set_ in (("--pipeline-parallel-size", opts.pipeline_parallel_size != 1),
                                         ("--max-model-len", opts.max_model_len is not None),
                                         ("--engine-arg", bool(opts.engine_arg)),
                                         ("--temperature", getattr(opts, "temperature", 0.0) != 0.0),
                                         ("--sampling generation-config",
                                          getattr(opts, "sampling", "options") != "options")) if set_]
        if given:
            raise UsageError(f"{', '.join(given)}: not with --engine vllm-serve, which runs the printed serve line "
                             "as it is, greedy (only host, port, name and --tensor-parallel-size are added); use "
                             "--engine vllm or both for these", key=given[0].split()[0])
    if opts.engine == "reference":
        given = [flag for flag, set_ in (("--tensor-parallel-size", opts.tensor_parallel_size != 1),
                                         ("--pipeline-parallel-size", opts.pipeline_parallel_size != 1),
                                         ("--max-model-len", opts.max_model_len is not None),
                                         ("--engine-arg", bool(opts.engine_arg)),
                                         ("--engine-timeout", opts.engine_timeout is not None)) if set_]
        if given:
            raise UsageError(f"{', '.join(given)}: only with --engine vllm or both (the reference runtime runs on one "
                             "device)", key=given[0])


def engine_options(opts: Any) -> EngineOptions:
    """The options passed to vLLM: the flags, ``--engine-arg``'s allow-listed keywords
    (``engine_args.parse_engine_args``; a keyword that is a flag's is taken as the flag) and the
    deadline. Raises the one DF004 line of a refused keyword or value."""
    args = parse_engine_args(opts.engine_arg)
    flags = flag_values(args, {"tensor_parallel_size": opts.tensor_parallel_size,
                               "pipeline_parallel_size": opts.pipeline_parallel_size,
                               "max_model_len": opts.max_model_len},
                        {"tensor_parallel_size": 1, "pipeline_parallel_size": 1, "max_model_len": None})
    return EngineOptions(opts.engine, flags["tensor_parallel_size"], flags["pipeline_parallel_size"],
                         flags["max_model_len"], args, opts.engine_timeout or DEFAULT_TIMEOUT_S)


@dataclass
class EngineRun:
    facts: VllmFacts
    options: EngineOptions
    request: dict[str, Any] = field(default_factory=dict)
    kv_space_gib: int | None = None
    tie_tolerance: float = 0.5

    @classmethod
    def start(cls, opts: Any) -> EngineRun:
        facts = read_facts()
        refuse_install(facts)
        return cls(facts, engine_options(opts))

    def refuse_pair(self, draft: DraftSpec, target: TargetSpec) -> None:
        """What this vLLM would not run of the pair (DF422-DF424, exit 2): step 4 of the opening
        (``run/pair.open_pair``), before an engine starts."""
        from dflash_ckpt.engine_runners.tensor_parallel import refuse_heads

        refuse_pair(self.facts, draft=draft, target=target)
        refuse_heads(self.options.tensor_parallel_size, [(target.where, target.dims), (draft.where, draft.dims)])

    def prepare(self, pair: Any, sampling: Any = None) -> None:
        """The child's request from the opened pair (``run/pair.OpenPair``: its folders, plan,
        prompts and stops) and the run's sampling, and vLLM's memory budget (DF407)."""
        from dflash_ckpt.runtime.loading import dtype_name
        from dflash_ckpt.runtime.measure import TIE_TOLERANCE
        from dflash_ckpt.runtime.memory import needed_bytes

        plan, folders = pair.plan, pair.folders
        self.tie_tolerance = TIE_TOLERANCE[plan.target_dtype]
        weights = (needed_bytes(plan.target_inv.tensors, plan.target_dtype)
                   + needed_bytes(plan.draft_inv.tensors, plan.target_dtype))
        self.kv_space_gib = require_engine_memory(self.facts, weights, folders.target_label)
        self.request = build_request(self.options, target_dir=folders.target_dir, draft_dir=folders.draft_dir,
                                     dtype=dtype_name(plan.target_dtype), block_size=plan.block_size,
                                     encoded=pair.encoded, max_new_tokens=pair.max_new_tokens,
                                     stop_ids=pair.stops, max_positions=pair.target.max_position_embeddings,
                                     sampling=sampling)

    @property
    def sampled(self) -> bool:
        return bool(self.request.get("sampling"))

    def _run(self, result: Any, prompts: Sequence[Any], encoded: Sequence[list[int]], encoder: Any) -> tuple[list[Any], list[Any]]:
        tol = result.tie_tolerance if result.tie_tolerance is not None else self.tie_tolerance
        raw = run_vllm(self.request, facts=self.facts, eng=self.options, kv_space_gib=self.kv_space_gib,
                       where=result.target_label)
        runs, extras, tops = to_runs(raw, prompts, encoded, encoder, tie_tolerance=tol, sampled=self.sampled)
        for run in runs:
            run.input_text = encoder.render(run.prompt)
        result.engine_run = engine_summary(raw, self.facts, self.options, extras, self.request.get("sampling"))
        return runs, tops

    def run_into(self, result: Any, prompts: Sequence[Any], encoded: Sequence[list[int]], encoder: Any) -> None:
        """``--engine vllm``: vLLM's runs are the result's runs."""
        result.backend = "vllm"
        result.device = "cpu" if self.facts.cpu_build else "cuda"
        result.draft_dtype = result.target_dtype  # vLLM runs the draft in the target's dtype
        result.step_clock = "wall"
        if self.sampled:  # the rule that ran is vLLM's, whatever --verify said
            result.sampling = replace(result.sampling, rule=RULE)
        result.runs, _ = self._run(result, prompts, encoded, encoder)

    def compare_into(self, result: Any, prompts: Sequence[Any], encoded: Sequence[list[int]], encoder: Any) -> list[Finding]:
        """``--engine both``: vLLM's runs beside the reference's (``result.runs``), compared."""
        runs, tops = self._run(result, prompts, encoded, encoder)
        tol = result.tie_tolerance if result.tie_tolerance is not None else self.tie_tolerance
        block = result.block_size or 1
        comparisons = compare_prompts(result.runs, runs, tops, block=block, tolerance=tol, sampled=self.sampled)
        assert result.engine_run is not None
        result.engine_run["runs"] = [r.to_json(block) for r in runs]
        result.engine_run["comparison"] = [c.to_json() for c in comparisons]
        if self.sampled:
            result.engine_run["acceptance"] = acceptance_summary(result.runs, runs, result.engine_run["vllm_metrics"],
                                                                 block)
        result.engine_runs = runs
        result.comparisons = comparisons
        return engine_findings("vLLM", comparisons, result.runs, runs, tol, sampled=self.sampled)
