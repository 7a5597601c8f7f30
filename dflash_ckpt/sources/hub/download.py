"""Bounded HTTP for the Hub: an overall deadline per request, bodies capped by the listed size.

huggingface_hub's downloads trust the server: a ``Content-Length`` far beyond the file's listed
size, a gzip bomb or an answer that never ends are written to disk until it is full, and a server
dripping one byte every two seconds never trips a per-read timeout. Here every file is fetched
with one streamed GET:

- the body is read raw (``Accept-Encoding: identity``, and a ``Content-Encoding`` other than
  identity is refused: sizes are those of the file, and nothing is inflated);
- a ``Content-Length`` that differs from the repo listing's size is refused before the body, and
  the body is cut off at the listed size (and at ``limits.MAX_DOWNLOAD_BYTES`` whatever the
  listing says);
- the request as a whole, headers included, has a deadline (``DFLASH_CKPT_HUB_DEADLINE``,
  plus one second per ``limits.HUB_MIN_RATE`` bytes of the listed size).

What is downloaded lands in the Hugging Face cache in huggingface_hub's layout (``blobs/`` named
by sha256 for LFS files or git blob id for others, ``snapshots/<commit>/<name>`` a relative link
to the blob), through a temporary file and a rename, so an aborted download leaves nothing.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from dflash_ckpt import __version__, limits
from dflash_ckpt.sources.hub.errors import ProtocolError

T = TypeVar("T")
CHUNK = 1 << 20

#: Temporary files being written, by the worker thread writing them: an abandoned worker's file is
#: removed by the thread that gave up on it (and any left at exit by ``_remove_all``).
_IN_PROGRESS: dict[int, set[str]] = {}
_IN_PROGRESS_LOCK = threading.Lock()


def _track(path: str) -> None:
    with _IN_PROGRESS_LOCK:
        if not _IN_PROGRESS:
            import atexit  # noqa: PLC0415

            atexit.register(_remove_all)
        _IN_PROGRESS.setdefault(threading.get_ident(), set()).add(path)


def _untrack(path: str) -> None:
    with _IN_PROGRESS_LOCK:
        _IN_PROGRESS.get(threading.get_ident(), set()).discard(path)


def _remove(thread_id: int | None) -> None:
    with _IN_PROGRESS_LOCK:
        paths = _IN_PROGRESS.pop(thread_id, set()) if thread_id is not None else set()
    for path in paths:
        with contextlib.suppress(OSError):
            os.unlink(path)


def _remove_all() -> None:
    for tid in list(_IN_PROGRESS):
        _remove(tid)


class DeadlineExceeded(ProtocolError):
    """A request that did not finish (headers and body) within its deadline."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"no complete answer within {seconds:.3g} s")
        self.seconds = seconds


class TooLarge(ProtocolError):
    """A body larger than the file it should be."""


def deadline_for(settings: Any, size: int = 0) -> float:
    """Seconds one request for a ``size``-byte body may take in all."""
    return settings.deadline + size / limits.HUB_MIN_RATE


def within(fn: Callable[[float], T], seconds: float) -> T:
    """``fn(deadline)`` in a worker thread, abandoned after ``seconds``: ``DeadlineExceeded``.

    ``deadline`` is the ``time.monotonic()`` by which ``fn`` must be done; streaming loops check it
    between chunks (so that an abandoned download stops writing), and the wait here bounds what
    they cannot check: a server that drips the response head. The abandoned thread is a daemon
    blocked on its socket; it ends with the process.
    """
    deadline = time.monotonic() + seconds
    box: dict[str, Any] = {}
    done = threading.Event()

    def work() -> None:
        try:
            box["value"] = fn(deadline)
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
            box["error"] = exc
        finally:
            done.set()

    worker = threading.Thread(target=work, name="dflash-ckpt-hub", daemon=True)
    worker.start()
    if not done.wait(seconds + 0.25):
        _remove(worker.ident)  # what it was writing; it stops at its next chunk
        raise DeadlineExceeded(seconds)
    if "error" in box:
        raise box["error"]
    return box["value"]


def check_deadline(deadline: float, seconds: float) -> None:
    if time.monotonic() > deadline:
        raise DeadlineExceeded(seconds)


def refuse_encoding(resp: Any) -> None:
    """Bodies are taken as the bytes of the file: a compressed answer is refused, never inflated."""
    enc = (resp.headers.get("Content-Encoding") or "identity").strip().lower()
    if enc not in ("", "identity"):
        raise ProtocolError(f"a compressed answer (Content-Encoding: {enc}) where the file was asked for as is")


def hf_headers(token: str | bool, **extra: str) -> dict[str, str]:
    from huggingface_hub.utils import build_hf_headers  # noqa: PLC0415

    headers = build_hf_headers(token=token, library_name="dflash-ckpt", library_version=__version__)
    headers["Accept-Encoding"] = "identity"
    headers.update(extra)
    return headers


def get_json(url: str, *, token: str | bool, params: dict[str, Any], cap: int, timeout: float, deadline: float, seconds: float) -> Any:
    """A JSON API answer, streamed with a size cap and the deadline (repo info)."""
    import json  # noqa: PLC0415

    from huggingface_hub.utils import get_session, hf_raise_for_status  # noqa: PLC0415

    with get_session().stream("GET", url, headers=hf_headers(token), params=params, timeout=timeout, follow_redirects=True) as resp:
        hf_raise_for_status(resp)
        refuse_encoding(resp)
        length = resp.headers.get("Content-Length")
        if length is not None and length.isdigit() and (len(length) > 20 or int(length) > cap):
            raise TooLarge(f"a {int(length):,}-byte answer, more than the {cap:,} bytes allowed")
        body = bytearray()
        for chunk in resp.iter_raw(CHUNK):
            body += chunk
            if len(body) > cap:
                raise TooLarge(f"an answer of more than the {cap:,} bytes allowed")
            check_deadline(deadline, seconds)
    try:
        return json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise json.JSONDecodeError("not JSON", "", 0) from None


def fetch_file(
    url: str,
    dest_dir: Path,
    *,
    token: str | bool,
    size: int,
    commit: str,
    timeout: float,
    deadline: float,
    seconds: float,
    on_bytes: Callable[[int], None] | None = None,
) -> tuple[Path, str]:
    """Stream ``url`` into a temporary file in ``dest_dir``; its path and git blob id.

    The body must be exactly ``size`` bytes (the listing's), and the first answer must carry
    ``X-Repo-Commit`` equal to ``commit``, as the Hub's resolve endpoint does.
    """
    from huggingface_hub.utils import get_session, hf_raise_for_status  # noqa: PLC0415

    cap = min(size, limits.MAX_DOWNLOAD_BYTES)
    if size > limits.MAX_DOWNLOAD_BYTES:
        raise TooLarge(f"a listed size of {size:,} bytes, more than the {limits.MAX_DOWNLOAD_BYTES:,} this tool downloads")
    dest_dir.mkdir(parents=True, exist_ok=True)
    with get_session().stream("GET", url, headers=hf_headers(token), timeout=timeout, follow_redirects=True) as resp:
        hf_raise_for_status(resp)
        first = resp.history[0] if resp.history else resp
        got_commit = first.headers.get("X-Repo-Commit")
        if got_commit is None:
            raise ProtocolError("a response without the X-Repo-Commit header, not as a Hub endpoint does")
        if got_commit != commit:
            raise ProtocolError(f"commit {got_commit} where {commit} was asked for")
        refuse_encoding(resp)
        length = resp.headers.get("Content-Length")
        if length is not None and length.strip().isdigit() and (len(length.strip()) > 20 or int(length) != size):
            claim = f"{int(length):,}-byte" if len(length.strip()) <= 20 else "absurdly long"
            raise TooLarge(f"a {claim} body where the repo lists {size:,} bytes (nothing kept)")
        sha1 = hashlib.sha1(b"blob %d\0" % size)  # noqa: S324 - the git blob id, not security
        fd, tmp = tempfile.mkstemp(dir=dest_dir, prefix=".dflash-ckpt-", suffix=".incomplete")
        _track(tmp)
        try:
            got = 0
            with os.fdopen(fd, "wb") as fh:
                for chunk in resp.iter_raw(CHUNK):
                    got += len(chunk)
                    if got > cap:
                        raise TooLarge(f"more than the {cap:,} bytes the repo lists (stopped there, nothing kept)")
                    fh.write(chunk)
                    sha1.update(chunk)
                    if on_bytes is not None:
                        on_bytes(len(chunk))
                    check_deadline(deadline, seconds)
            if got < size:
                raise ProtocolError(f"{got:,} of the {size:,} bytes the repo lists (connection cut short)")
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            _untrack(tmp)
            raise
    return Path(tmp), sha1.hexdigest()


def place_in_cache(repo_folder: Path, commit: str, name: str, tmp: Path, blob_name: str) -> Path:
    """Move a finished download to ``blobs/<blob_name>`` and link ``snapshots/<commit>/<name>`` to it."""
    blob = repo_folder / "blobs" / blob_name
    blob.parent.mkdir(parents=True, exist_ok=True)
    os.replace(tmp, blob)
    with _IN_PROGRESS_LOCK:
        for paths in _IN_PROGRESS.values():
            paths.discard(str(tmp))
    link = repo_folder / "snapshots" / commit / name
    link.parent.mkdir(parents=True, exist_ok=True)
    rel = os.path.relpath(blob, link.parent)
    tmp_link = link.parent / f".{link.name}.dflash-ckpt-link"
    try:
        if tmp_link.is_symlink() or tmp_link.exists():
            tmp_link.unlink()
        os.symlink(rel, tmp_link)
        os.replace(tmp_link, link)
    except OSError:  # no symlinks here (some Windows set-ups): a copy, as huggingface_hub falls back to
        import shutil  # noqa: PLC0415

        shutil.copyfile(blob, link)
    return link


#: Downloads at least this large get a bar; a smaller file is done before a bar would say anything.
BAR_MIN_BYTES = 16 * limits.MiB


def bars_disabled() -> bool:
    """Whether download bars are off: ``HF_HUB_DISABLE_PROGRESS_BARS`` (which ``-q`` and ``--json``
    set, ``commands.options.silence_progress``), or huggingface_hub's own switch when it is loaded
    (``disable_progress_bars()`` of a program calling this code), so our bars obey what theirs obey."""
    if os.environ.get("HF_HUB_DISABLE_PROGRESS_BARS", "").strip().upper() in {"1", "ON", "YES", "TRUE"}:
        return True
    if "huggingface_hub" in sys.modules:
        from huggingface_hub.utils import are_progress_bars_disabled  # noqa: PLC0415

        return bool(are_progress_bars_disabled())
    return False


def progress_bar(total: int, desc: str) -> Any:
    """A tqdm bar on stderr for a big download, when stderr is a terminal and bars are not disabled."""
    if bars_disabled() or not sys.stderr.isatty() or total < BAR_MIN_BYTES:
        return None
    from tqdm.auto import tqdm  # noqa: PLC0415 - huggingface_hub depends on it

    return tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc=desc, file=sys.stderr, leave=False)
