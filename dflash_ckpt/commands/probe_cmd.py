"""``dflash-ckpt probe-taps``: the command's options, filled into ``ProbeOptions`` for ``run/probe.run_probe_taps``, then the report.

Only typer is imported here; torch and the runtime load inside the command body, so
``import dflash_ckpt.cli`` (and ``inspect``, ``normalize``) never load torch.
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Literal, Optional

import typer

from dflash_ckpt.commands.options import (DEFAULT, Annotations, AnnotationsOpt, RunOutputFormat, RunOutputFormatOpt, BackendOpt, BlockSizeOpt,
                                          DeviceOpt, DraftArg, DraftDtypeOpt, IgnoreEosOpt, NoChatTemplateOpt,
                                          PairTargetOpt, PromptOpt, PromptsFileOpt, QuietOpt, RevisionOpt,
                                          TargetDtypeOpt, ThinkingOpt, TokenizerOpt, TokenOpt, ReportOpt, check_report,
                                          group_options, starting_run)
from dflash_ckpt.run.options import ProbeOptions


#: probe-taps' help panels (``options.RUN_PANELS``; it decodes greedily: no sampling panel).
PANELS: dict[str, tuple[str, ...]] = {
    "What to run": ("target", "prompt", "prompts", "budget", "max_new_tokens", "min_acceptance", "write", "force",
                    "layout_for", "block_size", "thinking", "no_chat_template", "tokenizer", "ignore_eos",
                    "revision", "token"),
    "Engine": ("draft_dtype", "target_dtype", "device", "backend"),
    "Output": ("top", "json_out", "output_format", "annotations", "quiet", "report"),
}


def register(app: typer.Typer) -> None:
    """Add the ``probe-taps`` command to ``app``."""

    @app.command("probe-taps")
    def probe_taps(
        draft: str = DraftArg,
        target: str = PairTargetOpt,
        prompt: Optional[List[str]] = PromptOpt,
        prompts: Optional[str] = PromptsFileOpt,
        budget: Optional[int] = typer.Option(DEFAULT, "--budget", help="Most candidate tap sets to measure (default: all of them when C(depth, k) <= 256, else 400)."),
        max_new_tokens: int = typer.Option(DEFAULT, "--max-new-tokens", "-n", help="New tokens per prompt (the target's greedy continuation every candidate is measured on)."),
        min_acceptance: float = typer.Option(DEFAULT, "--min-acceptance", help="A winner below this tau is no winner (DF411), and --write refuses it."),
        write: Optional[Path] = typer.Option(DEFAULT, "--write", help="Write a normalized copy of DRAFT with the winning target_layer_ids into this new folder.", show_default=False),
        force: bool = typer.Option(DEFAULT, "--force", help="With --write: replace an OUT that exists and is not empty, and write a winner that leads only within noise (DF412)."),
        top: int = typer.Option(DEFAULT, "--top", help="Candidates listed in the report (the JSON lists all)."),
        layout_for: Optional[List[str]] = typer.Option(
            DEFAULT, "--layout-for", metavar="ENGINE",
            help="With --write, when the draft measures in the other block layout (DF416): record it in the key "
                 "this engine reads (repeatable): vllm (dflash_config.sample_from_anchor), speculators, vllm-dspark, "
                 "sglang-dspark, mlx-vlm-dspark (sample_from_anchor), specforge (dflash_config.shift_label). "
                 "Default: the keys the config has, else dflash_config.sample_from_anchor.", show_default=False),
        draft_dtype: str = DraftDtypeOpt,
        target_dtype: Optional[str] = TargetDtypeOpt,
        device: str = DeviceOpt,
        backend: Literal["auto", "native", "transformers"] = BackendOpt,
        block_size: Optional[int] = BlockSizeOpt,
        thinking: bool = ThinkingOpt,
        no_chat_template: bool = NoChatTemplateOpt,
        tokenizer: Optional[str] = TokenizerOpt,
        ignore_eos: bool = IgnoreEosOpt,
        revision: Optional[str] = RevisionOpt,
        token: Optional[str] = TokenOpt,
        json_out: bool = typer.Option(False, "--json", help="Print one JSON document: best, runner-up, confidence, search cost and every candidate."),
        output_format: RunOutputFormat = RunOutputFormatOpt,
        annotations: Annotations = AnnotationsOpt,
        quiet: bool = QuietOpt,
        report: Optional[str] = ReportOpt,
    ) -> None:
        """Recover (or check) the draft's target_layer_ids and block layout by measuring acceptance.

        k comes from fc.weight; candidates are ranked by tau on the prompts, the finalists measured
        by smoke-run's loop, then run in both block layouts (1+N, anchor-first). Nothing is written unless
        --write OUT.

        Exit codes: 0 the best set works and matches the configured ids (if any) and the layout measured
        is the declared one, or --write wrote a copy with the winner that works; 1 the configured ids lose
        (DF410) and nothing was written, nothing works (DF411), the other layout wins (DF416) or leads
        only within noise (DF417), or the pair fails inspect's checks; 2 usage error.
        """
        fmt = "json" if json_out else output_format
        json_out = fmt != "text"
        check_report(report)
        with starting_run("probe-taps", draft, target, json_out=json_out, quiet=quiet, output_format=fmt):
            from dflash_ckpt.commands.probe_report import report_probe
            from dflash_ckpt.run.probe import run_probe_taps

        options = ProbeOptions(
            draft=draft, target=target, prompt=list(prompt or []), prompts=prompts,
            max_new_tokens=max_new_tokens, min_acceptance=min_acceptance, draft_dtype=draft_dtype,
            target_dtype=target_dtype, device=device, backend=backend, block_size=block_size, thinking=thinking,
            no_chat_template=no_chat_template, tokenizer=tokenizer, ignore_eos=ignore_eos, revision=revision,
            token=token, budget=budget, top=top, write=write, force=force, layout_for=list(layout_for or []))
        raise typer.Exit(report_probe(lambda **live: run_probe_taps(options, **live),
                                      json_out=json_out, quiet=quiet, output_format=fmt,
                                      annotations=annotations, report=report))

    group_options(probe_taps, PANELS, ProbeOptions)
