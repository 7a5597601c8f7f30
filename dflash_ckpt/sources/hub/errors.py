"""Turn what huggingface_hub and its HTTP client raise into one line a user can act on.

A failure to reach or read the Hub is not a defect of the checkpoint, so it is raised as a
``HubError``: exit 2 like every input error, but not an ``InputError``, which the weight
inventory would record as an unreadable-header finding (exit 1) instead of ending the check.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from dflash_ckpt.errors import DFlashCkptError
from dflash_ckpt.sources.repo_ref import RepoRef

#: HTTP statuses worth asking again (the Hub's own client retries the same ones).
RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
TOKEN_HOWTO = "pass a token with --token, the HF_TOKEN variable or `hf auth login`"


class HubError(DFlashCkptError):
    """The Hub (or the local cache standing in for it) could not give what was asked (exit 2)."""

    exit_code = 2

    def __init__(self, message: str, *, code: str | None = "DF001", unreachable: bool = False,
                 path: str | None = None, key: str | None = None) -> None:
        super().__init__(message, code=code, path=path, key=key)
        #: The Hub could not be reached or kept failing (timeouts, 5xx): the cache may stand in.
        self.unreachable = unreachable


class ProtocolError(Exception):
    """A response that is not what the Hub sends: wrong type, wrong range, missing fields."""


class DeadlineExceeded(ProtocolError):
    """The command's Hub time (``budget.Budget``) ran out before an answer was complete."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"no complete answer within {seconds:.3g} s")
        self.seconds = seconds


class ContentMismatch(ProtocolError):
    """A downloaded body of the listed size whose sha256 or git blob id is not the listed one."""


@dataclass(frozen=True)
class HubContext:
    """Who is asking, so that a message can name the repo, its role and the token in use."""

    ref: RepoRef
    role: str
    endpoint: str
    #: ``--token``, ``HF_TOKEN``, ``saved login`` or ``None`` when no token is sent.
    token_source: str | None


def first_line(text: object, limit: int = 200) -> str:
    """The first non-empty line of ``text``, shortened: messages stay on one line."""
    for line in str(text).splitlines():
        line = line.strip()
        if line:
            return line if len(line) <= limit else line[: limit - 1] + "…"
    return ""


def chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and its causes, outermost first (huggingface_hub wraps HTTP errors in cache errors)."""
    seen: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and all(cur is not s for s in seen):
        seen.append(cur)
        cur = cur.__cause__ or cur.__context__
    return seen


def http_status(exc: BaseException) -> int | None:
    """The HTTP status carried by a huggingface_hub error, if any."""
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    return status if isinstance(status, int) else None


def is_retryable(exc: BaseException) -> bool:
    """Timeouts, dropped connections and 408/429/5xx answers: worth another try after a pause."""
    import httpx2  # noqa: PLC0415 - only Hub code paths get here

    if refused(exc):  # nothing listens there: asking again in a second changes nothing
        return False
    for e in chain(exc):
        if isinstance(e, (httpx2.TimeoutException, httpx2.NetworkError, httpx2.RemoteProtocolError)):
            return not isinstance(e, httpx2.ProxyError)
        status = http_status(e)
        if status is not None:
            return status in RETRY_STATUSES
    return False


def refused(exc: BaseException) -> bool:
    """A connection refused (ECONNREFUSED): the endpoint is wrong or down, not slow."""
    import errno  # noqa: PLC0415

    for e in chain(exc):
        if isinstance(e, ConnectionRefusedError) or getattr(e, "errno", None) == errno.ECONNREFUSED:
            return True
        if type(e).__name__ == "ConnectError" and "connection refused" in str(e).lower():
            return True
    return False


def describe(exc: BaseException, ctx: HubContext, what: str, *, attempts: int | None = None) -> HubError:
    """One ``HubError`` for ``exc`` raised while fetching ``what`` (e.g. ``repo info``, ``config.json``)."""
    stalled = any(isinstance(e, DeadlineExceeded) for e in chain(exc))
    path, text = _message(exc, ctx, what, attempts)
    return HubError(text, path=path, unreachable=stalled or refused(exc) or is_retryable(exc))


def _message(exc: BaseException, ctx: HubContext, what: str, attempts: int | None) -> tuple[str | None, str]:
    """``(path, text)``: the repo (or the inner error's location) and what went wrong."""
    import httpx2  # noqa: PLC0415
    from huggingface_hub import errors as hf  # noqa: PLC0415

    label, repo, ep, role = ctx.ref.label, ctx.ref.repo_id, ctx.endpoint, ctx.role
    tried = f" after {attempts} attempts" if attempts and attempts > 1 else ""
    token = f"the token from {ctx.token_source}" if ctx.token_source else None
    for e in chain(exc):
        if isinstance(e, HubError):
            return e.path, e.text
        if isinstance(e, hf.GatedRepoError):
            if http_status(e) == 403 or token:
                return label, (
                    f"{role} repo is gated and {token or 'the token'} has no access to it; "
                    f"request access at {ep}/{repo}, or pass another token with --token"
                )
            return label, (
                f"{role} repo is gated and no token was sent; accept its conditions at "
                f"{ep}/{repo}, then {TOKEN_HOWTO}"
            )
        if isinstance(e, hf.RevisionNotFoundError):
            return label, (
                f"revision '{ctx.ref.revision or 'main'}' not found in {repo} on {ep}; "
                "check the branch, tag or commit id"
            )
        if isinstance(e, hf.DisabledRepoError):
            return label, f"{role} repo is disabled on {ep}"
        if isinstance(e, hf.RepositoryNotFoundError):
            if token:
                return label, f"{role} repo not found on {ep}, or {token} cannot read it; check the repo id and the token"
            return label, f"{role} repo not found on {ep}; check the repo id, or if it is private {TOKEN_HOWTO}"
        if isinstance(e, hf.RemoteEntryNotFoundError):
            return label, f"{what} is listed in the repo but the Hub at {ep} does not serve it (HTTP 404)"
        if isinstance(e, hf.OfflineModeIsEnabled):
            return label, (
                f"{what} is not in the local Hugging Face cache and HF_HUB_OFFLINE is set; "
                "run once without HF_HUB_OFFLINE, or give a local folder"
            )
        if isinstance(e, hf.HFValidationError):
            return label, f"not a valid Hub repo id ({first_line(e)})"
        if isinstance(e, hf.FileMetadataError):
            return label, f"{ep} did not answer {what} like a Hub endpoint ({first_line(e)}); check HF_ENDPOINT"
        status = http_status(e)
        if status is not None:
            server = first_line(getattr(e, "server_message", None) or "")
            detail = f": {server}" if server else ""
            if status == 401:
                src = token or "the token"
                return label, f"the Hub at {ep} rejected {src} (HTTP 401{detail}); {TOKEN_HOWTO}"
            if status in RETRY_STATUSES:
                return label, (
                    f"the Hub at {ep} answered HTTP {status} to {what}{tried}{detail}; "
                    "try again later"
                )
            return label, f"the Hub at {ep} answered HTTP {status} to {what}{detail}"
        if isinstance(e, httpx2.TimeoutException):
            return label, (
                f"no answer from {ep} to {what} in time{tried}; check the network, or raise "
                "HF_HUB_ETAG_TIMEOUT / HF_HUB_DOWNLOAD_TIMEOUT (seconds)"
            )
        if isinstance(e, (httpx2.ConnectError, httpx2.NetworkError, httpx2.RemoteProtocolError)):
            return label, (
                f"cannot reach {ep} for {what}{tried} ({first_line(e) or type(e).__name__}); "
                "check the network and HF_ENDPOINT, or set HF_HUB_OFFLINE=1 to use the local cache"
            )
        if isinstance(e, DeadlineExceeded):
            return label, (
                f"{ep} did not finish answering {what} within {e.seconds:.3g} s "
                "(DFLASH_CKPT_HUB_DEADLINE, seconds for all Hub requests of a command, retries included; "
                "each 256 KiB received adds 1 s); the connection is too slow or the server stalls, "
                "try again later or raise it"
            )
        if isinstance(e, ContentMismatch):
            return label, (
                f"{ep} sent {what} with other content than the repo lists ({first_line(e)}); "
                "nothing was kept, try again or check HF_ENDPOINT"
            )
        if isinstance(e, ProtocolError):
            return label, f"{ep} answered {what} with {first_line(e)}; check HF_ENDPOINT"
        if isinstance(e, json.JSONDecodeError):
            return label, f"{ep} answered {what} with something that is not JSON; check HF_ENDPOINT"
        if isinstance(e, OSError) and "Consistency check failed" in str(e):
            return label, f"the download of {what} was cut short ({first_line(e)}); try again"
    if isinstance(exc, hf.LocalEntryNotFoundError):
        return label, f"cannot reach {ep} and {what} is not in the local cache; check the network"
    return label, f"fetching {what} from {ep} failed: {type(exc).__name__}: {first_line(exc)}"
