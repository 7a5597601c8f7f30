"""Bounded HTTP for the Hub: one deadline per command, bodies capped by and checked against the listing.

huggingface_hub's downloads trust the server: a ``Content-Length`` far beyond the file's listed
size, a gzip bomb or an answer that never ends are written to disk until it is full, and a server
dripping one byte every two seconds never trips a per-read timeout. Here every file is fetched
with one streamed GET:

- the body is read raw (``Accept-Encoding: identity``, and a ``Content-Encoding`` other than
  identity is refused: sizes are those of the file, and nothing is inflated);
- a ``Content-Length`` that differs from the repo listing's size is refused before the body, and
  the body is cut off at the listed size (and at ``limits.MAX_DOWNLOAD_BYTES`` whatever the
  listing says);
- every request, headers included, runs under the command's Hub budget (``budget.py``,
  ``DFLASH_CKPT_HUB_DEADLINE``), checked between chunks and by the thread that waits for it;
- the body's sha256 (LFS files) or git blob id (others) must be the listing's before the file
  is renamed into ``blobs/``: a server sending other bytes of the listed size leaves nothing.

What is downloaded lands in the Hugging Face cache in huggingface_hub's layout (``blobs/`` named
by sha256 for LFS files or git blob id for others, ``snapshots/<commit>/<name>`` a relative link
to the blob), through a temporary file and a rename, mode 0644 less the umask as huggingface_hub
writes them. Temporary files are ``blobs/.dflash-ckpt-<pid>-*.incomplete``: removed when a
download fails, is abandoned, or the process is interrupted (SIGINT, SIGTERM, exit), and swept
at the next download when their process is gone (or they are a day old) after a SIGKILL. A body
cut by the network is resumed by the next attempt with a ``Range`` request (``Partial``).

huggingface_hub's own ``hf_hub_download`` is not used for whole files (2.4.0, measured side by
side by ``benchmarks/bench_hub_library.py``): it names the blob after the server's ``ETag``
unchecked, so an endpoint answering ``"../../../x"`` has it write outside the cache
(``tests/test_hub_library_canary.py``); it keeps bytes of the listed size that are not the listed
file (no digest check), inflates a compressed body, and has no overall deadline against a server
that drips; its ``http_get`` retries on a policy of its own (five attempts, its own ``Retry-After``
handling, warnings on stderr) where ours is the documented ``DFLASH_CKPT_HUB_*`` one. The
hostile-server tests (``tests/test_hub_lying_server.py``, ``tests/test_hub_hostile_server.py``)
pin what is done instead; this tool's downloads are a config, an index and a few draft shards.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from dflash_ckpt import limits
from dflash_ckpt._version import __version__
from dflash_ckpt.sources.hub.budget import Budget
from dflash_ckpt.sources.hub.errors import ContentMismatch, DeadlineExceeded, ProtocolError, is_retryable
from dflash_ckpt.sources.hub.ids import inside, is_git_id, is_sha256

T = TypeVar("T")
CHUNK = 1 << 20
PREFIX = ".dflash-ckpt-"
SUFFIX = ".incomplete"

#: Temporary files being written, by the worker thread writing them: an abandoned worker's file is
#: removed by the thread that gave up on it (and any left at exit or on a signal by ``_remove_all``).
_IN_PROGRESS: dict[int, set[str]] = {}
_IN_PROGRESS_LOCK = threading.Lock()
#: Set on SIGINT/SIGTERM: workers stop before their next write instead of creating new files.
_STOPPING = threading.Event()
_SWEPT: set[str] = set()


def _track(path: str) -> None:
    with _IN_PROGRESS_LOCK:
        if not _IN_PROGRESS:
            import atexit  # noqa: PLC0415

            atexit.register(_remove_all)
        _IN_PROGRESS.setdefault(threading.get_ident(), set()).add(path)


def _untrack(path: str) -> None:
    with _IN_PROGRESS_LOCK:
        for paths in _IN_PROGRESS.values():
            paths.discard(path)


def _remove(thread_id: int | None) -> None:
    with _IN_PROGRESS_LOCK:
        paths = _IN_PROGRESS.pop(thread_id, set()) if thread_id is not None else set()
    for path in paths:
        with contextlib.suppress(OSError):
            os.unlink(path)


def _remove_all() -> None:
    for tid in list(_IN_PROGRESS):
        _remove(tid)


def _on_signal(signum: int, frame: Any) -> None:  # noqa: ARG001
    """SIGTERM during a download: remove what is half-written, then die of the signal as before."""
    _STOPPING.set()
    _remove_all()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


@contextlib.contextmanager
def clean_on_signals() -> Iterator[None]:
    """While downloading: SIGTERM (whose default handler runs no cleanup) removes our temporary
    files first. SIGINT raises ``KeyboardInterrupt``, which ``within`` and ``atexit`` clean after.
    Only a default handler is replaced (a program's own stays), and only in the main thread."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return
    signal.signal(signal.SIGTERM, _on_signal)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def sweep(blobs: Path) -> None:
    """Remove the temporary files of our downloads that a killed process left in ``blobs`` (once
    per folder and process): those whose process is gone, and any a day old."""
    key = str(blobs)
    if key in _SWEPT:
        return
    _SWEPT.add(key)
    try:
        entries = list(os.scandir(blobs))
    except OSError:
        return
    now = time.time()
    for entry in entries:
        if not (entry.name.startswith(PREFIX) and entry.name.endswith(SUFFIX)):
            continue
        pid_text = entry.name[len(PREFIX):].split("-", 1)[0]
        pid = int(pid_text) if pid_text.isdigit() and len(pid_text) < 10 else None
        try:
            old = now - entry.stat(follow_symlinks=False).st_mtime > limits.STALE_DOWNLOAD_SECONDS
        except OSError:
            continue
        if old or (pid is not None and pid != os.getpid() and not _alive(pid)):
            with contextlib.suppress(OSError):
                os.unlink(entry.path)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: alive
        return True
    return True


def within(fn: Callable[[Budget], T], budget: Budget) -> T:
    """``fn(budget)`` in a worker thread, abandoned when the budget runs out: ``DeadlineExceeded``.

    Streaming loops check the budget between chunks (so that an abandoned download stops
    writing), and the wait here bounds what they cannot check: a server that drips the response
    head. The abandoned thread is a daemon blocked on its socket; it ends with the process.
    """
    budget.require_left()
    box: dict[str, Any] = {}
    done = threading.Event()

    def work() -> None:
        try:
            box["value"] = fn(budget)
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
            box["error"] = exc
        finally:
            done.set()

    worker = threading.Thread(target=work, name="dflash-ckpt-hub", daemon=True)
    worker.start()
    try:
        while not done.wait(min(1.0, max(0.0, budget.left()) + 0.05)):
            if budget.left() <= 0:
                _remove(worker.ident)  # what it was writing; it stops at its next chunk
                raise DeadlineExceeded(budget.allowed())
    except BaseException:  # Ctrl-C while waiting: the half-written file goes too
        _remove(worker.ident)
        raise
    if "error" in box:
        raise box["error"]
    return box["value"]


def refuse_encoding(resp: Any) -> None:
    """Bodies are taken as the bytes of the file: a compressed answer is refused, never inflated."""
    enc = (resp.headers.get("Content-Encoding") or "identity").strip().lower()
    if enc not in ("", "identity"):
        raise ProtocolError(f"a compressed answer (Content-Encoding: {enc[:40]}) where the file was asked for as is")


def hf_headers(token: str | bool, **extra: str) -> dict[str, str]:
    from huggingface_hub.utils import build_hf_headers  # noqa: PLC0415

    headers = build_hf_headers(token=token, library_name="dflash-ckpt", library_version=__version__)
    headers["Accept-Encoding"] = "identity"
    headers.update(extra)
    return headers


class Partial:
    """What an interrupted attempt of one download leaves for the next: the temporary file, the
    bytes in it, and the digests of those bytes. ``fetch_file`` fills it when the network fails
    mid-body (a retryable failure) and the next attempt asks for the rest with a ``Range``
    request; the caller removes the file when no attempt is left (``discard``)."""

    def __init__(self) -> None:
        self.path: str | None = None
        self.written = 0
        self.hashers: tuple[Any, Any] | None = None

    def discard(self) -> None:
        if self.path is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.path)
            _untrack(self.path)
        self.path, self.written, self.hashers = None, 0, None


def fetch_file(
    url: str,
    dest_dir: Path,
    *,
    token: str | bool,
    size: int,
    commit: str,
    timeout: float,
    budget: Budget,
    sha256: str | None = None,
    blob_id: str | None = None,
    on_bytes: Callable[[int], None] | None = None,
    partial: Partial | None = None,
) -> tuple[Path, str]:
    """Stream ``url`` into a temporary file in ``dest_dir``; its path and its blob name.

    The body must be exactly ``size`` bytes (the listing's), and the first answer must carry
    ``X-Repo-Commit`` equal to ``commit``, as the Hub's resolve endpoint does. Its sha256 must be
    ``sha256`` when listed (an LFS file), else its git blob id ``blob_id`` when listed; the blob
    name returned is whichever of the two the listing gives (the computed git id when neither).
    With ``partial`` holding an earlier attempt's bytes, only the rest is asked for (``Range``);
    a server that answers with the whole file instead is read from the start.
    """
    from huggingface_hub.utils import get_session, hf_raise_for_status  # noqa: PLC0415

    cap = min(size, limits.MAX_DOWNLOAD_BYTES)
    if size > limits.MAX_DOWNLOAD_BYTES:
        raise ProtocolError(f"a listed size of {size:,} bytes, more than the {limits.MAX_DOWNLOAD_BYTES:,} this tool downloads")
    dest_dir.mkdir(parents=True, exist_ok=True)
    sweep(dest_dir)
    partial = partial if partial is not None else Partial()
    start = partial.written if partial.path is not None and 0 < partial.written < size else 0
    headers = hf_headers(token, **({"Range": f"bytes={start}-"} if start else {}))
    with get_session().stream("GET", url, headers=headers, timeout=timeout, follow_redirects=True) as resp:
        hf_raise_for_status(resp)
        first = resp.history[0] if resp.history else resp
        got_commit = first.headers.get("X-Repo-Commit")
        if got_commit is None:
            raise ProtocolError("a response without the X-Repo-Commit header, not as a Hub endpoint does")
        if got_commit != commit:
            raise ProtocolError(f"commit {got_commit[:60]} where {commit} was asked for")
        refuse_encoding(resp)
        if start and resp.status_code != 206:
            start = 0  # the server offers no resume: the whole body, from the start
        elif start and (resp.headers.get("Content-Range") or "").strip() != f"bytes {start}-{size - 1}/{size}":
            raise ProtocolError(f"Content-Range {resp.headers.get('Content-Range', '')[:80]!r} for bytes {start}-{size - 1}")
        length = resp.headers.get("Content-Length")
        if length is not None and length.strip().isdigit() and (len(length.strip()) > 20 or int(length) != size - start):
            claim = f"{int(length):,}-byte" if len(length.strip()) <= 20 else "absurdly long"
            raise ProtocolError(f"a {claim} body where the repo lists {size - start:,} bytes (nothing kept)")
        if _STOPPING.is_set():
            raise KeyboardInterrupt
        if start:
            tmp = str(partial.path)
            git, lfs = partial.hashers  # type: ignore[misc]
            fh = open(tmp, "r+b")  # noqa: SIM115 - closed below
            fh.seek(start)
            fh.truncate()
            _untrack(tmp)
        else:
            partial.discard()
            git = hashlib.sha1(b"blob %d\0" % size)  # noqa: S324 - the git blob id, not security
            lfs = hashlib.sha256() if sha256 is not None else None
            fd, tmp = tempfile.mkstemp(dir=dest_dir, prefix=f"{PREFIX}{os.getpid()}-", suffix=SUFFIX)
            fh = os.fdopen(fd, "wb")
        _track(tmp)
        written = start
        try:
            with fh:
                for chunk in resp.iter_raw():  # as the socket gives them: a cut keeps what arrived
                    if written + len(chunk) > cap:
                        raise ProtocolError(f"more than the {cap:,} bytes the repo lists (stopped there, nothing kept)")
                    if _STOPPING.is_set():
                        raise KeyboardInterrupt
                    fh.write(chunk)
                    (lfs or git).update(chunk)
                    written += len(chunk)
                    if on_bytes is not None:
                        on_bytes(len(chunk))
                    budget.spend(len(chunk))
            if written < size:
                raise ProtocolError(f"{written:,} of the {size:,} bytes the repo lists (connection cut short)")
            name = _verified(lfs, git, sha256, blob_id)
            os.chmod(tmp, 0o666 & ~_umask())
        except Exception as exc:
            if is_retryable(exc) and 0 < written < size:  # the next attempt asks for the rest
                partial.path, partial.written, partial.hashers = tmp, written, (git, lfs)
            else:
                partial.path = tmp
                partial.discard()
            raise
        except BaseException:
            partial.path = tmp
            partial.discard()
            raise
    partial.path = None
    return Path(tmp), name


def _verified(lfs: Any, git: Any, sha256: str | None, blob_id: str | None) -> str:
    """The blob name of a finished body, after comparing its digest with the listing's."""
    if lfs is not None:
        got = lfs.hexdigest()
        if got != sha256:
            raise ContentMismatch(f"sha256 {got[:12]}… where the listing gives {str(sha256)[:12]}…")
        return got
    got = git.hexdigest()
    if blob_id is not None and got != blob_id:
        raise ContentMismatch(f"git blob id {got[:12]}… where the listing gives {blob_id[:12]}…")
    return got


_UMASK: list[int] = []


def _umask() -> int:
    """The process umask (read once: reading it means setting it, which is not thread-safe)."""
    if not _UMASK:
        mask = os.umask(0o022)
        os.umask(mask)
        _UMASK.append(mask)
    return _UMASK[0]


def place_in_cache(repo_folder: Path, commit: str, name: str, tmp: Path, blob_name: str) -> Path:
    """Move a finished download to ``blobs/<blob_name>`` and link ``snapshots/<commit>/<name>`` to it.

    ``blob_name`` must be a sha256 or git id and ``commit`` a commit id, and both the blob and the
    link must resolve inside ``repo_folder`` (no folder of it replaced by a link to elsewhere):
    otherwise ``ProtocolError`` and the temporary file is removed. With huggingface_hub's
    ``HF_HUB_DISABLE_SYMLINKS`` the new blob is moved to the snapshot instead, as the library does.
    """
    from huggingface_hub import constants  # noqa: PLC0415 - loaded already: the download used its session

    blob = repo_folder / "blobs" / blob_name
    link = repo_folder / "snapshots" / commit / name
    try:
        if not (is_sha256(blob_name) or is_git_id(blob_name)) or not is_git_id(commit):
            raise ProtocolError(f"a blob name {blob_name[:80]!r} or commit {commit[:80]!r} that is not a hex id")
        if not inside(blob, repo_folder) or not inside(link, repo_folder):
            raise ProtocolError(f"a cache folder that leads outside {repo_folder} (a link in blobs/ or snapshots/)")
        blob.parent.mkdir(parents=True, exist_ok=True)
        os.replace(tmp, blob)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    finally:
        _untrack(str(tmp))
    link.parent.mkdir(parents=True, exist_ok=True)
    if not inside(link, repo_folder):  # a link planted while the folders were made
        raise ProtocolError(f"a cache folder that leads outside {repo_folder}")
    if constants.HF_HUB_DISABLE_SYMLINKS:
        os.replace(blob, link)
        return link
    rel = os.path.relpath(blob, link.parent)
    tmp_link = link.parent / f".{link.name}.dflash-ckpt-link"
    try:
        if tmp_link.is_symlink() or tmp_link.exists():
            tmp_link.unlink()
        os.symlink(rel, tmp_link)
        os.replace(tmp_link, link)
    except OSError:  # no symlinks here (some Windows set-ups): a copy, as huggingface_hub falls back to
        import shutil  # noqa: PLC0415

        if link.is_symlink():
            link.unlink()
        shutil.copyfile(blob, link)
    return link


#: Downloads at least this large get a bar; a smaller file is done before a bar would say anything.
BAR_MIN_BYTES = 16 * limits.MiB


def progress_bar(total: int, desc: str) -> Any:
    """A bar on stderr for a big download, when stderr is a terminal: huggingface_hub's own tqdm, so
    that it obeys what the library's bars obey (``HF_HUB_DISABLE_PROGRESS_BARS``, which ``-q`` and
    ``--json`` set, and ``disable_progress_bars()`` of a program calling this code)."""
    if not sys.stderr.isatty() or total < BAR_MIN_BYTES:
        return None
    from huggingface_hub.utils import tqdm  # noqa: PLC0415

    bar = tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc=desc, file=sys.stderr, leave=False,
               name="huggingface_hub.http_get")
    return None if bar.disable else bar
