"""The network side of Hub access: settings from the environment, retries, and the three requests.

1. ``fetch_listing``: the repo info at a revision (``GET /api/models/{repo}[/revision/{rev}]``
   with file sizes), which pins the revision to a commit and lists the files.
2. ``HubClient.download``: a whole file (``config.json``, the shard index, weights for
   ``normalize`` and ``smoke-run``) by one streamed GET capped at its listed size, into the
   Hugging Face cache in huggingface_hub's layout (``download.py``).
3. ``HubClient.fetch_range``: ``bytes=a-b`` of a file through huggingface_hub's HTTP session
   (its auth headers, user agent, proxy settings and redirect rules), checked against
   ``Content-Range``: how a safetensors header is read without its tensor data.

Every request draws on the command's one Hub budget (``budget.py``) under the retry policy of
``retry.with_retries``
(``DFLASH_CKPT_HUB_DEADLINE``, ``DFLASH_CKPT_HUB_RETRIES``, ``DFLASH_CKPT_HUB_BACKOFF``,
``DFLASH_CKPT_HUB_MAX_RETRY_AFTER``; README, Limits).

Every function reads the environment when called rather than when imported, so that
``HF_ENDPOINT``, ``HF_HUB_CACHE`` and friends set by a test, or by the user, always apply.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from dflash_ckpt import limits
from dflash_ckpt._version import __version__
from dflash_ckpt.sources.hub.budget import Budget
from dflash_ckpt.sources.hub.cache import RepoCache, RepoListing, hf_hub_cache, hf_offline
from dflash_ckpt.sources.hub.download import (
    Partial, clean_on_signals, fetch_file, hf_headers, place_in_cache, progress_bar, refuse_encoding,
)
from dflash_ckpt.sources.hub.errors import HubContext, HubError, ProtocolError, describe, first_line
from dflash_ckpt.sources.hub.ids import name_problem
from dflash_ckpt.sources.hub.listing import fetch_listing
from dflash_ckpt.sources.hub.retry import with_retries

DEFAULT_ENDPOINT = "https://huggingface.co"
CONTENT_RANGE_RE = re.compile(r"^bytes (\d{1,20})-(\d{1,20})/(\d{1,20}|\*)$")


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
    #: Seconds all Hub requests of one command may take (plus 1 s per HUB_MIN_RATE bytes received).
    deadline: float = limits.HUB_DEADLINE
    #: The longest ``Retry-After`` waited for; a server asking for more gets our error at once.
    max_retry_after: float = limits.MAX_RETRY_AFTER

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
            max_retry_after=_env_number("DFLASH_CKPT_HUB_MAX_RETRY_AFTER", limits.MAX_RETRY_AFTER, minimum=0),
        )


def resolve_token(token: str | None, label: str) -> tuple[str | bool, str | None]:
    """The token to send and where it came from (for messages): ``--token``, else the one
    huggingface_hub would send implicitly (``HF_TOKEN``, then the saved login; none at all when
    ``HF_HUB_DISABLE_IMPLICIT_TOKEN`` is set), so that auth follows the library's rules.

    ``False`` (send none) when there is none, so that huggingface_hub does not look again;
    ``label`` names the repo in the error line when huggingface_hub fails to get one.
    """
    if token:
        return token, "--token"
    from huggingface_hub.utils import get_token_to_send  # noqa: PLC0415

    try:
        sent = get_token_to_send(None)
    except Exception as exc:  # noqa: BLE001 - an OIDC exchange (HF_OIDC_RESOURCE) or a login refresh that failed
        raise HubError(f"no token to send: huggingface_hub could not get one ({first_line(exc)}); "
                       "pass --token, or check HF_OIDC_RESOURCE and the saved login (hf auth login)", path=label) from None
    if not sent:
        return False, None
    var = next((v for v in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN") if os.environ.get(v, "").strip() == sent), None)
    oidc = "the OIDC token exchange (HF_OIDC_RESOURCE)" if os.environ.get("HF_OIDC_RESOURCE") else None
    return sent, var or oidc or "the saved login (hf auth login)"


class HubClient:
    """Requests for the files of one repo at one commit."""

    def __init__(self, ctx: HubContext, settings: HubSettings, token: str | bool, commit: str) -> None:
        self.ctx = ctx
        self.settings = settings
        self.token = token
        self.commit = commit

    def download(self, name: str, size: int, sha256: str | None = None, blob_id: str | None = None) -> Path:
        """``name`` (``size`` bytes, as listed) in the Hugging Face cache, downloaded unless there.

        One streamed GET under our retry policy and the command's budget, capped at the listed
        size and checked against the listed sha256 or git blob id (``download.fetch_file``); the
        file lands in huggingface_hub's cache layout, inside the repo's cache folder only.
        """
        from huggingface_hub import hf_hub_url  # noqa: PLC0415

        problem = name_problem(name)
        if problem is not None:
            raise HubError(f"the listing names a file {name[:80]!r}…, {problem}; nothing was downloaded",
                           path=self.ctx.ref.label)
        repo_folder = RepoCache(self.settings.cache_dir, self.ctx.ref.repo_id).folder
        path = repo_folder / "snapshots" / self.commit / name
        if path.is_file():
            return path
        url = hf_hub_url(self.ctx.ref.repo_id, name, revision=self.commit, endpoint=self.settings.endpoint)
        bar = progress_bar(size, name)
        partial = Partial()  # what a cut attempt leaves, resumed by the next with a Range request
        try:
            with clean_on_signals():
                tmp, blob_name = with_retries(
                    lambda budget: fetch_file(
                        url, repo_folder / "blobs", token=self.token, size=size, commit=self.commit,
                        timeout=self.settings.download_timeout, budget=budget, sha256=sha256, blob_id=blob_id,
                        on_bytes=bar.update if bar is not None else None, partial=partial,
                    ),
                    self.settings, self.ctx, name,
                )
        finally:
            partial.discard()
            if bar is not None:
                bar.close()
        try:
            path = place_in_cache(repo_folder, self.commit, name, tmp, blob_name)
        except ProtocolError as err:
            raise HubError(
                f"{name} not stored: the Hugging Face cache at {self.settings.cache_dir} has "
                f"{err}; remove that link (or the repo's folder: hf cache rm)", path=self.ctx.ref.label
            ) from None
        except OSError as err:
            raise HubError(
                f"{name} cannot be stored in the Hugging Face cache at "
                f"{self.settings.cache_dir} ({err.strerror or err})", path=self.ctx.ref.label
            ) from None
        return path

    def fetch_range(self, name: str, start: int, end: int, size: int) -> bytes:
        """Bytes ``start..end`` (inclusive) of ``name``, whose listed size is ``size``."""
        what = f"bytes {start}-{end} of {name}"
        return with_retries(lambda budget: self._get_range(name, start, end, size, budget), self.settings, self.ctx, what)

    def _get_range(self, name: str, start: int, end: int, size: int, budget: Budget) -> bytes:
        from huggingface_hub import hf_hub_url  # noqa: PLC0415
        from huggingface_hub.utils import get_session, hf_raise_for_status  # noqa: PLC0415

        url = hf_hub_url(self.ctx.ref.repo_id, name, revision=self.commit, endpoint=self.settings.endpoint)
        # identity: sizes and offsets are of the file, not of a compressed body
        headers = hf_headers(self.token, Range=f"bytes={start}-{end}")
        want = end - start + 1
        with get_session().stream(
            "GET", url, headers=headers, timeout=self.settings.download_timeout, follow_redirects=True,
        ) as resp:
            hf_raise_for_status(resp)
            if resp.status_code == 206:
                self._require_content_range(resp.headers.get("Content-Range"), start, end, size)
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
                budget.spend(len(chunk))
            if resp.status_code == 206 and len(body) > want:
                raise ProtocolError(f"{len(body)} bytes for a {want}-byte range")
        if len(body) < want:
            raise ProtocolError(f"{len(body)} bytes for a {want}-byte range (connection cut short)")
        return bytes(body[:want])

    @staticmethod
    def _require_content_range(value: str | None, start: int, end: int, size: int) -> None:
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
    listing: RepoListing | None = None,
) -> Path:
    """The snapshot folder of ``commit`` holding the files ``allow_patterns`` match: each file the
    cache lacks is fetched by ``HubClient.download`` (capped at its listed size, checked against its
    listed digest, under the command's budget), after checking that they all fit on the cache's disk."""
    from huggingface_hub.utils import filter_repo_objects  # noqa: PLC0415

    cache = RepoCache(settings.cache_dir, ctx.ref.repo_id)
    if listing is None or listing.commit != commit:
        listing = cache.read_listing(commit) or fetch_listing(ctx, settings, token)
        cache.write_listing(listing)
    names = filter_repo_objects(sorted(listing.files), allow_patterns=allow_patterns)
    snap = cache.snapshot_dir(commit)
    if not cache.holds(snap):
        raise HubError(
            f"leads outside the Hugging Face cache folder {cache.folder} (a link); remove it "
            "(or the repo's folder: hf cache rm) and run again", path=snap
        )
    missing = [listing.files[n] for n in names if not (snap / n).is_file()]
    _require_cache_space(ctx, settings, sum(f.size for f in missing))
    client = HubClient(ctx, settings, token, commit)
    for f in missing:
        client.download(f.name, f.size, f.lfs_sha256, f.blob_id)
    try:
        snap.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise HubError(f"cannot create {snap} ({err.strerror or err}); check HF_HUB_CACHE",
                       path=ctx.ref.label) from None
    cache.write_hf_tree(listing)
    return snap


def _require_cache_space(ctx: HubContext, settings: HubSettings, needed: int) -> None:
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
            f"the files to download take {limits.human_bytes(needed)}, but the Hugging Face "
            f"cache at {settings.cache_dir} has {limits.human_bytes(free)} free (a margin of "
            f"{limits.human_bytes(margin)} is kept); free space, or point HF_HUB_CACHE elsewhere", path=ctx.ref.label
        )


def cached_snapshot(
    ctx: HubContext, settings: HubSettings, commit: str, allow_patterns: list[str] | None, offline_reason: str,
) -> Path:
    """``snapshot`` from the cache alone (``HF_HUB_OFFLINE``, or a Hub that cannot be reached): a
    listed file the patterns match that the snapshot lacks is named (huggingface_hub checks this only
    against a listing it wrote; an ``inspect`` leaves ours), then its
    ``snapshot_download(local_files_only=True)`` finds the folder."""
    from huggingface_hub import snapshot_download  # noqa: PLC0415
    from huggingface_hub.errors import LocalEntryNotFoundError  # noqa: PLC0415
    from huggingface_hub.utils import filter_repo_objects  # noqa: PLC0415

    what = "the files matching " + ", ".join(allow_patterns) if allow_patterns else "the repo files"
    cache = RepoCache(settings.cache_dir, ctx.ref.repo_id)
    listing, snap = cache.read_listing(commit), cache.snapshot_dir(commit)
    names = filter_repo_objects(list(listing.files), allow_patterns=allow_patterns) if listing is not None else []
    missing = [n for n in names if not (snap / n).is_file()]
    if missing:
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        raise HubError(f"{shown} not in the local Hugging Face cache at {settings.cache_dir} and {offline_reason}; "
                       "run once with the Hub reachable, or give a local folder", path=ctx.ref.label)
    try:
        return Path(snapshot_download(
            ctx.ref.repo_id, revision=commit, cache_dir=settings.cache_dir, endpoint=settings.endpoint,
            token=False, allow_patterns=allow_patterns, etag_timeout=settings.api_timeout,
            local_files_only=True, library_name="dflash-ckpt", library_version=__version__,
        ))
    except LocalEntryNotFoundError:
        raise HubError(
            f"{what} are not all in the local Hugging Face cache at {settings.cache_dir} "
            f"and {offline_reason}; run once with the Hub reachable, or give a local folder", path=ctx.ref.label
        ) from None
    except Exception as exc:  # noqa: BLE001 - one line
        raise describe(exc, ctx, what) from None


__all__ = ["HubClient", "HubError", "HubSettings", "cached_snapshot", "fetch_listing", "resolve_token", "snapshot",
           "with_retries"]
