"""Hub repo ids: the local Hugging Face cache first, then (unless offline) the network."""

from __future__ import annotations

from pathlib import Path

from dflash_ckpt.errors import InputError
from dflash_ckpt.source import LocalSource, RepoRef, Source, cached_snapshot, hf_hub_cache, hf_offline


def open_hub_source(ref: RepoRef, *, token: str | None = None, role: str = "draft") -> Source:
    """A source for ``ref``: its cached snapshot when that holds a ``config.json``."""
    snap = cached_snapshot(ref.repo_id, ref.revision)
    if snap is not None and (snap / "config.json").exists():
        return LocalSource(snap, label=ref.label, kind="cache")
    hint = " (HF_HUB_OFFLINE is set)" if hf_offline() else ""
    raise InputError(
        f"{ref.label}: {role} repo is not in the local Hugging Face cache at {hf_hub_cache()}"
        f"{hint}; download it first (hf download {ref.repo_id} config.json) or give a local folder",
        code="DF001",
    )


def download_snapshot(
    ref: RepoRef,
    *,
    token: str | None = None,
    role: str = "draft",
    allow_patterns: list[str] | None = None,
) -> Path:
    """The local snapshot folder of ``ref`` holding (at least) the files ``allow_patterns`` match."""
    snap = cached_snapshot(ref.repo_id, ref.revision)
    if snap is not None and (snap / "config.json").exists():
        return snap
    raise InputError(
        f"{ref.label}: {role} repo is not in the local Hugging Face cache at {hf_hub_cache()}; "
        f"download it first (hf download {ref.repo_id}) or give a local folder",
        code="DF001",
    )
