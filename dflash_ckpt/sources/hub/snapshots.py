"""The draft configs of other commits of the same Hub repo that the local Hugging Face cache holds.

A repo re-uploaded in place (z-lab/dflash#152: 4 layers and 6 taps became 6 and 8) leaves the older
snapshot in the cache, where an engine started from it still finds it. Reading those configs costs
no request: they are files under ``models--org--name/snapshots/<commit>/config.json``. A snapshot
that is not a plain file inside the repo's cache folder, too large, or not a JSON object is skipped
(the cache may be hostile; nothing here is trusted beyond being parsed as data).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from dflash_ckpt.limits import MAX_CONFIG_BYTES
from dflash_ckpt.sources.base import Source
from dflash_ckpt.sources.hub.cache import hub_cache_snapshot, is_commit
from dflash_ckpt.sources.hub.ids import inside

#: Other snapshots read at most (the newest by modification time first).
MAX_SNAPSHOTS = 8


def _snapshot_of(source: Source) -> tuple[Path, str] | None:
    """``(snapshots folder, commit)`` of a draft read from the Hub or from a cache snapshot."""
    cache, commit = getattr(source, "cache", None), getattr(source, "commit", None)
    if source.kind == "hub" and cache is not None and isinstance(commit, str):
        return cache.folder / "snapshots", commit
    folder = getattr(source, "folder", None)
    if isinstance(folder, Path) and hub_cache_snapshot(folder) is not None:
        real = Path(os.path.realpath(folder))
        return real.parent, real.name
    return None


def other_cached_configs(source: Source) -> tuple[str | None, list[tuple[str, dict[str, Any]]]]:
    """The draft's commit and ``(commit, config)`` of each other cached snapshot of its repo."""
    found = _snapshot_of(source)
    if found is None:
        return None, []
    snapshots, commit = found
    repo_dir = snapshots.parent
    try:
        entries = [p for p in snapshots.iterdir() if is_commit(p.name) and p.name != commit]
        entries.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    except OSError:
        return commit, []
    out: list[tuple[str, dict[str, Any]]] = []
    for snap in entries[:MAX_SNAPSHOTS]:
        path = snap / "config.json"
        try:
            if not inside(path, repo_dir) or not path.is_file() or path.stat().st_size > MAX_CONFIG_BYTES:
                continue
            config = json.loads(path.read_bytes())
        except (OSError, ValueError, RecursionError):
            continue
        if isinstance(config, dict):
            out.append((snap.name, config))
    return commit, out
