"""``dflash-ckpt probe-taps``: the command's options (the work is in ``probe_run``).

Only typer is imported here; torch and the runtime load inside the command body, so
``import dflash_ckpt.cli`` (and ``inspect``, ``normalize``) never load torch.
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from dflash_ckpt.commands.smoke_cmd import DEFAULT_MAX_NEW_TOKENS, DEFAULT_MIN_ACCEPTANCE, RUN_EXTRA_HINT


def register(app: typer.Typer) -> None:
    """Add the ``probe-taps`` command to ``app``."""

    @app.command("probe-taps")
    def probe_taps(
        draft: str = typer.Argument(..., metavar="DRAFT", help="Draft folder or Hub repo id (org/name, or org/name@rev)."),
        target: str = typer.Option(..., "--target", "-t", help="Target model folder or Hub repo id."),
        prompt: Optional[List[str]] = typer.Option(None, "--prompt", "-p", help="A prompt (repeatable). Default: smoke-run's built-in math, code and chat prompts."),
        prompts_file: Optional[str] = typer.Option(None, "--prompts", help="JSONL prompts file, as smoke-run reads it."),
        budget: Optional[int] = typer.Option(None, "--budget", help="Most candidate tap sets to measure (default: all of them when C(depth, k) <= 256, else 400)."),
        max_new_tokens: int = typer.Option(DEFAULT_MAX_NEW_TOKENS, "--max-new-tokens", "-n", help="New tokens per prompt (the target's greedy continuation every candidate is measured on)."),
        min_acceptance: float = typer.Option(DEFAULT_MIN_ACCEPTANCE, "--min-acceptance", help="A winner below this tau is no winner (DF411), and --write refuses it."),
        write: Optional[Path] = typer.Option(None, "--write", help="Write a normalized copy of DRAFT with the winning target_layer_ids into this new folder.", show_default=False),
        force: bool = typer.Option(False, "--force", help="With --write: replace an OUT that exists and is not empty, and write a winner that leads only within noise (DF412)."),
        top: int = typer.Option(5, "--top", help="Candidates listed in the report (the JSON lists all)."),
        draft_dtype: str = typer.Option("bfloat16", "--draft-dtype", metavar="[bfloat16|float16|float32]", help="bfloat16 (as trained), float16 or float32."),
        target_dtype: Optional[str] = typer.Option(None, "--target-dtype", metavar="[bfloat16|float16|float32]", help="Default: the target config's dtype, else its weights' dtype."),
        device: str = typer.Option("auto", "--device", help="auto (CUDA when present, else CPU), cpu, cuda or cuda:N."),
        block_size: Optional[int] = typer.Option(None, "--block-size", help="Override the draft's block_size."),
        thinking: bool = typer.Option(False, "--thinking", help="Render the chat template with enable_thinking true."),
        no_chat_template: bool = typer.Option(False, "--no-chat-template", help="Feed prompt text as is."),
        tokenizer: Optional[str] = typer.Option(None, "--tokenizer", help="Folder with tokenizer.json (default: the target's)."),
        ignore_eos: bool = typer.Option(False, "--ignore-eos", help="Do not stop at end-of-sequence tokens."),
        revision: Optional[str] = typer.Option(None, "--revision", help="Hub revision of DRAFT (or write org/name@rev)."),
        token: Optional[str] = typer.Option(None, "--token", help="Hugging Face token for gated or private repos.", show_default=False),
        json_out: bool = typer.Option(False, "--json", help="Print one JSON document: best, runner-up, confidence, search cost and every candidate."),
        quiet: bool = typer.Option(False, "-q", "--quiet", help="Print errors only."),
    ) -> None:
        """Recover (or check) the draft's target_layer_ids by measuring acceptance with candidate tap sets.

        k comes from fc.weight; candidates are ranked by tau on the prompts, the finalists measured
        by smoke-run's loop. Nothing is written unless --write OUT. Exit 0 when the best set works and
        matches the configured ids (if any); 1 when the configured ids lose (DF410), nothing works
        (DF411) or the pair fails inspect's checks; 2 usage error.
        """
        import importlib.util

        missing = [m for m in ("torch", "tokenizers", "jinja2") if importlib.util.find_spec(m) is None]
        if missing:
            from dflash_ckpt.errors import UsageError

            raise UsageError(f"probe-taps needs {', '.join(missing)}: {RUN_EXTRA_HINT}")
        from dflash_ckpt.commands.options import loading_note

        with loading_note("probe-taps", draft, target, json_out or quiet):
            from dflash_ckpt.commands.probe_report import report

        raise typer.Exit(report(
            draft=draft, target=target, prompts=list(prompt or []), prompts_file=prompts_file, budget=budget,
            max_new_tokens=max_new_tokens, min_acceptance=min_acceptance, write=write, force=force, top=top,
            draft_dtype=draft_dtype, target_dtype=target_dtype, device=device, block_size=block_size,
            thinking=thinking, chat_template=not no_chat_template, tokenizer=tokenizer, ignore_eos=ignore_eos,
            revision=revision, token=token, json_out=json_out, quiet=quiet,
        ))
