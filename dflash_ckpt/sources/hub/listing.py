"""The repo listing from the Hub: one repo-info request, bounded before it is parsed.

``GET /api/models/{repo}[/revision/{rev}]?blobs=true`` (what huggingface_hub's
``model_info(files_metadata=True)`` sends) pins the revision to a commit and lists the files with
their sizes, LFS sha256 and git blob ids. The answer is untrusted: its bytes are capped while it
streams, its files, objects and values are counted on the raw bytes before ``json.loads`` builds
anything (``limits.MAX_LISTING_*``), and every name and id that will build a cache path is checked
(``ids.py``). A listing that fails any of these is refused whole, in one line.

``HfApi.list_repo_tree`` is not used (huggingface_hub 2.4.0, ``benchmarks/bench_hub_helpers.py``):
it parses each page whole with no cap (a 63 MiB page: 459 MiB peak, 600,000 files taken), follows
``Link: next`` without end, and has no deadline on a dripped page (still running at 40 s).
"""

from __future__ import annotations

from typing import Any

from dflash_ckpt import limits
from dflash_ckpt.sources.hub.budget import Budget
from dflash_ckpt.sources.hub.cache import RemoteFile, RepoListing, count_problem, is_commit
from dflash_ckpt.sources.hub.download import CHUNK, hf_headers, refuse_encoding
from dflash_ckpt.sources.hub.errors import HubContext, ProtocolError, describe, first_line
from dflash_ckpt.sources.hub.ids import is_git_id, is_sha256, name_problem, shown
from dflash_ckpt.sources.hub.retry import with_retries


def _repo_info(url: str, token: str | bool, timeout: float, budget: Budget) -> Any:
    """One attempt: the answer streamed under the budget and capped at ``limits.MAX_LISTING_BYTES``,
    its files, objects and values counted on the raw bytes, then parsed into ``ModelInfo``."""
    import json  # noqa: PLC0415

    from huggingface_hub.hf_api import ModelInfo  # noqa: PLC0415
    from huggingface_hub.utils import get_session, hf_raise_for_status  # noqa: PLC0415

    cap = limits.MAX_LISTING_BYTES
    headers = hf_headers(token)
    with get_session().stream("GET", url, headers=headers, params={"blobs": True}, timeout=timeout, follow_redirects=True) as resp:
        hf_raise_for_status(resp)
        refuse_encoding(resp)
        length = resp.headers.get("Content-Length")
        if length is not None and length.isdigit() and (len(length) > 20 or int(length) > cap):
            raise ProtocolError(f"a {int(length[:21]):,}-byte answer, more than the {cap:,} bytes allowed")
        body = bytearray()
        for chunk in resp.iter_raw(CHUNK):
            body += chunk
            if len(body) > cap:
                raise ProtocolError(f"an answer of more than the {cap:,} bytes allowed")
            budget.spend(len(chunk))
    problem = count_problem(body)
    if problem is not None:
        raise ProtocolError(f"a listing of {problem} (nothing parsed)")
    try:
        data = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise json.JSONDecodeError("not JSON", "", 0) from None
    if not isinstance(data, dict):
        raise ProtocolError("repo info that is not a JSON object")
    siblings = data.get("siblings")
    if siblings is not None and not (isinstance(siblings, list) and all(isinstance(s, dict) for s in siblings)):
        raise ProtocolError("repo info whose siblings are not a list of objects")
    try:
        return ModelInfo(**data)
    except (KeyError, TypeError, AttributeError, ValueError) as err:
        raise ProtocolError(f"repo info missing a field ({first_line(err)})") from None


def fetch_listing(ctx: HubContext, settings: Any, token: str | bool) -> RepoListing:
    """The commit ``ctx.ref`` points to now and the repo's files there (one API request, retried)."""
    from urllib.parse import quote  # noqa: PLC0415

    from huggingface_hub.utils import validate_repo_id  # noqa: PLC0415

    try:
        validate_repo_id(ctx.ref.repo_id)
    except Exception as exc:  # noqa: BLE001 - HFValidationError: one line
        raise describe(exc, ctx, "repo info") from None
    url = f"{settings.endpoint}/api/models/{ctx.ref.repo_id}"
    if ctx.ref.revision is not None:
        url += f"/revision/{quote(ctx.ref.revision, safe='')}"

    info = with_retries(lambda budget: _repo_info(url, token, settings.api_timeout, budget), settings, ctx, "repo info")
    sha = getattr(info, "sha", None)
    if not isinstance(sha, str) or not is_commit(sha):
        raise describe(ProtocolError(f"repo info without a commit id (sha={str(sha)[:60]!r})"), ctx, "repo info")
    files: dict[str, RemoteFile] = {}
    for sib in info.siblings or []:
        files[str(sib.rfilename)] = _remote_file(sib, ctx)
    return RepoListing(ctx.ref.repo_id, sha, files)


def _remote_file(sib: Any, ctx: HubContext) -> RemoteFile:
    """One sibling of repo info as a ``RemoteFile``, or the line refusing the listing."""
    def bad(what: str) -> Exception:
        return describe(ProtocolError(what), ctx, "repo info")

    name = sib.rfilename
    problem = name_problem(name)
    if problem is not None:
        raise bad(f"listing the file name {shown(name)}, which no repo can hold ({problem})")
    size = sib.lfs.size if sib.lfs is not None else sib.size
    if not isinstance(size, int) or isinstance(size, bool) or not 0 <= size <= limits.MAX_USIZE:
        raise bad(f"repo info without a valid size for {shown(name)}")
    sha256 = sib.lfs.sha256 if sib.lfs is not None else None
    if sib.lfs is not None and not is_sha256(sha256):
        raise bad(f"an LFS oid {shown(sha256)} for {shown(name)}, not 64 hex digits")
    blob_id = getattr(sib, "blob_id", None)
    if blob_id is not None and not is_git_id(blob_id):
        raise bad(f"a blob id {shown(blob_id)} for {shown(name)}, not 40 hex digits")
    return RemoteFile(name, size, sha256, blob_id)
