"""File operations of ``normalize``: check OUT, plan its files, or rewrite config.json in place.

Building OUT is ``canonical/build.py``, OUT's lock ``canonical/lock.py``. The promises: DRAFT is only read; OUT appears whole or not at all (it is built in a temporary
sibling folder and renamed); an in-place rewrite goes through a temporary file, fsync and
rename, so a crash leaves the old or the new file, never half of one; in a Hugging Face cache
snapshot ``config.json`` is a link to a shared blob, and renaming over the link replaces the link
instead of writing through it. Weights are hard-linked when OUT is on DRAFT's filesystem (no
bytes move) and copied otherwise, after checking that the copy fits.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import signal
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from dflash_ckpt.errors import InputError, UsageError, inert
from dflash_ckpt.limits import FREE_SPACE_MARGIN
from dflash_ckpt.limits import human_bytes as round_bytes
from dflash_ckpt.canonical.lock import _real, lock_out, recover_stale
from dflash_ckpt.sources.base import os_error

#: Files that are linked rather than copied: big, and never edited by hand. Small files (JSON,
#: tokenizer, model card) are copied, so that editing one in OUT cannot change DRAFT through a
#: shared inode.
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".gguf", ".h5", ".msgpack", ".onnx", ".npz", ".pkl")
#: Top-level folders that are tool state, not part of the draft (``hf download --local-dir``
#: metadata, a git clone's history).
SKIP_DIRS = (".cache", ".git")
#: Room left free beyond the copy itself (stated in the message that refuses a copy).
FREE_MARGIN = FREE_SPACE_MARGIN
#: What DRAFT's links to files outside it become in OUT: the file's content (hard-linked or
#: copied like any other file), or a symbolic link to the same absolute target.
EXTERNAL_COPY, EXTERNAL_LINK = "copy", "link"
#: Write errors that are about the destination whatever file was being copied.
OUT_FULL_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EMLINK}
LINK_FALLBACK_ERRNOS = {errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP}


@dataclass(frozen=True)
class FileAction:
    """One file of DRAFT and how it reaches OUT."""

    rel: str
    src: Path  # the real file (links of a cache snapshot resolved)
    size: int
    how: str  # "link", "copy" or "symlink" (OUT gets a symbolic link whose text is ``link_text``)
    link_text: str | None = None


@dataclass
class BuildReport:
    linked: list[str] = field(default_factory=list)
    copied: list[str] = field(default_factory=list)
    bytes_linked: int = 0
    bytes_copied: int = 0

    def to_json(self) -> dict[str, object]:
        return {"linked": self.linked, "copied": self.copied, "bytes_linked": self.bytes_linked, "bytes_copied": self.bytes_copied}


def _inside(child: Path, parent: Path) -> bool:
    return child == parent or parent in child.parents


def require_out_path(draft_dir: Path, out: Path, *, force: bool) -> None:
    """Refuse an OUT that would overwrite the user's files or DRAFT itself (exit 2).

    Once OUT is known not to touch DRAFT, OUT's lock is taken (held until ``build_out`` ends, or
    the process does), so that two runs into one OUT cannot both pass the checks below; then what
    a killed run left behind is cleared, and OUT's state is checked.
    """
    draft_real, out_real = _real(draft_dir), _real(out)
    if out_real == draft_real:
        raise UsageError(f"OUT {out} is DRAFT itself; give a new folder, or use --in-place to rewrite DRAFT's config.json")
    if _inside(out_real, draft_real):
        raise UsageError(f"OUT {out} is inside DRAFT {draft_dir}; give a folder outside it")
    parent = out_real.parent
    if not parent.is_dir():
        raise UsageError(f"OUT's parent folder {out.parent} does not exist; create it first")
    if out.is_symlink():
        raise UsageError(f"OUT {out} is a symbolic link; give the folder it points to, or a new folder")
    if out.exists() and out.is_dir() and _inside(draft_real, out_real):
        raise UsageError(f"OUT {out} contains DRAFT {draft_dir}; replacing it would delete the draft")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError("not writable by this user; OUT cannot be created there (choose another folder or fix its permissions)",
                         path=parent)
    lock_out(out)
    recover_stale(out)
    if out.is_symlink() or out.exists():
        if not out.is_dir():
            raise UsageError(f"OUT {out} exists and is not a folder; give a new folder")
        try:
            empty = not any(os.scandir(out))
        except OSError as err:
            raise os_error(err, str(out)) from None
        if not empty and not force:
            raise UsageError(f"OUT {out} exists and is not empty; give a new folder or pass --force to replace it")


def plan_files(
    draft_dir: Path,
    out: Path,
    *,
    copy_weights: bool = False,
    external_links: str = EXTERNAL_COPY,
    warn: Callable[[str], None] | None = None,
) -> list[FileAction]:
    """Every file of DRAFT except ``config.json``, and whether it is linked or copied.

    A symbolic link whose target lies outside DRAFT is warned about (``warn``, default stderr):
    with ``external_links="copy"`` OUT gets the file's content, with ``"link"`` a link to the
    same absolute target. A link to a folder is recreated as a link, with its text kept only when
    it resolves inside DRAFT (then it resolves to the same place inside OUT); a relative link
    leaving DRAFT is made absolute, so that it never resolves somewhere else from OUT. Links of a
    Hugging Face cache snapshot into its repo's ``blobs/`` are the cache's layout, not external.
    """
    import sys  # noqa: PLC0415

    say = warn or (lambda m: print(f"warning: {inert(m)}", file=sys.stderr))
    actions: list[FileAction] = []
    try:
        out_dev = os.stat(_real(out).parent).st_dev
    except OSError as err:
        raise os_error(err, str(out.parent)) from None
    out_real = _real(out)
    draft_real = _real(draft_dir)
    blobs = draft_real.parent.parent / "blobs" if draft_real.parent.name == "snapshots" else None

    def external(target: Path) -> bool:
        return not _inside(target, draft_real) and not (blobs is not None and _inside(target, blobs))

    for root, dirs, files in os.walk(draft_dir):
        rel_root = Path(root).relative_to(draft_dir)
        if rel_root == Path("."):
            dirs[:] = [d for d in dirs if d not in SKIP_DIRS]
        for d in sorted(dirs):
            link = Path(root) / d
            if not os.path.islink(link):
                continue
            dirs.remove(d)
            rel = str(rel_root / d) if rel_root != Path(".") else d
            target = _real(link)
            if external(target):
                say(f"{link} links to the folder {target}, outside DRAFT; OUT gets a link to {target}")
                text = str(target)
            else:  # relative within the tree, so that from OUT it names OUT's copy of the folder
                text = os.path.relpath(target, _real(link.parent))
            actions.append(FileAction(rel, link, 0, "symlink", text))
        for name in sorted(files):
            rel = str(rel_root / name) if rel_root != Path(".") else name
            if rel == "config.json":
                continue
            path = Path(root) / name
            try:
                st = os.stat(path)
            except OSError as err:
                raise os_error(err, str(path), then="; the draft is incomplete (re-download it)") from None
            if not stat.S_ISREG(st.st_mode):
                raise InputError("not a regular file; remove it from the draft folder", path=path)
            src = _real(path)
            if _inside(src, out_real) and out.exists():
                raise UsageError(f"{path} lives inside OUT {out} (as {src}); replacing OUT would delete it")
            if os.path.islink(path) and external(src):
                if external_links == EXTERNAL_LINK:
                    say(f"{path} links to {src}, outside DRAFT; OUT gets a link to it (--external-links link)")
                    actions.append(FileAction(rel, src, 0, "symlink", str(src)))
                    continue
                say(f"{path} links to {src}, outside DRAFT; OUT gets its content (--external-links link keeps a link)")
            link = not copy_weights and name.endswith(WEIGHT_SUFFIXES) and st.st_dev == out_dev
            actions.append(FileAction(rel, src, st.st_size, "link" if link else "copy"))
    return actions


def require_free_space(folder: Path, needed: int) -> None:
    """Refuse, before writing anything, a copy that does not fit (exit 2)."""
    try:
        free = shutil.disk_usage(folder).free
    except OSError as err:
        raise os_error(err, str(folder)) from None
    if needed + FREE_MARGIN > free:
        raise InputError(
            f"{human_bytes(free)} free, but copying the draft needs {human_bytes(needed)} "
            f"plus a margin of {round_bytes(FREE_MARGIN)} left free; free space, or put OUT on the "
            "draft's filesystem (weights are then hard-linked, not copied)", path=folder
        )


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


@contextlib.contextmanager
def _term_as_interrupt() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt, so that cleanup runs as it does for Ctrl-C."""
    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes, mode: int) -> None:
    """Replace ``path`` (a file or a link) by a regular file holding ``data``: temp, fsync, rename."""
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fchmod(fh.fileno(), mode)
            os.fsync(fh.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        raise
    _fsync_dir(path.parent)


def write_in_place(folder: Path, new: bytes, old: bytes, *, backup: bool, force: bool) -> Path | None:
    """Rewrite ``folder/config.json``; keep the old bytes as ``config.json.orig`` when ``backup``.

    Returns the backup's path (``None`` without one). A link (cache snapshot) is replaced by a
    regular file; the blob it pointed to keeps the old bytes.
    """
    cfg = folder / "config.json"
    orig = folder / "config.json.orig"
    try:
        mode = stat.S_IMODE(os.stat(cfg).st_mode)
    except OSError as err:
        raise os_error(err, str(cfg)) from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise InputError("not writable by this user; config.json cannot be replaced there (fix the permissions)",
                         path=folder)
    if backup and (orig.exists() or orig.is_symlink()) and not force:
        raise UsageError(f"{orig} exists from an earlier run; move it away, pass --no-backup, or --force to overwrite it")
    with _term_as_interrupt():
        try:
            if backup:
                atomic_write(orig, old, mode)
            atomic_write(cfg, new, mode)
        except OSError as err:
            raise os_error(err, str(cfg)) from None
    return orig if backup else None
