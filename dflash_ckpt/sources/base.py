"""What every checkpoint source offers: read-only access to named files, and OS errors in one line.

Everything downstream reads through a ``Source`` so that the checks never care whether bytes come
from disk or over HTTP range requests. A source reads only what it is asked for: a whole small
JSON file, or a byte range of a safetensors file (its header), never tensor data.
"""

from __future__ import annotations

import errno
import os
from abc import ABC, abstractmethod
from pathlib import Path

from dflash_ckpt.errors import InputError
from dflash_ckpt.limits import MAX_CONFIG_BYTES, MAX_INDEX_BYTES, human_bytes


class Source(ABC):
    """Read-only access to the files of one checkpoint."""

    #: What the user typed, used to name the checkpoint in reports.
    label: str
    #: ``local``, ``cache`` or ``hub``.
    kind: str

    def __init__(self) -> None:
        self.bytes_read = 0

    @abstractmethod
    def where(self, name: str) -> str:
        """How to name file ``name`` of this checkpoint in a message (a path or ``repo:file``)."""

    @abstractmethod
    def list_files(self) -> list[str]:
        """Relative names of the top-level files (weights live at the top level in every layout)."""

    @abstractmethod
    def size(self, name: str) -> int:
        """Size in bytes of file ``name``; ``InputError`` if it cannot be read."""

    @abstractmethod
    def read(self, name: str, offset: int = 0, length: int | None = None) -> bytes:
        """``length`` bytes of ``name`` from ``offset`` (to the end when ``None``)."""

    def exists(self, name: str) -> bool:
        return name in self.list_files()

    def read_json_bytes(self, name: str, cap: int | None = None) -> bytes:
        """The bytes of a small JSON file, refusing files too large to be one (``limits``)."""
        if cap is None:
            cap = MAX_INDEX_BYTES if name.endswith(".index.json") else MAX_CONFIG_BYTES
        size = self.size(name)
        if size > cap:
            raise InputError(
                f"{human_bytes(size)} is too large for a JSON config "
                f"(limit {human_bytes(cap)})",
                code="DF001", path=self.where(name),
            )
        data = self.read(name)
        if len(data) > cap:  # the file grew after it was measured
            raise InputError(f"grew past the {human_bytes(cap)} limit while read", code="DF001", path=self.where(name))
        return data

    @property
    def local_dir(self) -> Path | None:
        """The folder holding the files, when there is one on this machine."""
        return None


def os_problem(err: OSError, path: str) -> tuple[str, str]:
    """An OS error as ``(where, what)``: the path as shown (a very long one shortened) and what
    went wrong with it and what to do."""
    if err.errno == errno.ENOENT:
        return path, "no such file or folder"
    if err.errno in (errno.EACCES, errno.EPERM):
        return path, "permission denied; make it readable (chmod) or run as its owner"
    if err.errno == errno.ELOOP:
        return path, "symbolic link loop; point the link at a real file"
    if err.errno == errno.EISDIR:
        return path, "is a folder, expected a file"
    if err.errno == errno.ENOTDIR:
        return path, "a part of the path is not a folder"
    if err.errno == errno.ENAMETOOLONG:
        shown = path if len(path) <= 160 else f"{path[:100]}...{path[-40:]}"
        return shown, (f"path too long ({len(path)} characters; the system allows 255 bytes a name, "
                       "4096 a path); give a shorter one")
    return path, f"{err.strerror or err}"


def os_error(err: OSError, path: str | os.PathLike[str], *, then: str = "", code: str | None = None) -> InputError:
    """An OS error as the ``InputError`` that reports it, located at ``path``; ``then`` goes on
    with the sentence (what it means for the command)."""
    where, what = os_problem(err, str(path))
    return InputError(what + then, code=code, path=where)


def user_path(arg: str | Path, what: str | None = None) -> Path:
    """``arg`` as a ``Path`` with a leading ``~`` or ``~user`` expanded, as every path option is.

    ``Path.expanduser`` raises ``RuntimeError`` for a user that does not exist (``~nosuchuser/x``)
    or without a home directory. A shell leaves such a word as it is, so a folder literally named
    ``~nosuchuser`` here is taken as is; otherwise it is one DF001 line naming the argument.
    """
    path = Path(arg)
    try:
        return path.expanduser()
    except RuntimeError:
        if path.exists() or path.is_symlink():
            return path
        user = str(arg).split("/", 1)[0]
        raise InputError(
            f"{f'{what}: ' if what else ''}{user!r} names no user with a home directory here, and no "
            "such folder exists; write the path in full (or ./ before a folder whose name starts with ~)",
            code="DF001", path=arg) from None
