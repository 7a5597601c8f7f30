"""Build OUT: DRAFT's files hard-linked or copied into a hidden sibling folder, then renamed to OUT.

OUT appears whole or not at all. The rename never replaces a folder that holds files this run
did not put there: OUT is checked empty (or ``--force``) before the build, and if something
wrote into it meanwhile, the run stops with one line and leaves it as it is (a plain rename over
an empty folder is atomic; one over a non-empty folder fails instead of deleting).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

from dflash_ckpt.errors import InputError, UsageError
from dflash_ckpt.canonical.fsops import (
    LINK_FALLBACK_ERRNOS, OUT_FULL_ERRNOS, BuildReport, FileAction, _fsync_dir, _real, _term_as_interrupt,
    require_free_space,
)
from dflash_ckpt.canonical.lock import lock_out, unlock_out
from dflash_ckpt.sources.base import os_error

#: Copies at least this large show a progress bar (when stderr is a terminal).
PROGRESS_MIN_BYTES = 256 * 2**20
CHUNK = 8 * 2**20
SENDFILE_CHUNK = 64 * 2**20


def copy_file(src: Path, dst: Path, on_bytes: Callable[[int], None] | None = None) -> None:
    """Copy data, mode and times; ``on_bytes`` hears about every chunk (for a progress bar)."""
    with open(src, "rb") as fi, open(dst, "xb") as fo:
        done = _sendfile(fi.fileno(), fo.fileno(), on_bytes)
        fi.seek(done)
        fo.seek(done)
        buf = bytearray(CHUNK)
        view = memoryview(buf)
        while True:
            n = fi.readinto(buf)
            if not n:
                break
            fo.write(view[:n])
            if on_bytes is not None:
                on_bytes(n)
        fo.flush()
        os.fsync(fo.fileno())
    shutil.copystat(src, dst)


def _sendfile(fd_in: int, fd_out: int, on_bytes: Callable[[int], None] | None) -> int:
    """Copy in the kernel while it allows (about a third faster here); bytes done so far."""
    done = 0
    if not hasattr(os, "sendfile"):
        return done
    while True:
        try:
            n = os.sendfile(fd_out, fd_in, done, SENDFILE_CHUNK)
        except OSError as err:
            if err.errno in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EBADF):
                return done  # the read/write loop takes over from here
            raise
        if n == 0:
            return done
        done += n
        if on_bytes is not None:
            on_bytes(n)


ProgressFactory = Callable[[int], contextlib.AbstractContextManager[Callable[[int], None]]]


def build_out(
    draft_dir: Path,
    out: Path,
    config_bytes: bytes,
    config_mode: int,
    actions: list[FileAction],
    *,
    progress: ProgressFactory | None = None,
    force: bool = False,
) -> BuildReport:
    """Write OUT: DRAFT's files (linked or copied) and the new ``config.json``, all or nothing, under
    OUT's lock; a failure to write is one line naming OUT (``out_error``)."""
    lock_out(out)
    try:
        parent = _real(out).parent
        report = BuildReport()
        copy_total = sum(a.size for a in actions if a.how == "copy")
        require_free_space(parent, copy_total + len(config_bytes))
        try:
            tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=parent))
        except OSError as err:
            raise os_error(err, str(parent), then="; OUT cannot be created there") from None
        try:
            with _term_as_interrupt():
                bar = progress(copy_total) if progress is not None and copy_total >= PROGRESS_MIN_BYTES else contextlib.nullcontext(None)
                with bar as on_bytes:
                    for a in actions:
                        _place(a, tmp, parent, report, on_bytes)
                cfg = tmp / "config.json"
                with open(cfg, "xb") as fh:
                    fh.write(config_bytes)
                    fh.flush()
                    os.fchmod(fh.fileno(), config_mode)
                    os.fsync(fh.fileno())
                umask = os.umask(0)
                os.umask(umask)
                os.chmod(tmp, 0o777 & ~umask)
                for root, _dirs, _files in os.walk(tmp):
                    _fsync_dir(Path(root))
                _swap_into_place(tmp, out, force=force)
                _fsync_dir(parent)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return report
    except OSError as err:
        raise out_error(err, out) from None
    finally:
        unlock_out(out)


def out_error(err: OSError, out: Path) -> InputError:
    """One line for a failure to write OUT, naming OUT (not the file being copied into it)."""
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        what = "no space (or no free inodes) left" if err.errno == errno.ENOSPC else "disk quota exceeded"
        return InputError(
            f"OUT {out}: {what} on its filesystem while writing it; nothing was kept, free space "
            "(`df -h`, `df -i`) or give an OUT on another filesystem"
        )
    if err.errno == errno.EROFS:
        return InputError(f"OUT {out}: its filesystem is read-only; give an OUT on a writable one")
    return InputError(f"OUT {out}: writing it failed ({err.strerror or err}); nothing was kept")


def _place(a: FileAction, tmp: Path, parent: Path, report: BuildReport, on_bytes: Callable[[int], None] | None) -> None:
    dst = tmp / a.rel
    dst.parent.mkdir(parents=True, exist_ok=True)
    if a.how == "symlink":
        os.symlink(a.link_text if a.link_text is not None else os.readlink(a.src), dst)
        return
    if a.how == "link":
        try:
            os.link(a.src, dst)
            report.linked.append(a.rel)
            report.bytes_linked += a.size
            return
        except OSError as err:
            if err.errno in OUT_FULL_ERRNOS - {errno.EMLINK}:
                raise
            if err.errno not in LINK_FALLBACK_ERRNOS:
                raise os_error(err, str(a.src)) from None
            require_free_space(parent, a.size)  # this one was counted as a link
    try:
        copy_file(a.src, dst, on_bytes)
    except OSError as err:
        if err.errno in OUT_FULL_ERRNOS:
            raise  # about OUT: build_out names it
        raise os_error(err, str(a.src), then=" (while copying into OUT)") from None
    report.copied.append(a.rel)
    report.bytes_copied += a.size


def _swap_into_place(tmp: Path, out: Path, *, force: bool) -> None:
    """Rename the finished folder to OUT. An empty OUT is replaced by the rename itself (atomic);
    a non-empty one only with ``--force``. Anything else (OUT filled, or made a file, by someone
    else during the run) stops the run with one line and leaves OUT untouched."""
    try:
        os.rename(tmp, out)  # POSIX replaces a missing or empty folder in one step
        return
    except OSError as err:
        if err.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EISDIR):
            raise os_error(err, str(out)) from None
        if not force or not out.is_dir() or out.is_symlink():
            raise UsageError(
                f"OUT {out} was changed by someone else during this run (it is no longer empty, or no longer "
                "a folder); it was left as it is and nothing was written; check what is in it, then run again "
                "(--force replaces it)"
            ) from None
    old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=tmp.parent))
    os.rename(out, old / "out")
    try:
        os.rename(tmp, out)
    except BaseException:
        os.rename(old / "out", out)
        shutil.rmtree(old, ignore_errors=True)
        raise
    shutil.rmtree(old, ignore_errors=True)
