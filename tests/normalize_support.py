"""Helpers for the normalize tests: fingerprints of whole folders (sparse files included)."""

from __future__ import annotations

import errno
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from dflash_ckpt.draftspec.specs import DFLASH_KEYS, build_spec

CHUNK = 1 << 20
ZERO = bytes(CHUNK)


def content_digest(path: Path) -> str:
    """sha256 of a file's content that skips holes and all-zero chunks, by offset.

    Two files with the same bytes get the same digest however they are laid out on disk (a
    sparse fixture and its full copy agree), and a multi-GB sparse fixture hashes in
    milliseconds because only its data extents are read.
    """
    h = hashlib.sha256()
    size = path.stat().st_size
    h.update(f"size={size};".encode())
    with open(path, "rb") as fh:
        fd = fh.fileno()
        pos = 0
        while pos < size:
            try:
                data = os.lseek(fd, pos, os.SEEK_DATA)
            except OSError as err:
                if err.errno == errno.ENXIO:
                    break
                raise
            hole = os.lseek(fd, data, os.SEEK_HOLE)
            start = data - data % CHUNK
            fh.seek(start)
            while start < hole:
                block = fh.read(min(CHUNK, size - start))
                if not block:
                    break
                if block != ZERO[: len(block)]:
                    h.update(f"@{start}:".encode())
                    h.update(block)
                start += len(block)
            pos = max(hole, start)
    return h.hexdigest()


def tree_state(folder: Path) -> dict[str, Any]:
    """Every entry under ``folder``: type, mode, mtime, link target, inode and content digest."""
    state: dict[str, Any] = {"__dir__": (os.stat(folder).st_mtime_ns, oct(os.stat(folder).st_mode))}
    for root, dirs, files in os.walk(folder):
        for name in sorted(dirs + files):
            p = Path(root) / name
            rel = str(p.relative_to(folder))
            st = os.lstat(p)
            if p.is_symlink():
                state[rel] = ("link", os.readlink(p), st.st_mtime_ns)
            elif p.is_dir():
                state[rel] = ("dir", oct(st.st_mode), st.st_mtime_ns)
            else:
                state[rel] = ("file", oct(st.st_mode), st.st_mtime_ns, st.st_ino, content_digest(p))
    return state


def files_under(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def resolved(config: dict[str, Any]) -> dict[str, Any]:
    """What a nested-first reader resolves for the DFlash keys."""
    spec = build_spec(config, label="t")
    return {k: spec.keys[k].value for k in DFLASH_KEYS}


def read_json(path: Path) -> Any:
    return json.loads(path.read_bytes())


def leftovers(parent: Path) -> list[str]:
    """Temporary folders a failed or interrupted run might have left beside OUT."""
    return sorted(p.name for p in parent.iterdir() if ".partial-" in p.name or ".old-" in p.name)
