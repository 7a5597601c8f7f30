"""Where the AVX2 kernel's compiled library may come from: a private cache, verified by a digest.

Why: loading a shared library runs its constructors, so a library is code. A file another user
could plant or replace in the cache (a group- or world-writable folder, a symbolic link to one,
a folder owned by someone else), or a file that is not what we built (truncated by a full disk,
half-written, replaced), must never reach ``dlopen``; a truncated library mapped into the
process kills it with SIGBUS on first touch.

The rule (``open_private_dir``, ``read_verified``):
- every folder on the cache's path that we create or use is owned by the current user and not
  writable by group or others; the folders above it (``/``, ``/home``, ``/tmp``) are owned by
  root or the user and either not writable by others or sticky (``/tmp``: nobody else can
  rename what we own there); a symbolic link anywhere on the path is refused, except one that
  root owns in a folder only root can write (a system's ``/home -> /var/home``);
- the library and its digest file are regular files owned by the user, not writable by group or
  others, opened without following links (and without blocking, should one be a FIFO);
- the library is identified by the sha256 of its bytes, written beside it at build time
  (``NAME.sha256``); a library without it, or whose bytes do not hash to it, is never loaded.

Writes are atomic (a temporary name, then a rename), and what is loaded is a copy of the
verified bytes in a fresh private folder (``load_bytes``), so nothing can change between the
check and the ``dlopen``. Only the standard library is used.
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import os
import secrets
import shutil
import stat
import tempfile
from pathlib import Path

#: The most bytes a cached library may have: the built kernel is about 30 KB.
MAX_LIBRARY_BYTES = 16 << 20
#: The suffix of the digest file written beside a library.
DIGEST_SUFFIX = ".sha256"
# The kernel is built on x86 Linux only; elsewhere these flags may be missing, and are never used.
_NOFOLLOW, _CLOEXEC = getattr(os, "O_NOFOLLOW", 0), getattr(os, "O_CLOEXEC", 0)
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _NOFOLLOW | _CLOEXEC
_FILE_FLAGS = os.O_RDONLY | _NOFOLLOW | _CLOEXEC | getattr(os, "O_NONBLOCK", 0)
_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC
_MAX_LINKS = 16


class Unsafe(Exception):
    """The cache, or a file in it, may not be used; the message says why (a path and a reason)."""


def digest(data: bytes) -> str:
    """The identity of a built library: the sha256 of its bytes, in hex."""
    return hashlib.sha256(data).hexdigest()


def open_private_dir(path: Path) -> tuple[int, str]:
    """``(fd, path)`` of the cache folder ``path`` (made absolute; missing folders created with
    mode 0700), when the rule in the module's docstring holds for every folder on it; else
    ``Unsafe``. The caller closes the fd."""
    uid = os.geteuid()
    todo = [p for p in os.path.abspath(path).split("/") if p]
    fd = os.open("/", _DIR_FLAGS)
    here, links = "", 0
    try:
        _require_dir(fd, "/", uid, last=not todo, created=False)
        while todo:
            name = todo.pop(0)
            where = f"{here}/{name}"
            created = False
            try:
                nfd = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                try:
                    os.mkdir(name, 0o700, dir_fd=fd)
                    created = True
                except FileExistsError:
                    pass
                except OSError as exc:
                    raise Unsafe(f"{where}: cannot create the kernel cache ({exc.strerror})") from None
                nfd = _open_dir(fd, name, where)
            except OSError as exc:
                target = _followable_link(fd, name, where, exc, last=not todo)
                links += 1
                if links > _MAX_LINKS:
                    raise Unsafe(f"{where}: too many symbolic links") from None
                todo[:0] = [p for p in target.split("/") if p]
                if target.startswith("/"):
                    os.close(fd)
                    fd, here = os.open("/", _DIR_FLAGS), ""
                continue
            os.close(fd)
            fd, here = nfd, where
            _require_dir(fd, here, uid, last=not todo, created=created)
    except BaseException:
        os.close(fd)
        raise
    return fd, here or "/"


def _open_dir(parent: int, name: str, where: str) -> int:
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent)
    except OSError as exc:
        raise Unsafe(f"{where}: {_not_a_dir(parent, name, exc)}") from None


def _not_a_dir(parent: int, name: str, exc: OSError) -> str:
    try:
        st = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except OSError:
        return exc.strerror or str(exc)
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link"
    return "is not a folder" if exc.errno == errno.ENOTDIR else exc.strerror or str(exc)


def _followable_link(parent: int, name: str, where: str, exc: OSError, *, last: bool) -> str:
    """The target of the link ``name`` above the cache when root owns it and its folder (already
    checked, so not writable by others) is root's; else ``Unsafe`` (the cache itself: always)."""
    if exc.errno not in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
        raise Unsafe(f"{where}: {exc.strerror or exc}") from None
    try:
        st = os.stat(name, dir_fd=parent, follow_symlinks=False)
        folder = os.fstat(parent)
    except OSError as err:
        raise Unsafe(f"{where}: {err.strerror or err}") from None
    if not stat.S_ISLNK(st.st_mode):
        raise Unsafe(f"{where}: is not a folder") from None
    if last or st.st_uid != 0 or folder.st_uid != 0 or folder.st_mode & 0o022:
        raise Unsafe(f"{where}: is a symbolic link") from None
    return os.readlink(name, dir_fd=parent)


def _require_dir(fd: int, where: str, uid: int, *, last: bool, created: bool) -> None:
    st = os.fstat(fd)
    mine = last or created
    if mine:
        if st.st_uid != uid:
            raise Unsafe(f"{where}: the kernel cache is not owned by you")
        if st.st_mode & 0o022:
            raise Unsafe(f"{where}: the kernel cache is writable by others (mode {stat.S_IMODE(st.st_mode):o})")
        return
    if st.st_uid not in (0, uid):
        raise Unsafe(f"{where}: a folder above the kernel cache is owned by another user")
    if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        raise Unsafe(f"{where}: a folder above the kernel cache is writable by others "
                     f"(mode {stat.S_IMODE(st.st_mode):o})")


def read_verified(dir_fd: int, name: str, where: str) -> bytes | None:
    """The bytes of library ``name`` in the private folder ``dir_fd`` when they hash to the digest
    written beside them; None when there is no library; ``Unsafe`` when there is one that may
    not be loaded (no digest, another digest, a link, not a regular file, not ours)."""
    try:
        data = _read_own_file(dir_fd, name, f"{where}/{name}", MAX_LIBRARY_BYTES)
    except FileNotFoundError:
        return None
    try:
        text = _read_own_file(dir_fd, name + DIGEST_SUFFIX, f"{where}/{name}{DIGEST_SUFFIX}", 256)
    except FileNotFoundError:
        raise Unsafe(f"{where}/{name}: no digest file beside it (not built by this tool)") from None
    words = text.decode("ascii", "replace").split()
    if not words or words[0] != digest(data):
        raise Unsafe(f"{where}/{name}: its bytes do not match the digest written when it was built")
    return data


def read_built(dir_fd: int, name: str, where: str) -> bytes:
    """The bytes the compiler just wrote as ``name`` into our private build folder ``dir_fd``
    (checked as a cached file is, bar the digest it does not have yet); ``Unsafe`` else."""
    try:
        return _read_own_file(dir_fd, name, where, MAX_LIBRARY_BYTES)
    except FileNotFoundError:
        raise Unsafe(f"{where}: the compiler wrote no library") from None


def _read_own_file(dir_fd: int, name: str, where: str, limit: int) -> bytes:
    try:
        fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise Unsafe(f"{where}: {_not_a_file(dir_fd, name, exc)}") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise Unsafe(f"{where}: is a folder, not a library")
        if not stat.S_ISREG(st.st_mode):
            raise Unsafe(f"{where}: is not a regular file")
        if st.st_uid != os.geteuid() or st.st_mode & 0o022:
            raise Unsafe(f"{where}: is not owned by you alone")
        if st.st_size > limit:
            raise Unsafe(f"{where}: {st.st_size} bytes is too large")
        chunks, left = [], st.st_size + 1
        while left > 0:
            chunk = os.read(fd, left)
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        if len(data) != st.st_size:
            raise Unsafe(f"{where}: changed while it was read")
        return data
    except OSError as exc:
        raise Unsafe(f"{where}: cannot be read ({exc.strerror or exc})") from None
    finally:
        os.close(fd)


def _not_a_file(parent: int, name: str, exc: OSError) -> str:
    try:
        st = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except OSError:
        return f"cannot be read ({exc.strerror or exc})"
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link"
    if stat.S_ISDIR(st.st_mode):
        return "is a folder, not a library"
    return f"cannot be read ({exc.strerror or exc})"


def store(dir_fd: int, name: str, data: bytes) -> None:
    """Write library ``name`` and its digest file into the private folder ``dir_fd``, each under a
    temporary name then renamed, the library first (a reader that sees the new digest sees the
    new library, or a mismatch and rebuilds). ``OSError`` when the folder cannot take them."""
    for fname, body in ((name, data), (name + DIGEST_SUFFIX, (digest(data) + "\n").encode())):
        tmp = f".{fname}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        fd = os.open(tmp, _WRITE_FLAGS, 0o600, dir_fd=dir_fd)
        try:
            with os.fdopen(fd, "wb", closefd=True) as fh:
                fh.write(body)
            os.replace(tmp, fname, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=dir_fd)
            except OSError:
                pass
            raise


def load_bytes(data: bytes, near: str | None, name: str) -> ctypes.CDLL:
    """``dlopen`` a copy of the verified ``data`` written into a fresh private folder (mode 0700,
    made in ``near``, the verified cache, so that its filesystem allows executing it, else in the
    system's temporary folder), removed again once loaded: the loaded file cannot change under
    us and each load has a path of its own. ``OSError`` when it does not load."""
    try:
        folder = tempfile.mkdtemp(prefix=".load-", dir=near)
    except OSError:
        folder = tempfile.mkdtemp(prefix="dflash-ckpt-kernel-")
    try:
        path = os.path.join(folder, name)
        fd = os.open(path, _WRITE_FLAGS, 0o700)
        with os.fdopen(fd, "wb", closefd=True) as fh:
            fh.write(data)
        return ctypes.CDLL(path)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


__all__ = ["DIGEST_SUFFIX", "MAX_LIBRARY_BYTES", "Unsafe", "digest", "load_bytes", "open_private_dir", "read_built",
           "read_verified",
           "store"]
