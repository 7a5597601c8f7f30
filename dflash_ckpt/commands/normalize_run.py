"""``dflash-ckpt normalize``: the run behind the command (options are in ``normalize_cmd``).

``run_normalize`` is the command's work with the CLI's long options as keywords; the run itself
is ``canonical.run.normalize_into``, with this command's refusal of ``--in-place`` on a Hub
cache snapshot and its progress bar. Imported only when the command runs; the report for people
is in ``normalize_report``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterator

from dflash_ckpt.canonical.run import Outcome, Request, normalize_into
from dflash_ckpt.sources.base import user_path


def run_normalize(draft: str, out: str | Path | None = None, *, in_place: bool = False, no_backup: bool = False,
                  check: bool = False, dry_run: bool = False, force: bool = False, copy: bool = False,
                  external_links: str = "copy", target_layer_ids: str | list[int] | None = None,
                  block_size: int | None = None, mask_token_id: int | None = None, num_target_layers: int | None = None,
                  layer_types: str | list[str] | None = None, prefer: str | None = None, no_mirrors: bool = False,
                  target: str | None = None, revision: str | None = None, token: str | None = None,
                  progress: bool = False) -> Outcome:
    """``dflash-ckpt normalize DRAFT [OUT]``: keywords are its long options. Prints nothing
    (``progress``: a bar on stderr while weights are copied); raises ``DFlashCkptError`` for a
    refusal, with nothing written; returns the outcome (``.ok``, ``.exit_code``, ``.to_dict()``)."""
    req = make_request(
        draft, None if out is None else Path(out), in_place=in_place, no_backup=no_backup, check=check,
        dry_run=dry_run, force=force, copy=copy, external_links=external_links, target_layer_ids=target_layer_ids,
        block_size=block_size, mask_token_id=mask_token_id, num_target_layers=num_target_layers,
        layer_types=layer_types, prefer=prefer, no_mirrors=no_mirrors, target=target, revision=revision,
        token=token, json_out=not progress, quiet=not progress)
    outcome = execute(req)
    if outcome.error is not None:
        raise outcome.error
    return outcome


def make_request(draft: str, out: Path | None, *, in_place: bool, no_backup: bool, check: bool, dry_run: bool,
                 force: bool, copy: bool, external_links: str, target_layer_ids: str | list[int] | None,
                 block_size: int | None, mask_token_id: int | None, num_target_layers: int | None,
                 layer_types: str | list[str] | None, prefer: str | None, no_mirrors: bool, target: str | None,
                 revision: str | None, token: str | None, json_out: bool, quiet: bool) -> Request:
    """The options checked against each other (usage errors, exit 2) and parsed into a ``Request``."""
    from dflash_ckpt.errors import UsageError
    from dflash_ckpt.canonical.plan import Overrides, parse_layer_ids, parse_layer_types

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
        target_layer_ids=parse_layer_ids(target_layer_ids) if isinstance(target_layer_ids, str) else target_layer_ids,
        num_target_layers=num_target_layers,
        layer_types=parse_layer_types(layer_types) if isinstance(layer_types, str) else layer_types,
    )
    return Request(
        draft=draft, out=user_path(out, "OUT") if out is not None else None, in_place=in_place,
        backup=not no_backup, check=check, dry_run=dry_run, force=force, copy=copy,
        external_links=external_links, prefer=prefer, mirrors=not no_mirrors,
        overrides=overrides, target=target, revision=revision, token=token, json_out=json_out, quiet=quiet,
    )


def execute(req: Request) -> Outcome:
    """Do the run; a refusal lands in ``outcome.error`` (and its exit code), beside what was found."""
    from dflash_ckpt.errors import DFlashCkptError

    outcome = Outcome(req=req, label=req.draft)
    try:
        try:
            normalize_into(req, outcome, guard=_refuse_cache_in_place, copy_bar=_progress_bar)
        finally:
            if req.out is not None:
                from dflash_ckpt.canonical.lock import unlock_out

                unlock_out(req.out)  # the lock check_out_path took (canonical/lock.py)
    except DFlashCkptError as err:
        outcome.error = err
        outcome.exit_code = err.exit_code
    return outcome


def _refuse_cache_in_place(req: Request, draft_dir: Path | None) -> None:
    """``--in-place`` on a Hub cache snapshot changes what every other tool loads from the cache
    (and fails ``hf cache verify``): refused unless ``--force``, pointing to a copy instead.

    Called once before anything is fetched (``draft_dir`` None: a Hub repo id always lands in the
    cache) and once the folder is known (a snapshot folder given as a path)."""
    from dflash_ckpt.errors import UsageError
    from dflash_ckpt.sources.resolve import looks_like_path

    if not req.in_place or req.force:
        return
    if draft_dir is None:
        if looks_like_path(req.draft) or user_path(req.draft).exists():
            return
        repo, where = req.draft.split("@", 1)[0], "its Hugging Face cache snapshot"
    else:
        from dflash_ckpt.sources.hub.cache import hub_cache_snapshot

        found = hub_cache_snapshot(draft_dir)
        if found is None:
            return
        repo, where = found, f"{draft_dir}, a Hugging Face cache snapshot,"
    raise UsageError(
        f"--in-place would rewrite {where} changing what every other tool loads from the cache "
        f"and failing `hf cache verify`; write a normalized copy with `dflash-ckpt normalize {repo} OUT`, "
        "or pass --force to rewrite the cache anyway"
    )


def _progress_bar(total: int) -> Any:
    """A rich progress bar on stderr for a large copy (silent when stderr is not a terminal)."""
    from contextlib import contextmanager

    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

    @contextmanager
    def bar() -> Iterator[Callable[[int], None]]:
        console = Console(stderr=True)
        with Progress(
            TextColumn("copying weights"), BarColumn(), DownloadColumn(), TransferSpeedColumn(), TimeRemainingColumn(),
            console=console, transient=True, disable=not console.is_terminal,
        ) as progress:
            task = progress.add_task("copy", total=total)
            yield lambda n: progress.advance(task, n)

    return bar()
