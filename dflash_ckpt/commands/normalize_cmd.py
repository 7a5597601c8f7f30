"""``dflash-ckpt normalize``: the command's options (the work is ``run/normalize.py``'s) and its report.

Imported at every start of the CLI to register the command, so it holds only the signature:
typer and the standard library. Everything else loads when the command runs.
"""

from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path
from typing import Any, Optional

import typer

from dflash_ckpt.commands.options import DEFAULT, JsonOpt, QuietOpt, RevisionOpt, TokenOpt, silence_progress, take_defaults, want_json
from dflash_ckpt.run.options import NormalizeOptions


class Prefer(str, Enum):
    nested = "nested"
    top_level = "top-level"


class ExternalLinks(str, Enum):
    copy = "copy"
    link = "link"


def register(app: typer.Typer) -> None:
    """Add ``normalize`` to the CLI."""

    def normalize(
        draft: str = typer.Argument(..., metavar="DRAFT", help="Draft folder or Hub repo id (org/name, or org/name@rev).", show_default=False),
        out: Optional[Path] = typer.Argument(DEFAULT, metavar="[OUT]", help="New folder for the normalized draft (weights hard-linked, or copied across filesystems).", show_default=False),
        in_place: bool = typer.Option(DEFAULT, "--in-place", help="Rewrite DRAFT's config.json atomically instead of writing OUT."),
        no_backup: bool = typer.Option(DEFAULT, "--no-backup", help="With --in-place: do not keep the old file as config.json.orig."),
        check: bool = typer.Option(DEFAULT, "--check", help="Change nothing; exit 1 if the config is not canonical (for CI)."),
        dry_run: bool = typer.Option(DEFAULT, "--dry-run", help="Print the diff and verdicts, write nothing."),
        force: bool = typer.Option(DEFAULT, "--force", help="Replace an OUT that exists and is not empty (or an old config.json.orig); let --in-place rewrite a Hugging Face cache snapshot."),
        copy: bool = typer.Option(DEFAULT, "--copy", help="Copy the weights into OUT even where hard links are possible."),
        external_links: ExternalLinks = typer.Option(DEFAULT, "--external-links", help="DRAFT's links to files outside it: give OUT their content (copy) or a link to the same target (link); warned either way.", case_sensitive=False),
        target_layer_ids: Optional[str] = typer.Option(DEFAULT, "--target-layer-ids", help="Supply missing tap layers, e.g. 1,9,17,25,33 (checked against fc.weight).", show_default=False),
        block_size: Optional[int] = typer.Option(DEFAULT, "--block-size", help="Supply a missing block_size (>= 2).", show_default=False),
        mask_token_id: Optional[int] = typer.Option(DEFAULT, "--mask-token-id", help="Supply a missing mask_token_id (below the vocab).", show_default=False),
        num_target_layers: Optional[int] = typer.Option(DEFAULT, "--num-target-layers", help="Supply a missing num_target_layers (the target's depth).", show_default=False),
        layer_types: Optional[str] = typer.Option(DEFAULT, "--layer-types", help="Supply a missing layer_types list, e.g. sliding*4,full.", show_default=False),
        prefer: Optional[Prefer] = typer.Option(DEFAULT, "--prefer", help="Which copy wins where dflash_config and the top level disagree.", show_default=False, case_sensitive=False),
        no_mirrors: bool = typer.Option(DEFAULT, "--no-mirrors", help="Write the nested form only (no top-level block_size / num_target_layers)."),
        target: Optional[str] = typer.Option(DEFAULT, "--target", "-t", help="Target folder or Hub repo id: its depth, vocab and pad token check the result.", show_default=False),
        revision: Optional[str] = RevisionOpt,
        token: Optional[str] = TokenOpt,
        json_out: bool = JsonOpt,
        quiet: bool = QuietOpt,
    ) -> None:
        """Rewrite a draft's config.json into the canonical nested form (weights untouched).

        Exit codes: 0 done (or canonical with --check); 1 not canonical (--check), a conflict, a
        missing key or a failed check; 2 usage error or unreadable input.
        """
        from dflash_ckpt.run.normalize import make_request

        want_json("normalize", json_out)
        silence_progress(json_out or quiet, quiet=quiet)
        options = NormalizeOptions(
            draft=draft, out=out, in_place=in_place, no_backup=no_backup, check=check, dry_run=dry_run,
            force=force, copy=copy, external_links=external_links.value, target_layer_ids=target_layer_ids,
            block_size=block_size, mask_token_id=mask_token_id, num_target_layers=num_target_layers,
            layer_types=layer_types, prefer=None if prefer is None else prefer.value, no_mirrors=no_mirrors,
            target=target, revision=revision, token=token)
        raise typer.Exit(report_normalize(make_request(options, json_out=json_out, quiet=quiet)))

    app.command()(take_defaults(normalize, NormalizeOptions))


def report_normalize(req: Any) -> int:
    """Run (``run/normalize.execute``), print the report or the JSON document (also on a refusal),
    return the exit code; a refusal's line is raised for the CLI to print after the failed checks."""
    from dflash_ckpt.run.normalize import execute

    outcome = execute(req)
    if req.json_out:  # rich stays unimported on the machine path
        from dflash_ckpt.json_out import print_json

        print_json(outcome.envelope())
        if outcome.error is not None:  # stdout stays one document; the line is for the log
            print(outcome.error.line("dflash-ckpt normalize"), file=sys.stderr)
        return outcome.exit_code
    from dflash_ckpt.commands.normalize_report import render_normalize

    render_normalize(outcome)
    if outcome.error is not None:
        raise outcome.error  # the CLI prints its line after the failed checks
    return outcome.exit_code
