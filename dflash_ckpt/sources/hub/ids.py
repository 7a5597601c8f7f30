"""What may become part of a path in the Hugging Face cache, checked wherever it is read.

A listing (the Hub's repo info, huggingface_hub's ``trees/<commit>.json``, our ``files.json``) and
the ``refs/`` files are input like any other: an LFS oid of ``../../x`` would name a blob outside
the cache, a 5,000-character file name fails with ENAMETOOLONG half-way through a download. So
every id that builds a path is checked to be exact-length lowercase hex, every file name to be a
relative path of short parts, and every path written is checked to resolve inside the repo's
cache folder before anything is created there.

Only the standard library is used: the cache is read before huggingface_hub is imported.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from dflash_ckpt import limits

_SHA256 = re.compile(r"[0-9a-f]{64}")
_SHA1 = re.compile(r"[0-9a-f]{40}")


def is_sha256(value: object) -> bool:
    """An LFS oid: 64 lowercase hex digits, nothing else."""
    return isinstance(value, str) and _SHA256.fullmatch(value) is not None


def is_git_id(value: object) -> bool:
    """A git blob id or commit hash: 40 lowercase hex digits, nothing else."""
    return isinstance(value, str) and _SHA1.fullmatch(value) is not None


def name_problem(name: object) -> str | None:
    """Why ``name`` cannot be a file of a repo (``None`` when it can): it must be a relative path
    of non-empty parts, none ``.`` or ``..``, without NUL or backslash, each part short enough for
    every file system (``limits.MAX_NAME_PART_BYTES``) and the whole ``limits.MAX_NAME_BYTES``."""
    if not isinstance(name, str) or not name:
        return "not a non-empty string"
    if name.startswith("/") or "\\" in name or "\0" in name:
        return "not a relative path"
    parts = name.split("/")
    if any(p in ("", ".", "..") for p in parts):
        return "a path that leaves the repo"
    try:
        encoded = name.encode("utf-8")
    except UnicodeEncodeError:
        return "not valid UTF-8"
    if len(encoded) > limits.MAX_NAME_BYTES or any(len(p.encode("utf-8")) > limits.MAX_NAME_PART_BYTES for p in parts):
        return (f"longer than file systems allow ({len(encoded):,} bytes; at most {limits.MAX_NAME_PART_BYTES} "
                f"per folder or file name, {limits.MAX_NAME_BYTES:,} in all)")
    return None


def shown(name: object, limit: int = 80) -> str:
    """``name`` as a short repr for a message (a 5,000-character name is not printed whole)."""
    text = repr(name)
    return text if len(text) <= limit else text[: limit - 1] + "…'"


def inside(path: Path, root: Path) -> bool:
    """Whether ``path``, with every link resolved, lies under ``root`` (itself resolved): a folder of
    the cache replaced by a link to elsewhere must not receive our writes."""
    real_root = os.path.realpath(root)
    real = os.path.realpath(path)
    return real == real_root or real.startswith(real_root.rstrip(os.sep) + os.sep)
