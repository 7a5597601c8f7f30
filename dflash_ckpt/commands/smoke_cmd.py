"""``dflash-ckpt smoke-run``: the command's options, filled into ``SmokeOptions`` for ``run/smoke.run_smoke_run``, then the report.

Only typer is imported here; torch and the runtime are imported inside the command body, so
``import dflash_ckpt.cli`` (and ``inspect``) never load torch.
"""

from __future__ import annotations

from typing import List, Literal, Optional

import typer

from dflash_ckpt.commands.options import (DEFAULT, Annotations, AnnotationsOpt, RunOutputFormat, RunOutputFormatOpt, BackendOpt, BlockSizeOpt,
                                          DeviceOpt, DraftArg, DraftDtypeOpt, EngineOpt, IgnoreEosOpt, LayoutOpt, NoChatTemplateOpt,
                                          PairTargetOpt, PromptOpt, PromptsFileOpt, QuietOpt, RevisionOpt,
                                          TargetDtypeOpt, ThinkingOpt, TokenizerOpt, TokenOpt, ReportOpt, check_report,
                                          group_options, starting_run)
from dflash_ckpt.run.options import SmokeOptions


#: smoke-run's help panels (``options.RUN_PANELS``): what to run, how it samples, what runs it, what it prints.
PANELS: dict[str, tuple[str, ...]] = {
    "What to run": ("target", "prompt", "prompts", "suite", "max_new_tokens", "min_acceptance", "block_size", "layout",
                    "thinking", "no_chat_template", "tokenizer", "ignore_eos", "tie_tolerance", "revision", "token"),
    "Sampling": ("temperature", "top_p", "top_k", "seed", "verify", "sampling"),
    "Engine": ("draft_dtype", "target_dtype", "device", "backend", "threads", "no_compile", "engine",
               "tensor_parallel_size", "pipeline_parallel_size", "max_model_len", "engine_arg", "engine_timeout", "concurrency"),
    "Output": ("show_text", "json_out", "output_format", "annotations", "quiet", "report"),
}


def register(app: typer.Typer) -> None:
    """Add the ``smoke-run`` command to ``app``."""

    @app.command("smoke-run")
    def smoke_run(
        draft: str = DraftArg,
        target: str = PairTargetOpt,
        prompt: Optional[List[str]] = PromptOpt,
        prompts: Optional[str] = PromptsFileOpt,
        suite: Optional[str] = typer.Option(
            DEFAULT, "--suite", metavar="SUITE",
            help="math, code, chat, long or all: run a prompt suite of this tool (12-20 prompts per task, written for it) instead of -p/--prompts; "
                 "the report gives tau per suite, beside the published figures of a known draft."),
        max_new_tokens: int = typer.Option(DEFAULT, "--max-new-tokens", "-n", help="New tokens per prompt and decoder (the longest prompt, these and one block must fit the target's max_position_embeddings)."),
        min_acceptance: float = typer.Option(
            DEFAULT, "--min-acceptance",
            help="Fail when the mean acceptance length tau (tokens per step, bonus included) is below this. "
                 "A draft reading the wrong tap layers stays near 1; working drafts reach 4 and more."),
        draft_dtype: str = DraftDtypeOpt,
        target_dtype: Optional[str] = TargetDtypeOpt,
        device: str = DeviceOpt,
        backend: Literal["auto", "native", "transformers"] = BackendOpt,
        block_size: Optional[int] = BlockSizeOpt,
        layout: Optional[str] = LayoutOpt,
        thinking: bool = ThinkingOpt,
        no_chat_template: bool = NoChatTemplateOpt,
        tokenizer: Optional[str] = TokenizerOpt,
        ignore_eos: bool = IgnoreEosOpt,
        tie_tolerance: Optional[float] = typer.Option(
            DEFAULT, "--tie-tolerance",
            help="Top-2 logit margin under which a divergence counts as a tie (default by target dtype: "
                 "fp32 1e-3, fp16 0.0625, bf16 0.5)."),
        revision: Optional[str] = RevisionOpt,
        token: Optional[str] = TokenOpt,
        threads: Optional[int] = typer.Option(
            DEFAULT, "--threads",
            help="CPU threads for torch (default: 1 on CPUs with up to 4 logical cores, where spin-waiting "
                 "threads slow tiny models down, unless OMP_NUM_THREADS is set; else torch's default; at most 4 "
                 "per logical CPU)."),
        no_compile: bool = typer.Option(
            DEFAULT, "--no-compile",
            help="On CUDA, run eagerly instead of replaying CUDA graphs of the decode, draft and verify steps "
                 "(captured once; the capture time is reported apart). On a CPU, run torch's plain bf16 matrix "
                 "products instead of weights reordered once into oneDNN's layout (the same values, about 2x "
                 "slower at decode)."),
        engine: Literal["reference", "vllm", "both", "vllm-serve"] = EngineOpt,
        concurrency: Optional[int] = typer.Option(DEFAULT, "--concurrency", help="vLLM's server (--engine vllm-serve): requests at once in the load phase (default 4).", show_default=False),
        tensor_parallel_size: int = typer.Option(DEFAULT, "--tensor-parallel-size", help="vLLM: GPUs the target is split over (--engine vllm|both)."),
        pipeline_parallel_size: int = typer.Option(DEFAULT, "--pipeline-parallel-size", help="vLLM: pipeline stages (--engine vllm|both)."),
        max_model_len: Optional[int] = typer.Option(DEFAULT, "--max-model-len", help="vLLM: positions per sequence (default: what the prompts, -n and one block need, at least 256).", show_default=False),
        engine_arg: Optional[List[str]] = typer.Option(DEFAULT, "--engine-arg", metavar="KEY=VALUE", help="vLLM: an allow-listed keyword of vllm.LLM that changes how it runs, not what it runs (repeatable), e.g. gpu_memory_utilization=0.85; docs/engines.md lists them."),
        engine_timeout: Optional[float] = typer.Option(DEFAULT, "--engine-timeout", help="vLLM: seconds the whole engine run may take before it is stopped (default 900, at most 86400).", show_default=False),
        temperature: float = typer.Option(DEFAULT, "--temperature", help="Sample at this temperature (0: greedy, the default, with the exact lossless check; Qwen3 is served at 0.6). Sampled runs run eagerly."),
        top_p: float = typer.Option(DEFAULT, "--top-p", help="Sampling: keep the most probable tokens up to this mass (1: off)."),
        top_k: int = typer.Option(DEFAULT, "--top-k", help="Sampling: keep the k most probable tokens (0: off)."),
        seed: int = typer.Option(DEFAULT, "--seed", help="Sampling: the seed of the run's one random generator (the same seed, device and options give the same tokens)."),
        verify: Literal["match", "rejection"] = typer.Option(DEFAULT, "--verify", help="Sampling: how drafts are accepted: match (draft == the target's sample: the z-lab reference and the paper's tables) or rejection (speculative sampling as vLLM and SGLang run it)."),
        sampling: Literal["options", "generation-config"] = typer.Option(DEFAULT, "--sampling", metavar="SOURCE", help="options (--temperature, --top-p, --top-k) or generation-config (the target's generation_config.json, as vLLM serves it)."),
        show_text: bool = typer.Option(False, "--show-text", help="Print each prompt's generated text under the table (the JSON always has it)."),
        json_out: bool = typer.Option(False, "--json", help="Print one JSON document with every figure, ids, texts and acceptance lengths."),
        output_format: RunOutputFormat = RunOutputFormatOpt,
        annotations: Annotations = AnnotationsOpt,
        quiet: bool = QuietOpt,
        report: Optional[str] = ReportOpt,
    ) -> None:
        """Decode with the target alone and with DFlash; check the outputs match and measure acceptance and speed.

        Exit codes: 0 pass, or no verdict on too little evidence (DF408, a warning: under 32 DFlash steps
        or 3 prompts); 1 refused by inspect's checks, output differs beyond a tie, tau below
        --min-acceptance, or overflow; 2 usage error, a pair neither backend supports, or a target too big for the device.
        """
        fmt = "json" if json_out else output_format
        json_out = fmt != "text"
        check_report(report)
        with starting_run("smoke-run", draft, target, json_out=json_out, quiet=quiet, output_format=fmt):
            from dflash_ckpt.commands.smoke_report import report_smoke
            from dflash_ckpt.run.smoke import run_smoke_run

        options = SmokeOptions(
            draft=draft, target=target, prompt=list(prompt or []), prompts=prompts,
            max_new_tokens=max_new_tokens, min_acceptance=min_acceptance, draft_dtype=draft_dtype,
            target_dtype=target_dtype, device=device, backend=backend, block_size=block_size, thinking=thinking,
            no_chat_template=no_chat_template, tokenizer=tokenizer, ignore_eos=ignore_eos, revision=revision,
            token=token, layout=layout, suite=suite, tie_tolerance=tie_tolerance, threads=threads,
            no_compile=no_compile, engine=engine, tensor_parallel_size=tensor_parallel_size,
            pipeline_parallel_size=pipeline_parallel_size, max_model_len=max_model_len,
            engine_arg=list(engine_arg or []), engine_timeout=engine_timeout, concurrency=concurrency,
            temperature=temperature, top_p=top_p, top_k=top_k, seed=seed, verify=verify, sampling=sampling)
        from dflash_ckpt.runtime.memory import out_of_memory

        with out_of_memory(target):  # one DF407 line (exit 2), never a traceback or a failed verdict
            code = report_smoke(lambda **live: run_smoke_run(options, **live),
                                json_out=json_out, quiet=quiet, show_text=show_text,
                                output_format=fmt, annotations=annotations, report=report)
        raise typer.Exit(code)

    group_options(smoke_run, PANELS, SmokeOptions)
