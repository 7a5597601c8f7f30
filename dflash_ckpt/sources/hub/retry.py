"""Asking the Hub again: which failures are worth it, how long to pause, and when to stop.

Timeouts, dropped connections and 408/429/5xx answers are retried (``DFLASH_CKPT_HUB_RETRIES``)
after a pause that doubles from ``DFLASH_CKPT_HUB_BACKOFF``, or the pause a ``Retry-After`` header
asks for, up to ``DFLASH_CKPT_HUB_MAX_RETRY_AFTER``. A refused connection is not retried, and
no attempt or pause may pass the command's Hub budget (``budget.py``).

huggingface_hub's ``http_backoff`` is not used (``benchmarks/bench_hub_helpers.py``): it sleeps
whatever ``Retry-After`` asks (86,401 s for 86400), has no overall deadline, ignores an HTTP-date
``Retry-After``, and cannot resume a body cut mid-stream.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from typing import Any, TypeVar

from dflash_ckpt.errors import inert
from dflash_ckpt.terminal import quiet
from dflash_ckpt.sources.hub.budget import Budget, command_budget
from dflash_ckpt.sources.hub.download import within
from dflash_ckpt.sources.hub.errors import DeadlineExceeded, HubContext, HubError, describe, http_status, is_retryable

T = TypeVar("T")
#: The most characters of a ``Retry-After`` value looked at (an HTTP date is 29).
RETRY_AFTER_CHARS = 64


def with_retries(fn: Callable[[Budget], T], settings: Any, ctx: HubContext, what: str) -> T:
    """``fn(budget)``, asked again after retryable failures with exponential backoff; ``HubError`` at the end.

    Every attempt and pause draws on the command's one budget (``settings.deadline``); a
    ``Retry-After`` longer than ``settings.max_retry_after`` ends the attempts at once, with a line
    saying so, and one longer than the budget left ends them with the deadline's line.
    """
    budget = command_budget(settings.deadline)
    attempts = settings.retries + 1
    pause = settings.backoff
    for attempt in range(1, attempts + 1):
        try:
            return within(fn, budget)
        except HubError:
            raise
        except Exception as exc:  # noqa: BLE001 - every failure becomes one line below
            if _cache_write_error(exc):
                raise HubError(
                    f"{what} cannot be written into the Hugging Face cache at {settings.cache_dir} "
                    f"({getattr(exc, 'strerror', None) or exc}); free space there, or point HF_HUB_CACHE elsewhere",
                    path=ctx.ref.label
                ) from None
            if attempt == attempts or not is_retryable(exc):
                raise describe(exc, ctx, what, attempts=attempt) from None
            asked = retry_after(exc)
            if asked is not None and asked > settings.max_retry_after:
                asked_text = f"{asked:.0f} s" if asked < 1e12 else "more than 10^12 s"
                raise HubError(
                    f"the Hub at {ctx.endpoint} answered HTTP {http_status(exc)} to {what} and asks "
                    f"to retry after {asked_text}, longer than the {settings.max_retry_after:g} s this tool waits "
                    "(DFLASH_CKPT_HUB_MAX_RETRY_AFTER); try again later",
                    unreachable=True, path=ctx.ref.label,
                ) from None
            wait = min(pause, settings.max_backoff) if asked is None else asked
            if wait >= budget.left():
                raise describe(DeadlineExceeded(budget.allowed()), ctx, what) from None
            if not quiet():  # -q: errors only; the last failure is the error line
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


def retry_after(exc: BaseException) -> float | None:
    """Seconds a 429/503 answer asks us to wait (``Retry-After``: seconds or an HTTP date), if it says.

    Any bytes may arrive there (``²``, a negative number, 5,000 digits, a date in the year 9999 or
    before 1970): what is not a plain count of seconds or a parseable date counts as not said;
    a count too long to be sensible is returned as infinity, a date in the past as 0.
    """
    headers = getattr(getattr(exc, "response", None), "headers", None)
    try:
        value = headers.get("Retry-After", "") if headers is not None else ""
    except Exception:  # noqa: BLE001 - a header that cannot even be decoded says nothing
        return None
    if isinstance(value, bytes):
        value = value.decode("latin-1")
    if not isinstance(value, str):
        return None
    value = value.strip()
    if not value:
        return None
    if value.isascii() and value.isdigit():  # "²".isdigit() is True; int("²") is not a number
        return float(value) if len(value) <= 12 else math.inf
    return _seconds_until(value[:RETRY_AFTER_CHARS]) if value.isascii() else None


def _seconds_until(value: str) -> float | None:
    import datetime as dt  # noqa: PLC0415
    from email.utils import parsedate_to_datetime  # noqa: PLC0415

    try:
        when = parsedate_to_datetime(value)
        if when is None:
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=dt.timezone.utc)
        return max(0.0, (when - dt.datetime.now(dt.timezone.utc)).total_seconds())
    except (TypeError, ValueError, IndexError, OverflowError, AttributeError):
        return None


def _short(exc: BaseException) -> str:
    status = getattr(getattr(exc, "response", None), "status_code", None)
    return f"HTTP {status}" if isinstance(status, int) else type(exc).__name__
