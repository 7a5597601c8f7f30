"""One deadline for all the Hub time of a command (``DFLASH_CKPT_HUB_DEADLINE``).

A deadline per request is no bound at all against a server that drips: each attempt gets it
anew, a cut connection is retried, and a safetensors header that claims 99,000,000 bytes buys
hundreds of seconds per attempt. So the budget is one clock for the whole command, started at its
first Hub request and shared by every request, retry, pause and reconnect after it. What a
download legitimately needs is earned, not granted up front: every ``limits.HUB_MIN_RATE`` bytes
received add one second, so a transfer that keeps that pace never runs out, and one byte a second
earns nothing.

``reset`` starts a new command (the CLI calls it first); a program that calls the library gets one
budget per process unless it resets it too.
"""

from __future__ import annotations

import threading
import time

from dflash_ckpt import limits
from dflash_ckpt.sources.hub.errors import DeadlineExceeded


class Budget:
    """The time left to a command's Hub requests: ``seconds`` from the first one, plus what bytes earn."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.start = time.monotonic()
        self.received = 0
        self._lock = threading.Lock()

    def allowed(self) -> float:
        """Seconds granted so far: the setting plus what the bytes received have earned."""
        return self.seconds + self.received / limits.HUB_MIN_RATE

    def left(self) -> float:
        return self.start + self.allowed() - time.monotonic()

    def spend(self, n: int) -> None:
        """Count ``n`` bytes received, then stop if the time is up (called between chunks)."""
        with self._lock:
            self.received += n
        self.require_left()

    def require_left(self) -> None:
        if self.left() <= 0:
            raise DeadlineExceeded(self.allowed())


_current: Budget | None = None
_current_lock = threading.Lock()


def command_budget(seconds: float) -> Budget:
    """The running command's budget, started now if this is its first Hub request."""
    global _current
    with _current_lock:
        if _current is None or _current.seconds != seconds:
            _current = Budget(seconds)
        return _current


def reset() -> None:
    """Forget the budget: the next Hub request starts a new command's clock."""
    global _current
    with _current_lock:
        _current = None
