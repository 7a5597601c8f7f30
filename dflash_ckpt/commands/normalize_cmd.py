"""``dflash-ckpt normalize``: the command's options (the work is in ``normalize_run``).

Imported at every start of the CLI to register the command, so it holds only the signature:
typer and the standard library. Everything else loads when the command runs.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Optional

import typer

from dflash_ckpt.commands.options import JsonOpt, QuietOpt, RevisionOpt, TokenOpt, silence_progress


class Prefer(str, Enum):
    nested = "nested"
    top_level = "top-level"


class ExternalLinks(str, Enum):
    copy = "copy"
    link = "link"


def register(app: typer.Typer) -> None:
    """Add ``normalize`` to the CLI."""

    @app.command()
    def normalize(
        draft: str = typer.Argument(..., metavar="DRAFT", help="Draft folder or Hub repo id (org/name, or org/name@rev).", show_default=False),
        out: Optional[Path] = typer.Argument(None, metavar="[OUT]", help="New folder for the normalized draft (weights hard-linked, or copied across filesystems).", show_default=False),
        in_place: bool = typer.Option(False, "--in-place", help="Rewrite DRAFT's config.json atomically instead of writing OUT."),
        no_backup: bool = typer.Option(False, "--no-backup", help="With --in-place: do not keep the old file as config.json.orig."),
        check: bool = typer.Option(False, "--check", help="Change nothing; exit 1 if the config is not canonical (for CI)."),
        dry_run: bool = typer.Option(False, "--dry-run", help="Print the diff and verdicts, write nothing."),
        force: bool = typer.Option(False, "--force", help="Replace an OUT that exists and is not empty (or an old config.json.orig); let --in-place rewrite a Hugging Face cache snapshot."),
        copy: bool = typer.Option(False, "--copy", help="Copy the weights into OUT even where hard links are possible."),
        external_links: ExternalLinks = typer.Option(ExternalLinks.copy, "--external-links", help="DRAFT's links to files outside it: give OUT their content (copy) or a link to the same target (link); warned either way.", case_sensitive=False),
        target_layer_ids: Optional[str] = typer.Option(None, "--target-layer-ids", help="Supply missing tap layers, e.g. 1,9,17,25,33 (checked against fc.weight).", show_default=False),
        block_size: Optional[int] = typer.Option(None, "--block-size", help="Supply a missing block_size (>= 2).", show_default=False),
        mask_token_id: Optional[int] = typer.Option(None, "--mask-token-id", help="Supply a missing mask_token_id (below the vocab).", show_default=False),
        num_target_layers: Optional[int] = typer.Option(None, "--num-target-layers", help="Supply a missing num_target_layers (the target's depth).", show_default=False),
        layer_types: Optional[str] = typer.Option(None, "--layer-types", help="Supply a missing layer_types list, e.g. sliding*4,full.", show_default=False),
        prefer: Optional[Prefer] = typer.Option(None, "--prefer", help="Which copy wins where dflash_config and the top level disagree.", show_default=False, case_sensitive=False),
        no_mirrors: bool = typer.Option(False, "--no-mirrors", help="Write the nested form only (no top-level block_size / num_target_layers)."),
        target: Optional[str] = typer.Option(None, "--target", "-t", help="Target folder or Hub repo id: its depth, vocab and pad token check the result.", show_default=False),
        revision: Optional[str] = RevisionOpt,
        token: Optional[str] = TokenOpt,
        json_out: bool = JsonOpt,
        quiet: bool = QuietOpt,
    ) -> None:
        """Rewrite a draft's config.json into the canonical nested form (weights untouched).

        Exit codes: 0 done (or canonical with --check), 1 not canonical (--check), a conflict, a
        missing key or a failed check, 2 usage error or unreadable input.
        """
        from dflash_ckpt.commands.normalize_run import Request, parse_layer_ids, run_normalize
        from dflash_ckpt.errors import UsageError
        from dflash_ckpt.normalize.plan import Overrides, parse_layer_types

        if out is not None and in_place:
            raise UsageError("give OUT or --in-place, not both")
        if check and (out is not None or in_place):
            raise UsageError("--check writes nothing; drop OUT and --in-place")
        if out is None and not (in_place or check or dry_run):
            raise UsageError("give OUT (a new folder), or --in-place, --check or --dry-run")
        if no_backup and not in_place:
            raise UsageError("--no-backup only applies to --in-place")
        if copy and out is None:
            raise UsageError("--copy only applies to OUT")
        overrides = Overrides(
            block_size=block_size,
            mask_token_id=mask_token_id,
            target_layer_ids=parse_layer_ids(target_layer_ids) if target_layer_ids is not None else None,
            num_target_layers=num_target_layers,
            layer_types=parse_layer_types(layer_types) if layer_types is not None else None,
        )
        silence_progress(json_out or quiet)
        req = Request(
            draft=draft, out=out.expanduser() if out is not None else None, in_place=in_place,
            backup=not no_backup, check=check, dry_run=dry_run, force=force, copy=copy,
            external_links=external_links.value,
            prefer=prefer.value if prefer is not None else None, mirrors=not no_mirrors,
            overrides=overrides, target=target, revision=revision, token=token,
            json_out=json_out, quiet=quiet,
        )
        raise typer.Exit(run_normalize(req))


