"""``dflash-ckpt normalize``: the run behind the command (its typer options are ``commands/normalize_cmd``).

``run_normalize`` is the command's work from ``run/options.NormalizeOptions``; the run itself is
``canonical.run.normalize_into``, with this command's refusal of ``--in-place`` on a Hub cache
snapshot and its progress bar. Imported only when the command runs; the report for people is in
``commands/normalize_report``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterator

from dflash_ckpt.canonical.run import Outcome, Request, normalize_into
from dflash_ckpt.run.options import NormalizeOptions
from dflash_ckpt.sources.base import user_path


def run_normalize(opts: NormalizeOptions, *, progress: bool = False) -> Outcome:
    """``dflash-ckpt normalize DRAFT [OUT]``. Prints nothing (``progress``: a bar on stderr while
    weights are copied); raises ``DFlashCkptError`` for a refusal, with nothing written; returns the
    outcome (``.ok``, ``.exit_code``, ``.to_dict()``)."""
    outcome = execute(make_request(opts, json_out=not progress, quiet=not progress))
    if outcome.error is not None:
        raise outcome.error
    return outcome


def make_request(opts: NormalizeOptions, *, json_out: bool, quiet: bool) -> Request:
    """The options checked against each other (usage errors, exit 2) and parsed into a ``Request``
    (``json_out``, ``quiet``: how the command reports, which decides the copy bar)."""
    from dflash_ckpt.errors import UsageError
    from dflash_ckpt.canonical.plan import Overrides, parse_layer_ids, parse_layer_types

    out = None if opts.out is None else Path(opts.out)
    if out is not None and opts.in_place:
        raise UsageError("give OUT or --in-place, not both")
    if opts.check and (out is not None or opts.in_place):
        raise UsageError("--check writes nothing; drop OUT and --in-place")
    if out is None and not (opts.in_place or opts.check or opts.dry_run):
        raise UsageError("give OUT (a new folder), or --in-place, --check or --dry-run")
    if opts.no_backup and not opts.in_place:
        raise UsageError("--no-backup only applies to --in-place")
    if opts.copy and out is None:
        raise UsageError("--copy only applies to OUT")
    ids, kinds = opts.target_layer_ids, opts.layer_types
    overrides = Overrides(
        block_size=opts.block_size,
        mask_token_id=opts.mask_token_id,
        target_layer_ids=parse_layer_ids(ids) if isinstance(ids, str) else None if ids is None else list(ids),
        num_target_layers=opts.num_target_layers,
        layer_types=parse_layer_types(kinds) if isinstance(kinds, str) else None if kinds is None else list(kinds),
    )
    return Request(
        draft=opts.draft, out=user_path(out, "OUT") if out is not None else None, in_place=opts.in_place,
        backup=not opts.no_backup, check=opts.check, dry_run=opts.dry_run, force=opts.force, copy=opts.copy,
        external_links=opts.external_links, prefer=opts.prefer, mirrors=not opts.no_mirrors,
        overrides=overrides, target=opts.target, revision=opts.revision, token=opts.token, json_out=json_out, quiet=quiet,
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

                unlock_out(req.out)  # the lock require_out_path took (canonical/lock.py)
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
