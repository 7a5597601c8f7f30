"""Hub repo ids (``org/name[@rev]``): the local Hugging Face cache first, then the network.

``open_hub_source`` is what ``inspect`` reads through: config and index through huggingface_hub,
safetensors headers with range requests, never tensor data. ``download_snapshot`` is what
``normalize`` and ``smoke-run`` use, which need real files: the files they name, each downloaded
capped at its listed size into the cache's snapshot folder, with progress bars on a terminal.

What reaches the network:
- with ``HF_HUB_OFFLINE=1``: nothing, ever; the cache answers or the command fails in one line;
- with a commit id as revision and the repo's listing cached: nothing, files are immutable;
- otherwise one repo-info request pins the branch or tag to a commit (and records it in
  ``refs/`` like huggingface_hub does), then only what the cache lacks is fetched. When the Hub
  cannot be reached (after retries) and the cache knows the revision, the cache is used, with a
  warning on stderr.
"""

from __future__ import annotations

import sys
from pathlib import Path

from dflash_ckpt.sources.hub.cache import RepoCache, RepoListing, is_commit
from dflash_ckpt.sources.hub.errors import HubContext, HubError
from dflash_ckpt.sources.base import Source
from dflash_ckpt.sources.local import LocalSource
from dflash_ckpt.sources.repo_ref import RepoRef


def open_hub_source(ref: RepoRef, *, token: str | None = None, role: str = "draft") -> Source:
    """A source for ``ref`` that reads configs and safetensors headers, from the cache or the Hub."""
    from dflash_ckpt.sources.hub.net import HubClient, HubSettings, fetch_listing, resolve_token  # noqa: PLC0415
    from dflash_ckpt.sources.hub.source import HubSource  # noqa: PLC0415

    settings = HubSettings.from_env()
    cache = RepoCache(settings.cache_dir, ref.repo_id)
    if settings.offline:
        return _open_cached(ref, cache, role, why="HF_HUB_OFFLINE is set")

    send, source = resolve_token(token, ref.label)
    ctx = HubContext(ref, role, settings.endpoint, source)
    if is_commit(ref.revision):
        pinned = cache.read_listing(str(ref.revision))
        if pinned is not None:
            return HubSource(ref, pinned, cache, HubClient(ctx, settings, send, pinned.commit))
    try:
        listing = fetch_listing(ctx, settings, send)
    except HubError as err:
        if not err.unreachable:
            raise
        try:
            cached = _open_cached(ref, cache, role, why="the Hub cannot be reached")
        except HubError:
            raise err from None
        _warn_fallback(err, cache, ref)
        return cached
    _remember(cache, ref, listing)
    return HubSource(ref, listing, cache, HubClient(ctx, settings, send, listing.commit))


def download_snapshot(
    ref: RepoRef,
    *,
    token: str | None = None,
    role: str = "draft",
    allow_patterns: list[str] | None = None,
) -> Path:
    """The local snapshot folder of ``ref`` holding the files ``allow_patterns`` match (all when ``None``)."""
    from dflash_ckpt.sources.hub.net import HubSettings, cached_snapshot, fetch_listing, resolve_token, snapshot  # noqa: PLC0415

    settings = HubSettings.from_env()
    cache = RepoCache(settings.cache_dir, ref.repo_id)
    if settings.offline:
        commit = cache.read_ref(ref.revision or "main")
        if commit is None:
            raise _not_cached(ref, cache, role, "HF_HUB_OFFLINE is set")
        ctx = HubContext(ref, role, settings.endpoint, None)
        return cached_snapshot(ctx, settings, commit, allow_patterns, "HF_HUB_OFFLINE is set")

    send, source = resolve_token(token, ref.label)
    ctx = HubContext(ref, role, settings.endpoint, source)
    if is_commit(ref.revision):
        commit = str(ref.revision)
    else:
        try:
            listing = fetch_listing(ctx, settings, send)
        except HubError as err:
            cached_commit = cache.read_ref(ref.revision or "main") if err.unreachable else None
            if cached_commit is None:
                raise
            path = cached_snapshot(ctx, settings, cached_commit, allow_patterns, "the Hub cannot be reached")
            _warn_fallback(err, cache, ref)
            return path
        _remember(cache, ref, listing)
        return snapshot(ctx, settings, send, listing.commit, allow_patterns, listing=listing)
    return snapshot(ctx, settings, send, commit, allow_patterns)


# ---------------------------------------------------------------------------------------------


def _remember(cache: RepoCache, ref: RepoRef, listing: RepoListing) -> None:
    cache.write_ref(ref.revision or "main", listing.commit)
    cache.write_listing(listing)


def _warn_fallback(err: HubError, cache: RepoCache, ref: RepoRef) -> None:
    commit = cache.read_ref(ref.revision or "main") or "?"
    print(f"warning: {err.message}; using the cached commit {commit[:12]}", file=sys.stderr)


def _open_cached(ref: RepoRef, cache: RepoCache, role: str, *, why: str) -> Source:
    """``ref`` from the cache alone: our listing (or huggingface_hub's), else a complete snapshot folder."""
    commit = cache.read_ref(ref.revision or "main")
    if commit is None:
        raise _not_cached(ref, cache, role, why)
    listing = cache.read_listing(commit)
    if listing is not None:
        from dflash_ckpt.sources.hub.source import HubSource  # noqa: PLC0415

        return HubSource(ref, listing, cache, None)
    snap = cache.snapshot_dir(commit)
    if (snap / "config.json").is_file():
        return LocalSource(snap, label=ref.label, kind="cache")
    raise _not_cached(ref, cache, role, why)


def _not_cached(ref: RepoRef, cache: RepoCache, role: str, why: str) -> HubError:
    return HubError(
        f"{role} repo is not in the local Hugging Face cache at {cache.cache_dir} and {why}; "
        f"run once without it (or `hf download {ref.repo_id}`), or give a local folder", path=ref.label
    )
