"""The network side of Hub access: settings from the environment, retries, and the three requests.

1. ``fetch_listing``: the repo info at a revision (``GET /api/models/{repo}[/revision/{rev}]``
   with file sizes), which pins the revision to a commit and lists the files.
2. ``HubClient.download``: a small file (``config.json``, the shard index) through
   ``hf_hub_download``, so that it lands in the Hugging Face cache.
3. ``HubClient.fetch_range``: ``bytes=a-b`` of a file through huggingface_hub's HTTP session
   (its auth headers, user agent, proxy settings and redirect rules), checked against
   ``Content-Range``: how a safetensors header is read without its tensor data.

Every function reads the environment when called rather than when imported, so that
``HF_ENDPOINT``, ``HF_HUB_CACHE`` and friends set by a test, or by the user, always apply.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from dflash_ckpt import __version__
from dflash_ckpt.sources.hub.cache import RemoteFile, RepoListing, is_commit
from dflash_ckpt.sources.hub.errors import HubContext, HubError, ProtocolError, describe, is_retryable
from dflash_ckpt.sources.hub.cache import hf_hub_cache, hf_offline

T = TypeVar("T")
DEFAULT_ENDPOINT = "https://huggingface.co"
CONTENT_RANGE_RE = re.compile(r"^bytes (\d+)-(\d+)/(\d+|\*)$")
#: The longest ``Retry-After`` we honour; a server asking for more gets our error instead.
MAX_RETRY_AFTER = 60.0


def _env_number(name: str, default: float, *, minimum: float) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise HubError(f"{name}={raw!r} is not a number; unset it or give one such as {default:g}") from None
    if value < minimum:
        raise HubError(f"{name}={raw!r} must be at least {minimum:g}")
    return value


@dataclass(frozen=True)
class HubSettings:
    """Where the Hub is, where the cache is, and how patiently to ask."""

    endpoint: str
    cache_dir: Path
    offline: bool
    #: Seconds for an API call (huggingface_hub's ``HF_HUB_ETAG_TIMEOUT``, default 10).
    api_timeout: float
    #: Seconds for a data request (huggingface_hub's ``HF_HUB_DOWNLOAD_TIMEOUT``, default 10).
    download_timeout: float
    #: Extra attempts after a timeout, a dropped connection or a 408/429/5xx answer.
    retries: int
    #: Pause before the first retry; it doubles on each further one, up to ``max_backoff``.
    backoff: float
    max_backoff: float = 8.0

    @classmethod
    def from_env(cls) -> HubSettings:
        return cls(
            endpoint=(os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/"),
            cache_dir=hf_hub_cache(),
            offline=hf_offline(),
            api_timeout=_env_number("HF_HUB_ETAG_TIMEOUT", 10, minimum=0.001),
            download_timeout=_env_number("HF_HUB_DOWNLOAD_TIMEOUT", 10, minimum=0.001),
            retries=int(_env_number("DFLASH_CKPT_HUB_RETRIES", 3, minimum=0)),
            backoff=_env_number("DFLASH_CKPT_HUB_BACKOFF", 1.0, minimum=0),
        )


def resolve_token(token: str | None) -> tuple[str | bool, str | None]:
    """The token to send and where it came from: ``--token``, then ``HF_TOKEN``, then the saved login.

    ``False`` (send none) when there is none, so that huggingface_hub does not look again.
    """
    if token:
        return token, "--token"
    if os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN"):
        var = "HF_TOKEN" if os.environ.get("HF_TOKEN") else "HUGGING_FACE_HUB_TOKEN"
        return os.environ[var].strip(), var
    from huggingface_hub import get_token  # noqa: PLC0415

    saved = get_token()
    return (saved, "the saved login (hf auth login)") if saved else (False, None)


def with_retries(fn: Callable[[], T], settings: HubSettings, ctx: HubContext, what: str) -> T:
    """``fn()``, asked again after retryable failures with exponential backoff; ``HubError`` at the end."""
    attempts = settings.retries + 1
    pause = settings.backoff
    for attempt in range(1, attempts + 1):
        try:
            return fn()
        except HubError:
            raise
        except Exception as exc:  # noqa: BLE001 - every failure becomes one line below
            if attempt == attempts or not is_retryable(exc):
                raise describe(exc, ctx, what, attempts=attempt) from None
            wait = _retry_after(exc)
            wait = min(pause, settings.max_backoff) if wait is None else min(wait, MAX_RETRY_AFTER)
            print(
                f"dflash-ckpt: {ctx.ref.label}: {what} failed ({_short(exc)}); "
                f"retry {attempt}/{settings.retries} in {wait:g}s",
                file=sys.stderr,
            )
            time.sleep(wait)
            pause *= 2
    raise AssertionError("unreachable")


def _retry_after(exc: BaseException) -> float | None:
    """Seconds a 429/503 answer asks us to wait (``Retry-After: N``), if it says."""
    response = getattr(exc, "response", None)
    value = getattr(response, "headers", {}).get("Retry-After", "") if response is not None else ""
    return float(value) if isinstance(value, str) and value.strip().isdigit() else None


def _short(exc: BaseException) -> str:
    status = getattr(getattr(exc, "response", None), "status_code", None)
    return f"HTTP {status}" if isinstance(status, int) else type(exc).__name__


def fetch_listing(ctx: HubContext, settings: HubSettings, token: str | bool) -> RepoListing:
    """The commit ``ctx.ref`` points to now and the repo's files there (one API request, retried)."""
    from huggingface_hub import HfApi  # noqa: PLC0415

    api = HfApi(endpoint=settings.endpoint, library_name="dflash-ckpt", library_version=__version__)

    def call() -> Any:
        try:
            return api.model_info(
                ctx.ref.repo_id, revision=ctx.ref.revision, files_metadata=True,
                token=token, timeout=settings.api_timeout,
            )
        except (KeyError, TypeError, AttributeError) as err:
            raise ProtocolError(f"repo info missing a field ({err})") from None

    info = with_retries(call, settings, ctx, "repo info")
    sha = getattr(info, "sha", None)
    if not isinstance(sha, str) or not is_commit(sha):
        raise describe(ProtocolError(f"repo info without a commit id (sha={sha!r})"), ctx, "repo info")
    files: dict[str, RemoteFile] = {}
    for sib in info.siblings or []:
        size = sib.lfs.size if sib.lfs is not None else sib.size
        if not isinstance(size, int) or size < 0:
            raise describe(ProtocolError(f"repo info without a size for {sib.rfilename}"), ctx, "repo info")
        files[sib.rfilename] = RemoteFile(sib.rfilename, size, sib.lfs.sha256 if sib.lfs is not None else None)
    return RepoListing(ctx.ref.repo_id, sha, files)


class _NoBar:
    """A progress bar that shows nothing: inspect fetches a few kilobytes, not worth a bar."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __enter__(self) -> _NoBar:
        return self

    def __exit__(self, *exc: Any) -> None:
        pass

    def __getattr__(self, name: str) -> Callable[..., None]:
        return lambda *a, **k: None


class HubClient:
    """Requests for the files of one repo at one commit; counts the bytes it receives."""

    def __init__(self, ctx: HubContext, settings: HubSettings, token: str | bool, commit: str) -> None:
        self.ctx = ctx
        self.settings = settings
        self.token = token
        self.commit = commit
        self.bytes_fetched = 0
        self._lock = threading.Lock()

    def download(self, name: str) -> Path:
        """``name`` in the Hugging Face cache (downloaded unless it is there); its local path.

        A HEAD request under our retry policy comes first: ``hf_hub_download`` retries a failing
        HEAD on its own schedule (up to 23 s of pauses, warnings on stderr), ours is the one the
        user configured and it ends in one line.
        """
        from huggingface_hub import hf_hub_download, hf_hub_url  # noqa: PLC0415

        cached = self.settings.cache_dir / ("models--" + self.ctx.ref.repo_id.replace("/", "--"))
        present = (cached / "snapshots" / self.commit / name).is_file()
        if not present:
            url = hf_hub_url(self.ctx.ref.repo_id, name, revision=self.commit, endpoint=self.settings.endpoint)
            with_retries(lambda: self._head(url), self.settings, self.ctx, name)
        try:
            path = Path(hf_hub_download(
                self.ctx.ref.repo_id, name, revision=self.commit, cache_dir=self.settings.cache_dir,
                endpoint=self.settings.endpoint, token=self.token, etag_timeout=self.settings.api_timeout,
                library_name="dflash-ckpt", library_version=__version__, tqdm_class=_NoBar,  # type: ignore[arg-type]
            ))
        except Exception as exc:  # noqa: BLE001 - huggingface_hub has retried already; one line now
            raise describe(exc, self.ctx, name) from None
        if not present:
            with self._lock:
                self.bytes_fetched += path.stat().st_size
        return path

    def _head(self, url: str) -> None:
        from huggingface_hub import get_hf_file_metadata  # noqa: PLC0415

        meta = get_hf_file_metadata(
            url, token=self.token, timeout=self.settings.api_timeout, endpoint=self.settings.endpoint,
            library_name="dflash-ckpt", library_version=__version__,
        )
        if meta.commit_hash is None:
            raise ProtocolError("a response without the X-Repo-Commit header, not as a Hub endpoint does")
        if meta.commit_hash != self.commit:
            raise ProtocolError(f"commit {meta.commit_hash} where {self.commit} was asked for")

    def fetch_range(self, name: str, start: int, end: int, size: int) -> bytes:
        """Bytes ``start..end`` (inclusive) of ``name``, whose listed size is ``size``."""
        what = f"bytes {start}-{end} of {name}"
        data = with_retries(lambda: self._get_range(name, start, end, size), self.settings, self.ctx, what)
        with self._lock:
            self.bytes_fetched += len(data)
        return data

    def _get_range(self, name: str, start: int, end: int, size: int) -> bytes:
        from huggingface_hub import hf_hub_url  # noqa: PLC0415
        from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status  # noqa: PLC0415

        url = hf_hub_url(self.ctx.ref.repo_id, name, revision=self.commit, endpoint=self.settings.endpoint)
        headers = build_hf_headers(token=self.token, library_name="dflash-ckpt", library_version=__version__)
        headers["Range"] = f"bytes={start}-{end}"
        headers["Accept-Encoding"] = "identity"  # sizes and offsets are of the file, not of a compressed body
        want = end - start + 1
        with get_session().stream(
            "GET", url, headers=headers, timeout=self.settings.download_timeout, follow_redirects=True,
        ) as resp:
            hf_raise_for_status(resp)
            if resp.status_code == 206:
                self._check_content_range(resp.headers.get("Content-Range"), start, end, size)
            elif resp.status_code == 200 and start == 0:
                # The server ignored the range: take the first bytes of the body and hang up.
                length = resp.headers.get("Content-Length")
                if length is not None and length.isdigit() and int(length) != size:
                    raise ProtocolError(f"a {length}-byte file where the repo lists {size} bytes")
            else:
                raise ProtocolError(f"HTTP {resp.status_code} to a range request (expected 206 Partial Content)")
            body = bytearray()
            for chunk in resp.iter_bytes():
                body += chunk
                if len(body) >= want:
                    break
            if resp.status_code == 206 and len(body) > want:
                raise ProtocolError(f"{len(body)} bytes for a {want}-byte range")
        if len(body) < want:
            raise ProtocolError(f"{len(body)} bytes for a {want}-byte range (connection cut short)")
        return bytes(body[:want])

    @staticmethod
    def _check_content_range(value: str | None, start: int, end: int, size: int) -> None:
        m = CONTENT_RANGE_RE.match((value or "").strip())
        if m is None:
            raise ProtocolError(f"Content-Range {value!r} (expected 'bytes {start}-{end}/{size}')")
        first, last, total = int(m.group(1)), int(m.group(2)), m.group(3)
        if total != "*" and int(total) != size:
            raise ProtocolError(f"Content-Range {value!r}: a {total}-byte file where the repo lists {size} bytes")
        if (first, last) != (start, end):
            raise ProtocolError(f"Content-Range {value!r} for a request of bytes {start}-{end}")


def snapshot(
    ctx: HubContext,
    settings: HubSettings,
    token: str | bool,
    commit: str,
    allow_patterns: list[str] | None,
    *,
    offline_reason: str | None = None,
) -> Path:
    """``snapshot_download`` of ``commit`` limited to ``allow_patterns``, with its progress bars.

    With ``offline_reason`` the cache alone must hold the files (``HF_HUB_OFFLINE``, or a Hub
    that cannot be reached).
    """
    from huggingface_hub import snapshot_download  # noqa: PLC0415
    from huggingface_hub.errors import LocalEntryNotFoundError  # noqa: PLC0415

    what = "the files matching " + ", ".join(allow_patterns) if allow_patterns else "the repo files"
    try:
        return Path(snapshot_download(
            ctx.ref.repo_id, revision=commit, cache_dir=settings.cache_dir, endpoint=settings.endpoint,
            token=token, allow_patterns=allow_patterns, etag_timeout=settings.api_timeout,
            local_files_only=offline_reason is not None, library_name="dflash-ckpt", library_version=__version__,
        ))
    except LocalEntryNotFoundError as exc:
        if offline_reason is None:
            raise describe(exc, ctx, what) from None
        raise HubError(
            f"{ctx.ref.label}: {what} are not all in the local Hugging Face cache at {settings.cache_dir} "
            f"and {offline_reason}; run once with the Hub reachable, or give a local folder"
        ) from None
    except Exception as exc:  # noqa: BLE001 - huggingface_hub has retried already; one line now
        raise describe(exc, ctx, what) from None


__all__ = ["HubClient", "HubError", "HubSettings", "fetch_listing", "resolve_token", "snapshot", "with_retries"]
