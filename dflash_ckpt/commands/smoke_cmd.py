"""``dflash-ckpt smoke-run``: run a draft against its target with the reference runtime.

Only typer is imported here; torch and the runtime are imported inside the command body, so
``import dflash_ckpt.cli`` (and ``inspect``) never load torch.
"""

from __future__ import annotations

from typing import List, Optional

import typer

from dflash_ckpt.commands.options import QuietOpt, RevisionOpt, TokenOpt

#: Mirrors ``dflash_ckpt.commands.smoke_run`` (which imports torch, so it cannot be read here).
DEFAULT_MIN_ACCEPTANCE = 2.0
DEFAULT_MAX_NEW_TOKENS = 128
#: How to add the ``run`` extra, as README's set-up line installs it (from a clone, CPU torch first).
RUN_EXTRA_HINT = ('in the clone\'s root, pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu '
                  '(or the CUDA build), then pip install -e ".[run]"')


def register(app: typer.Typer) -> None:
    """Add the ``smoke-run`` command to ``app``."""

    @app.command("smoke-run")
    def smoke_run(
        draft: str = typer.Argument(..., metavar="DRAFT", help="Draft folder or Hub repo id (org/name, or org/name@rev)."),
        target: str = typer.Option(..., "--target", "-t", help="Target model folder or Hub repo id (org/name, or org/name@rev)."),
        prompt: Optional[List[str]] = typer.Option(None, "--prompt", "-p", help="A prompt (repeatable). Default: built-in math, code and chat prompts."),
        prompts_file: Optional[str] = typer.Option(
            None, "--prompts",
            help="JSONL file: per line {\"prompt\": ...}, {\"messages\": [...]} or ShareGPT {\"conversations\": [...]}, "
                 "optional \"name\"; unnamed prompts are named prompt-N by position."),
        max_new_tokens: int = typer.Option(DEFAULT_MAX_NEW_TOKENS, "--max-new-tokens", "-n", help="New tokens per prompt and decoder (the longest prompt, these and one block must fit the target's max_position_embeddings)."),
        min_acceptance: float = typer.Option(
            DEFAULT_MIN_ACCEPTANCE, "--min-acceptance",
            help="Fail when the mean acceptance length tau (tokens per step, bonus included) is below this. "
                 "A draft reading the wrong tap layers stays near 1; working drafts reach 4 and more."),
        draft_dtype: str = typer.Option("bfloat16", "--draft-dtype", help="bfloat16 (keep it: fp16 overflows on Qwen3 outliers), float16 or float32."),
        target_dtype: Optional[str] = typer.Option(None, "--target-dtype", help="Default: the target config's dtype, else its weights' dtype."),
        device: str = typer.Option("auto", "--device", help="auto (CUDA when present, else CPU), cpu, cuda or cuda:N."),
        backend: str = typer.Option(
            "auto", "--backend",
            help="What runs the target: native (the built-in runtime: dense Qwen3, Llama 3.x), transformers "
                 "(every other published family; needs the hf extra), or auto (native where it implements the "
                 "target, transformers otherwise)."),
        block_size: Optional[int] = typer.Option(None, "--block-size", help="Override the draft's block_size (anchor plus drafts); above the trained size warns (DF405)."),
        thinking: bool = typer.Option(False, "--thinking", help="Render the chat template with enable_thinking true (default false)."),
        no_chat_template: bool = typer.Option(False, "--no-chat-template", help="Feed prompt text as is, with the tokenizer's special tokens."),
        tokenizer: Optional[str] = typer.Option(None, "--tokenizer", help="Folder with tokenizer.json (default: the target's)."),
        ignore_eos: bool = typer.Option(False, "--ignore-eos", help="Do not stop at end-of-sequence tokens (always generate --max-new-tokens)."),
        tie_tolerance: Optional[float] = typer.Option(
            None, "--tie-tolerance",
            help="Top-2 logit margin under which a divergence counts as a tie (default by target dtype: "
                 "fp32 1e-3, fp16 0.0625, bf16 0.5)."),
        revision: Optional[str] = RevisionOpt,
        token: Optional[str] = TokenOpt,
        threads: Optional[int] = typer.Option(
            None, "--threads",
            help="CPU threads for torch (default: 1 on CPUs with up to 4 logical cores, where spin-waiting "
                 "threads slow tiny models down, unless OMP_NUM_THREADS is set; else torch's default)."),
        no_compile: bool = typer.Option(
            False, "--no-compile",
            help="On CUDA, run eagerly instead of replaying CUDA graphs of the decode, draft and verify steps "
                 "(captured once; the capture time is reported apart). The CPU always runs eagerly."),
        show_text: bool = typer.Option(False, "--show-text", help="Print each prompt's generated text under the table (the JSON always has it)."),
        json_out: bool = typer.Option(False, "--json", help="Print one JSON document with every figure, ids, texts and acceptance lengths."),
        quiet: bool = QuietOpt,
    ) -> None:
        """Decode with the target alone and with DFlash; check the outputs match and measure acceptance and speed.

        Exit 0 pass; 1 refused by inspect's checks, output differs beyond a tie, tau below
        --min-acceptance, or overflow; 2 usage error, a pair neither backend supports, or a target too big for the device.
        """
        from dflash_ckpt.commands.options import silence_progress

        silence_progress(json_out or quiet)
        code = _run(
            draft=draft, target=target, prompts=list(prompt or []), prompts_file=prompts_file,
            max_new_tokens=max_new_tokens, min_acceptance=min_acceptance, draft_dtype=draft_dtype,
            target_dtype=target_dtype, device=device, backend=backend, block_size=block_size, thinking=thinking,
            chat_template=not no_chat_template, tokenizer=tokenizer, ignore_eos=ignore_eos,
            tie_tolerance=tie_tolerance, revision=revision, token=token, json_out=json_out, quiet=quiet,
            show_text=show_text, threads=threads, compile=not no_compile,
        )
        raise typer.Exit(code)


def _run(*, json_out: bool, quiet: bool, show_text: bool = False, **kwargs: object) -> int:
    """Import the runtime (and torch) now, run, print."""
    import importlib.util

    missing = [m for m in ("torch", "tokenizers", "jinja2") if importlib.util.find_spec(m) is None]
    if missing:
        from dflash_ckpt.errors import UsageError

        raise UsageError(f"smoke-run needs {', '.join(missing)}: {RUN_EXTRA_HINT}")
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from dflash_ckpt.commands.json_out import print_json
    from dflash_ckpt.commands.output import make_console, safe
    from dflash_ckpt.commands.smoke_report import render_smoke
    from dflash_ckpt.commands.smoke_run import SmokeOptions, run_smoke
    from dflash_ckpt.runtime.memory import out_of_memory

    opts = SmokeOptions(**kwargs)  # type: ignore[arg-type]
    console = make_console()
    err_console = make_console(stderr=True)
    show_progress = not json_out and not quiet and err_console.is_terminal
    log = None if json_out or quiet else (lambda msg: err_console.print(f"[dim]{safe(msg)}[/]"))
    with out_of_memory(opts.target):  # one DF407 line (exit 2), never a traceback or a failed verdict
        if show_progress:
            with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("tokens"),
                          TimeElapsedColumn(), console=err_console, transient=True) as progress:
                result = run_smoke(opts, progress=progress, log=log)
        else:
            result = run_smoke(opts, log=log)
    if json_out:
        print_json(result.to_json())
    else:
        render_smoke(console, result, quiet=quiet, show_text=show_text)
    return result.exit_code
