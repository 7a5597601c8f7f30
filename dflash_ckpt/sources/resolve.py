"""From a command-line argument to a checkpoint: a local folder wins, else a Hub repo id."""

from __future__ import annotations

import os
from pathlib import Path

from dflash_ckpt.errors import InputError
from dflash_ckpt.sources.base import Source, os_error, user_path
from dflash_ckpt.sources.local import LocalSource
from dflash_ckpt.sources.repo_ref import parse_repo_ref


def looks_like_path(arg: str) -> bool:
    """Arguments that can only mean a folder: absolute, ``./``, ``../``, ``~``, more than one
    slash, or a first segment that names a folder here (``drafts/Qwen3-8B-DFlash-b17``, a typo
    beside an existing ``drafts/``, is a missing folder, not a Hub repo to retry for seconds)."""
    return (
        arg.startswith((".", "/", "~"))
        or arg.count("/") != 1
        or os.sep != "/" and os.sep in arg
        or _first_segment_is_folder(arg)
    )


def _first_segment_is_folder(arg: str) -> bool:
    head = arg.split("/", 1)[0]
    try:
        return bool(head) and os.path.isdir(head)
    except (OSError, ValueError):
        return False


def open_source(
    arg: str,
    *,
    revision: str | None = None,
    token: str | None = None,
    role: str = "draft",
) -> Source:
    """Resolve a command-line argument to a ``Source``.

    A path that exists wins (as with ``from_pretrained``); otherwise ``org/name[@rev]`` is a Hub
    repo, read from the local cache first and, unless offline, over the network.
    """
    path = user_path(arg)
    try:
        is_dir = path.is_dir()
        exists = is_dir or path.exists() or path.is_symlink()
    except OSError as err:
        raise os_error(err, arg, code="DF001") from None
    if is_dir:
        try:
            os.listdir(path)
        except OSError as err:
            raise os_error(err, arg, code="DF001") from None
        return LocalSource(path, label=arg)
    if exists:
        try:
            path.stat()
        except OSError as err:
            raise os_error(err, arg, code="DF001") from None
        raise InputError(
            f"is a file; give the {role} checkpoint folder (the one holding config.json)",
            code="DF001", path=arg,
        )
    ref = None if looks_like_path(arg) else parse_repo_ref(arg, revision)
    if ref is None:
        raise InputError(
            f"no such folder; give a local {role} folder or a Hub repo id (org/name)",
            code="DF001", path=arg,
        )
    from dflash_ckpt.sources.hub.repo import open_hub_source  # noqa: PLC0415 - only Hub arguments pay for it

    return open_hub_source(ref, token=token, role=role)


def local_folder(
    arg: str,
    *,
    revision: str | None = None,
    token: str | None = None,
    role: str = "draft",
    allow_patterns: list[str] | None = None,
) -> tuple[Path, str]:
    """A folder on this machine holding the checkpoint, and its label for messages.

    For ``normalize`` and ``smoke-run``, which need real files: a local folder is returned as
    is; a Hub repo id is downloaded (only ``allow_patterns``) into the Hugging Face cache, or
    taken from it, and its snapshot folder returned.
    """
    src = open_source(arg, revision=revision, token=token, role=role) if looks_like_path(arg) or user_path(arg).exists() else None
    if src is not None:
        return src.local_dir, src.label  # type: ignore[return-value]
    ref = parse_repo_ref(arg, revision)
    if ref is None:
        raise InputError(f"no such folder; give a local {role} folder or a Hub repo id (org/name)", code="DF001",
                         path=arg)
    from dflash_ckpt.sources.hub.repo import download_snapshot  # noqa: PLC0415

    return download_snapshot(ref, token=token, role=role, allow_patterns=allow_patterns), ref.label
