"""One writer per OUT: the lock file beside OUT, and what a killed writer leaves behind.

The lock is an exclusive ``flock`` on ``PARENT/.OUT.dflash-ckpt.lock``; the kernel drops it when
the holder exits, even by SIGKILL, so a stale lock file never blocks a later run. The lock file
lives in a folder other people may write to, so it is opened as a hostile path would demand:
``O_NOFOLLOW`` (a symbolic link planted there is refused, never followed to the user's file),
``O_CREAT | O_EXCL`` when it is created, and an existing file is reused only when it is what this
tool leaves (a small regular file of ours, with one link, holding a process id). Nothing else is
ever truncated or written. ``filelock`` (under huggingface_hub's ``WeakFileLock``) is not used: it
truncates an existing lock file once it holds it, so a lock file planted as a hard link to a
user's file empties that file (``benchmarks/bench_hub_helpers.py``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import sys
from pathlib import Path
from typing import Callable

from dflash_ckpt.errors import InputError, UsageError, inert
from dflash_ckpt.sources.base import os_error

#: The largest lock file taken for ours: a process id and a newline.
MAX_LOCK_BYTES = 32
_OPEN = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK

_LOCKS: dict[str, int] = {}


def _real(path: Path) -> Path:
    return Path(os.path.realpath(path))


def lock_path(out: Path) -> Path:
    """The lock file of OUT: a hidden sibling, like the partial folders."""
    return _real(out).parent / f".{out.name}.dflash-ckpt.lock"


def _refuse_foreign(path: Path, why: str) -> UsageError:
    return UsageError(
        f"OUT's lock file {why}, so it is not one dflash-ckpt left and is left untouched; "
        "remove it (or give another OUT)", path=path
    )


def _open_lock(path: Path) -> tuple[int, bool]:
    """``(fd, created)``: the existing lock file opened without following a link, else a new one."""
    for _ in range(8):  # a file appearing or vanishing between the two opens: try again
        try:
            return os.open(path, _OPEN), False
        except OSError as err:
            if err.errno == errno.ELOOP:
                raise _refuse_foreign(path, "is a symbolic link") from None
            if err.errno == errno.EISDIR:
                raise _refuse_foreign(path, "is a folder") from None
            if err.errno != errno.ENOENT:
                raise os_error(err, str(path), then="; OUT's lock file cannot be opened there") from None
        try:
            return os.open(path, _OPEN | os.O_CREAT | os.O_EXCL, 0o644), True
        except OSError as err:
            if err.errno == errno.EEXIST:
                continue
            raise os_error(err, str(path), then="; OUT's lock file cannot be created there") from None
    raise InputError("OUT's lock file keeps changing under this run; retry, or give another OUT", path=path)


def _require_ours(fd: int, path: Path) -> None:
    """An existing lock file is reused only when it is what a run of this tool leaves."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise _refuse_foreign(path, "is not a regular file")
    if st.st_nlink != 1:
        raise _refuse_foreign(path, f"has {st.st_nlink} hard links")
    if st.st_uid != os.getuid():
        raise _refuse_foreign(path, "belongs to another user")
    if st.st_size > MAX_LOCK_BYTES:
        raise _refuse_foreign(path, f"holds {st.st_size} bytes, more than a process id")
    text = os.pread(fd, MAX_LOCK_BYTES, 0).strip()
    if text and not text.isdigit():
        raise _refuse_foreign(path, "holds something other than a process id")


def lock_out(out: Path) -> None:
    """Hold an exclusive ``flock`` on OUT's lock file, or fail at once naming the other run.

    Held until ``unlock_out`` (``build_out`` calls it) or the process ends.
    """
    import fcntl  # noqa: PLC0415 - POSIX only, like the rest of normalize's writing

    path = lock_path(out)
    key = str(path)
    if key in _LOCKS:
        return
    while True:
        fd, created = _open_lock(path)
        try:
            if not created:
                _require_ours(fd, path)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            os.close(fd)
            if err.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                holder = _read_pid(path)
                who = f" (process {holder})" if holder else ""
                raise UsageError(
                    f"OUT {out} is being written by another dflash-ckpt normalize{who}, which holds "
                    f"{path}; wait for it to finish, or give another OUT"
                ) from None
            raise os_error(err, str(path)) from None
        except BaseException:
            os.close(fd)
            raise
        if _same_file(fd, path):  # not unlinked (or replaced) by a finishing run between open and flock
            break
        os.close(fd)
    pid = f"{os.getpid()}\n".encode()
    os.pwrite(fd, pid, 0)  # a new file, or one already checked to hold only a process id
    os.ftruncate(fd, len(pid))
    if not _LOCKS:
        import atexit  # noqa: PLC0415

        atexit.register(_unlock_all)
    _LOCKS[key] = fd


def _same_file(fd: int, path: Path) -> bool:
    try:
        mine, there = os.fstat(fd), os.lstat(path)
    except OSError:
        return False
    return (mine.st_dev, mine.st_ino) == (there.st_dev, there.st_ino)


def _release(key: str, fd: int) -> None:
    """Remove the lock file while still holding it, only if the name still is our file."""
    if _same_file(fd, Path(key)):
        with contextlib.suppress(OSError):
            os.unlink(key)
    os.close(fd)


def _unlock_all() -> None:
    for key in list(_LOCKS):
        _release(key, _LOCKS.pop(key))


def unlock_out(out: Path) -> None:
    """Release OUT's lock (and remove its file while still holding it)."""
    key = str(lock_path(out))
    fd = _LOCKS.pop(key, None)
    if fd is not None:
        _release(key, fd)


def _read_pid(path: Path) -> str | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        text = os.read(fd, MAX_LOCK_BYTES).decode("ascii", "replace").strip()
    except OSError:
        return None
    finally:
        os.close(fd)
    return text if text.isdigit() else None


def stale_folders(out: Path) -> tuple[list[Path], list[Path]]:
    """Hidden siblings a killed run of ``build_out`` left: partial OUTs, and moved-aside old OUTs."""
    parent = _real(out).parent
    partial, old = [], []
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return [], []
    for e in entries:
        if e.name.startswith(f".{out.name}.partial-") and e.is_dir(follow_symlinks=False):
            partial.append(Path(e.path))
        elif e.name.startswith(f".{out.name}.old-") and e.is_dir(follow_symlinks=False):
            old.append(Path(e.path))
    return sorted(partial), sorted(old)


def recover_stale(out: Path, *, say: Callable[[str], None] | None = None) -> list[str]:
    """With OUT's lock held, every partial folder of OUT is dead: remove it. An old OUT moved
    aside by a run killed mid-swap is put back when OUT is missing (it was the user's), else
    removed. Returns what was done, one line each (also said on stderr)."""
    notes: list[str] = []
    partial, old = stale_folders(out)
    for folder in old:
        inner = folder / "out"
        if inner.is_dir() and not (out.exists() or out.is_symlink()):
            try:
                os.rename(inner, out)
                notes.append(f"restored OUT {out} from {folder}, where an interrupted run had moved it")
            except OSError as err:
                notes.append(f"could not restore OUT {out} from {folder}: {err.strerror}; move it back by hand")
                continue
        shutil.rmtree(folder, ignore_errors=True)
        if not folder.exists():
            notes.append(f"removed {folder}, left by an interrupted run")
    for folder in partial:
        shutil.rmtree(folder, ignore_errors=True)
        notes.append(
            f"removed {folder}, a partial OUT left by an interrupted run" if not folder.exists()
            else f"could not remove {folder}, a partial OUT left by an interrupted run; delete it by hand"
        )
    for line in notes:
        (say or (lambda m: print(f"note: {inert(m)}", file=sys.stderr)))(line)
    return notes
