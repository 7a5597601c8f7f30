"""The network side of Hub access: settings from the environment, retries, and the three requests.

1. ``fetch_listing``: the repo info at a revision (``GET /api/models/{repo}[/revision/{rev}]``
   with file sizes), which pins the revision to a commit and lists the files.
2. ``HubClient.download``: a whole file (``config.json``, the shard index, weights for
   ``normalize`` and ``smoke-run``) by one streamed GET capped at its listed size, into the
   Hugging Face cache in huggingface_hub's layout (``download.py``).
3. ``HubClient.fetch_range``: ``bytes=a-b`` of a file through huggingface_hub's HTTP session
   (its auth headers, user agent, proxy settings and redirect rules), checked against
   ``Content-Range``: how a safetensors header is read without its tensor data.

Each request runs under an overall deadline and the retry policy of ``with_retries``
(``DFLASH_CKPT_HUB_DEADLINE``, ``DFLASH_CKPT_HUB_RETRIES``, ``DFLASH_CKPT_HUB_BACKOFF``,
``DFLASH_CKPT_HUB_MAX_RETRY_AFTER``; README, Limits).

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

from dflash_ckpt import __version__, limits
from dflash_ckpt.errors import inert
from dflash_ckpt.sources.hub.cache import RemoteFile, RepoCache, RepoListing, is_commit
from dflash_ckpt.sources.hub.download import (
    TooLarge, check_deadline, deadline_for, fetch_file, get_json, hf_headers, place_in_cache, progress_bar,
    refuse_encoding, within,
)
from dflash_ckpt.sources.hub.errors import HubContext, HubError, ProtocolError, describe, first_line, http_status, is_retryable
from dflash_ckpt.sources.hub.cache import hf_hub_cache, hf_offline

T = TypeVar("T")
DEFAULT_ENDPOINT = "https://huggingface.co"
CONTENT_RANGE_RE = re.compile(r"^bytes (\d{1,20})-(\d{1,20})/(\d{1,20}|\*)$")
#: The longest ``Retry-After`` honoured by default (``DFLASH_CKPT_HUB_MAX_RETRY_AFTER``); a server
#: asking for more gets our error at once instead of a wait.
MAX_RETRY_AFTER = limits.MAX_RETRY_AFTER


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
    if not value < 1e9:  # inf, nan, or a pause of decades
        raise HubError(f"{name}={raw!r} is too large; give one such as {default:g}")
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
    #: Seconds one request may take from start to its last byte (plus size / HUB_MIN_RATE for a file).
    deadline: float = limits.HUB_DEADLINE
    #: The longest ``Retry-After`` waited for.
    max_retry_after: float = MAX_RETRY_AFTER

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
            deadline=_env_number("DFLASH_CKPT_HUB_DEADLINE", limits.HUB_DEADLINE, minimum=0.1),
            max_retry_after=_env_number("DFLASH_CKPT_HUB_MAX_RETRY_AFTER", MAX_RETRY_AFTER, minimum=0),
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


def with_retries(
    fn: Callable[[float], T], settings: HubSettings, ctx: HubContext, what: str, *, size: int = 0,
) -> T:
    """``fn(deadline)``, asked again after retryable failures with exponential backoff; ``HubError`` at the end.

    Each attempt runs under its overall deadline (``download.within``); a ``Retry-After`` longer
    than ``settings.max_retry_after`` ends the attempts at once, with a line saying so.
    """
    attempts = settings.retries + 1
    pause = settings.backoff
    seconds = deadline_for(settings, size)
    for attempt in range(1, attempts + 1):
        try:
            return within(fn, seconds)
        except HubError:
            raise
        except Exception as exc:  # noqa: BLE001 - every failure becomes one line below
            if _cache_write_error(exc):
                raise HubError(
                    f"{ctx.ref.label}: {what} cannot be written into the Hugging Face cache at {settings.cache_dir} "
                    f"({getattr(exc, 'strerror', None) or exc}); free space there, or point HF_HUB_CACHE elsewhere"
                ) from None
            if attempt == attempts or not is_retryable(exc):
                raise describe(exc, ctx, what, attempts=attempt) from None
            asked = _retry_after(exc)
            if asked is not None and asked > settings.max_retry_after:
                raise HubError(
                    f"{ctx.ref.label}: the Hub at {ctx.endpoint} answered HTTP {http_status(exc)} to {what} and asks "
                    f"to retry after {asked:g} s, longer than the {settings.max_retry_after:g} s this tool waits "
                    "(DFLASH_CKPT_HUB_MAX_RETRY_AFTER); try again later",
                    unreachable=True,
                ) from None
            wait = min(pause, settings.max_backoff) if asked is None else asked
            print(  # names from the listing and the server's words, made inert like every error line
                inert(f"dflash-ckpt: {ctx.ref.label}: {what} failed ({_short(exc)}); "
                      f"retry {attempt}/{settings.retries} in {wait:g}s"),
                file=sys.stderr,
            )
            time.sleep(wait)
            pause *= 2
    raise AssertionError("unreachable")


def _cache_write_error(exc: BaseException) -> bool:
    """An OS error of our own file writes: huggingface_hub's HTTP errors are OSErrors too (without
    an errno), and the network's are httpx's, which are not."""
    return isinstance(exc, OSError) and exc.errno is not None and not type(exc).__module__.startswith("huggingface_hub")


def _retry_after(exc: BaseException) -> float | None:
    """Seconds a 429/503 answer asks us to wait (``Retry-After``: seconds or an HTTP date), if it says."""
    response = getattr(exc, "response", None)
    value = getattr(response, "headers", {}).get("Retry-After", "") if response is not None else ""
    if not isinstance(value, str) or not value.strip():
        return None
    value = value.strip()
    if value.isdigit():
        return float(value[:12])  # a 4300-digit number is still just "too long"
    from email.utils import parsedate_to_datetime  # noqa: PLC0415

    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when is None:
        return None
    import datetime as _dt  # noqa: PLC0415

    now = _dt.datetime.now(when.tzinfo or _dt.timezone.utc)
    return max(0.0, (when - now).total_seconds())


def _short(exc: BaseException) -> str:
    status = getattr(getattr(exc, "response", None), "status_code", None)
    return f"HTTP {status}" if isinstance(status, int) else type(exc).__name__


def fetch_listing(ctx: HubContext, settings: HubSettings, token: str | bool) -> RepoListing:
    """The commit ``ctx.ref`` points to now and the repo's files there (one API request, retried).

    The request huggingface_hub's ``model_info(files_metadata=True)`` sends, read as a capped
    stream under the deadline (``limits.MAX_LISTING_BYTES``).
    """
    from urllib.parse import quote  # noqa: PLC0415

    from huggingface_hub.hf_api import ModelInfo  # noqa: PLC0415
    from huggingface_hub.utils import validate_repo_id  # noqa: PLC0415

    try:
        validate_repo_id(ctx.ref.repo_id)
    except Exception as exc:  # noqa: BLE001 - HFValidationError: one line
        raise describe(exc, ctx, "repo info") from None
    url = f"{settings.endpoint}/api/models/{ctx.ref.repo_id}"
    if ctx.ref.revision is not None:
        url += f"/revision/{quote(ctx.ref.revision, safe='')}"

    def call(deadline: float) -> Any:
        data = get_json(
            url, token=token, params={"blobs": True}, cap=limits.MAX_LISTING_BYTES,
            timeout=settings.api_timeout, deadline=deadline, seconds=settings.deadline,
        )
        if not isinstance(data, dict):
            raise ProtocolError("repo info that is not a JSON object")
        try:
            return ModelInfo(**data)
        except (KeyError, TypeError, AttributeError, ValueError) as err:
            raise ProtocolError(f"repo info missing a field ({first_line(err)})") from None

    info = with_retries(call, settings, ctx, "repo info")
    sha = getattr(info, "sha", None)
    if not isinstance(sha, str) or not is_commit(sha):
        raise describe(ProtocolError(f"repo info without a commit id (sha={str(sha)[:60]!r})"), ctx, "repo info")
    files: dict[str, RemoteFile] = {}
    for sib in info.siblings or []:
        size = sib.lfs.size if sib.lfs is not None else sib.size
        if not isinstance(size, int) or isinstance(size, bool) or not 0 <= size <= limits.MAX_USIZE:
            raise describe(ProtocolError(f"repo info without a valid size for {str(sib.rfilename)[:200]}"), ctx, "repo info")
        if not isinstance(sib.rfilename, str) or not _safe_name(sib.rfilename) or sib.rfilename.startswith("/"):
            shown = repr(sib.rfilename)[:80]
            raise describe(ProtocolError(f"repo info listing the file name {shown}, which no repo can hold"), ctx, "repo info")
        sha256 = sib.lfs.sha256 if sib.lfs is not None else None
        blob_id = getattr(sib, "blob_id", None)
        files[sib.rfilename] = RemoteFile(
            sib.rfilename, size,
            sha256 if isinstance(sha256, str) and re.fullmatch(r"[0-9a-f]{64}", sha256) else None,
            blob_id if isinstance(blob_id, str) and re.fullmatch(r"[0-9a-f]{40}", blob_id) else None,
        )
    return RepoListing(ctx.ref.repo_id, sha, files)


class HubClient:
    """Requests for the files of one repo at one commit; counts the bytes it receives."""

    def __init__(self, ctx: HubContext, settings: HubSettings, token: str | bool, commit: str) -> None:
        self.ctx = ctx
        self.settings = settings
        self.token = token
        self.commit = commit
        self.bytes_fetched = 0
        self._lock = threading.Lock()

    def download(self, name: str, size: int, sha256: str | None = None) -> Path:
        """``name`` (``size`` bytes, as listed) in the Hugging Face cache, downloaded unless there.

        One streamed GET under our retry policy and deadline, capped at the listed size
        (``download.fetch_file``); the file lands in huggingface_hub's cache layout.
        """
        from huggingface_hub import hf_hub_url  # noqa: PLC0415

        repo_folder = self.settings.cache_dir / ("models--" + self.ctx.ref.repo_id.replace("/", "--"))
        path = repo_folder / "snapshots" / self.commit / name
        if path.is_file():
            return path
        url = hf_hub_url(self.ctx.ref.repo_id, name, revision=self.commit, endpoint=self.settings.endpoint)
        bar = progress_bar(size, name)
        try:
            tmp, git_id = with_retries(
                lambda deadline: fetch_file(
                    url, repo_folder / "blobs", token=self.token, size=size, commit=self.commit,
                    timeout=self.settings.download_timeout, deadline=deadline,
                    seconds=deadline_for(self.settings, size), on_bytes=bar.update if bar is not None else None,
                ),
                self.settings, self.ctx, name, size=size,
            )
        except OSError as err:
            raise HubError(
                f"{self.ctx.ref.label}: {name} cannot be written to the Hugging Face cache at "
                f"{self.settings.cache_dir} ({err.strerror or err}); free space there or set HF_HUB_CACHE"
            ) from None
        finally:
            if bar is not None:
                bar.close()
        try:
            path = place_in_cache(repo_folder, self.commit, name, tmp, sha256 or git_id)
        except OSError as err:
            raise HubError(
                f"{self.ctx.ref.label}: {name} cannot be stored in the Hugging Face cache at "
                f"{self.settings.cache_dir} ({err.strerror or err})"
            ) from None
        with self._lock:
            self.bytes_fetched += size
        return path

    def fetch_range(self, name: str, start: int, end: int, size: int) -> bytes:
        """Bytes ``start..end`` (inclusive) of ``name``, whose listed size is ``size``."""
        what = f"bytes {start}-{end} of {name}"
        data = with_retries(lambda deadline: self._get_range(name, start, end, size, deadline), self.settings, self.ctx, what,
                            size=end - start + 1)
        with self._lock:
            self.bytes_fetched += len(data)
        return data

    def _get_range(self, name: str, start: int, end: int, size: int, deadline: float) -> bytes:
        from huggingface_hub import hf_hub_url  # noqa: PLC0415
        from huggingface_hub.utils import get_session, hf_raise_for_status  # noqa: PLC0415

        url = hf_hub_url(self.ctx.ref.repo_id, name, revision=self.commit, endpoint=self.settings.endpoint)
        # identity: sizes and offsets are of the file, not of a compressed body
        headers = hf_headers(self.token, Range=f"bytes={start}-{end}")
        want = end - start + 1
        seconds = deadline_for(self.settings, want)
        with get_session().stream(
            "GET", url, headers=headers, timeout=self.settings.download_timeout, follow_redirects=True,
        ) as resp:
            hf_raise_for_status(resp)
            if resp.status_code == 206:
                self._check_content_range(resp.headers.get("Content-Range"), start, end, size)
            elif resp.status_code == 200 and start == 0:
                # The server ignored the range: take the first bytes of the body and hang up.
                length = resp.headers.get("Content-Length")
                if length is not None and length.isdigit() and (len(length) > 20 or int(length) != size):
                    raise ProtocolError(f"a {length}-byte file where the repo lists {size} bytes")
            else:
                raise ProtocolError(f"HTTP {resp.status_code} to a range request (expected 206 Partial Content)")
            refuse_encoding(resp)
            body = bytearray()
            for chunk in resp.iter_raw(64 * 1024):
                body += chunk
                if len(body) >= want:
                    break
                check_deadline(deadline, seconds)
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
    listing: RepoListing | None = None,
) -> Path:
    """The snapshot folder of ``commit`` holding the files ``allow_patterns`` match.

    Online, each file the cache lacks is fetched by ``HubClient.download`` (capped at its listed
    size, under the deadline), after checking that they all fit on the cache's disk. With
    ``offline_reason`` the cache alone must hold the files (``HF_HUB_OFFLINE``, or a Hub that
    cannot be reached): huggingface_hub's ``snapshot_download(local_files_only=True)`` finds them.
    """
    from huggingface_hub.utils import filter_repo_objects  # noqa: PLC0415

    what = "the files matching " + ", ".join(allow_patterns) if allow_patterns else "the repo files"
    if offline_reason is not None:
        return _cached_snapshot(ctx, settings, commit, allow_patterns, what, offline_reason)
    cache = RepoCache(settings.cache_dir, ctx.ref.repo_id)
    if listing is None or listing.commit != commit:
        listing = cache.read_listing(commit) or fetch_listing(ctx, settings, token)
        cache.write_listing(listing)
    names = [n for n in filter_repo_objects(sorted(listing.files), allow_patterns=allow_patterns)
             if _safe_name(n)]
    snap = cache.snapshot_dir(commit)
    missing = [listing.files[n] for n in names if not (snap / n).is_file()]
    _check_cache_space(ctx, settings, sum(f.size for f in missing))
    client = HubClient(ctx, settings, token, commit)
    for f in missing:
        client.download(f.name, f.size, f.lfs_sha256)
    try:
        snap.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise HubError(f"{ctx.ref.label}: cannot create {snap} ({err.strerror or err}); check HF_HUB_CACHE") from None
    _write_tree(cache, listing)
    return snap


def _safe_name(name: str) -> bool:
    parts = name.split("/")
    return bool(name) and all(p not in ("", ".", "..") for p in parts) and "\\" not in name and "\0" not in name


def _check_cache_space(ctx: HubContext, settings: HubSettings, needed: int) -> None:
    """Refuse a download that cannot fit in the cache, before fetching a byte of it."""
    import shutil  # noqa: PLC0415

    if needed == 0:
        return
    folder = settings.cache_dir
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        free = shutil.disk_usage(folder).free
    except OSError:
        return
    margin = limits.FREE_SPACE_MARGIN
    if needed + margin > free:
        raise HubError(
            f"{ctx.ref.label}: the files to download take {limits.human_bytes(needed)}, but the Hugging Face "
            f"cache at {settings.cache_dir} has {limits.human_bytes(free)} free (a margin of "
            f"{limits.human_bytes(margin)} is kept); free space, or point HF_HUB_CACHE elsewhere"
        )


def _write_tree(cache: RepoCache, listing: RepoListing) -> None:
    """huggingface_hub's ``trees/<commit>.json``, so that its own offline lookups know the files."""
    if any(f.blob_id is None for f in listing.files.values()):
        return
    try:
        from huggingface_hub._tree_cache import TreeCacheEntry, write_tree_cache  # noqa: PLC0415
    except ImportError:
        return
    entries = {
        f.name: TreeCacheEntry(size=f.size, blob_id=f.blob_id, lfs_sha256=f.lfs_sha256, lfs_size=f.size if f.lfs_sha256 else None)
        for f in listing.files.values()
    }
    write_tree_cache(str(cache.folder), listing.commit, entries)


def _cached_snapshot(
    ctx: HubContext, settings: HubSettings, commit: str, allow_patterns: list[str] | None, what: str, offline_reason: str,
) -> Path:
    from huggingface_hub import snapshot_download  # noqa: PLC0415
    from huggingface_hub.errors import LocalEntryNotFoundError  # noqa: PLC0415

    try:
        return Path(snapshot_download(
            ctx.ref.repo_id, revision=commit, cache_dir=settings.cache_dir, endpoint=settings.endpoint,
            token=False, allow_patterns=allow_patterns, etag_timeout=settings.api_timeout,
            local_files_only=True, library_name="dflash-ckpt", library_version=__version__,
        ))
    except LocalEntryNotFoundError:
        raise HubError(
            f"{ctx.ref.label}: {what} are not all in the local Hugging Face cache at {settings.cache_dir} "
            f"and {offline_reason}; run once with the Hub reachable, or give a local folder"
        ) from None
    except Exception as exc:  # noqa: BLE001 - one line
        raise describe(exc, ctx, what) from None


__all__ = ["HubClient", "HubError", "HubSettings", "fetch_listing", "resolve_token", "snapshot", "with_retries"]
