"""Read a small file whole, as every command reads side files: regular files only, with a size cap.

A checkpoint folder is untrusted. A FIFO named ``tokenizer.json`` would block a plain ``open``
forever, ``/dev/zero`` behind a link would be read until memory runs out, a folder would raise
``IsADirectoryError``. Here the file is opened without blocking, checked to be a regular file, and
read up to its cap (plus one byte, to notice a file that grew): each of those is one line.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from dflash_ckpt.errors import InputError
from dflash_ckpt.limits import human_bytes
from dflash_ckpt.sources.base import os_error

_KINDS = {
    stat.S_IFDIR: "a folder",
    stat.S_IFIFO: "a named pipe (FIFO)",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
}


def file_kind(mode: int) -> str:
    """What a non-regular file is, for messages."""
    return _KINDS.get(stat.S_IFMT(mode), "not a regular file")


def read_capped(path: Path | str, cap: int, *, what: str = "file", code: str = "DF001") -> bytes:
    """The bytes of the regular file ``path``; ``InputError`` (one line naming it) otherwise."""
    where = str(path)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags)
    except OSError as err:
        raise os_error(err, where, code=code) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise InputError(f"is {file_kind(st.st_mode)}, expected a regular {what}", code=code, path=where)
        if st.st_size > cap:
            raise InputError(
                f"{human_bytes(st.st_size)} is too large for a {what} (limit {human_bytes(cap)})",
                code=code, path=where,
            )
        chunks, got = [], 0
        while got <= cap:
            chunk = os.read(fd, min(1 << 20, cap + 1 - got))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
        if got > cap:
            raise InputError(f"grew past the {human_bytes(cap)} limit for a {what} while read", code=code, path=where)
        return b"".join(chunks)
    except OSError as err:
        raise os_error(err, where, code=code) from None
    finally:
        os.close(fd)


def read_capped_text(path: Path | str, cap: int, *, what: str = "file", code: str = "DF001") -> str:
    """``read_capped`` decoded as UTF-8 (a BOM tolerated); not UTF-8 is one line too."""
    data = read_capped(path, cap, what=what, code=code)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise InputError(f"not UTF-8 text (byte {err.start}); a {what} must be UTF-8", code=code, path=path) from None
