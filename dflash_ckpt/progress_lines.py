"""Progress for a log instead of a terminal: one plain line every few seconds.

A bar redraws itself in place, which a CI log cannot show; without one, a smoke-run or probe-taps
in a pipeline is minutes of silence, which reads as a hang. ``LineProgress`` takes the calls the
runs make on a rich ``Progress`` (``add_task``, ``update``, ``advance``) and writes at most one line
per ``every`` seconds: what runs, how far it is, the time spent and an estimate of the time left.
The standard library only.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

#: Seconds between two progress lines in a log.
EVERY_S = 5.0


@dataclass
class _Task:
    description: str
    total: float | None
    completed: float = 0.0
    started: float = 0.0


@dataclass
class LineProgress:
    """The subset of rich's ``Progress`` the runs use, printing ``write(line)`` every ``every`` s."""

    write: Callable[[str], None]
    every: float = EVERY_S
    clock: Callable[[], float] = time.monotonic
    tasks: list[_Task] = field(default_factory=list)
    _last: float | None = None

    def add_task(self, description: str, total: float | None = None, **_: Any) -> int:
        now = self.clock()
        self.tasks.append(_Task(description, total, started=now))
        if self._last is None:
            self._last = now
        return len(self.tasks) - 1

    def update(self, task_id: int, *, description: str | None = None, advance: float | None = None,
               completed: float | None = None, **_: Any) -> None:
        task = self.tasks[task_id]
        if description is not None:
            task.description = description
        if completed is not None:
            task.completed = completed
        if advance:
            self.advance(task_id, advance)

    def advance(self, task_id: int, advance: float = 1) -> None:
        task = self.tasks[task_id]
        task.completed += advance
        now = self.clock()
        if self._last is not None and now - self._last >= self.every:
            self._last = now
            self.write(line(task, now))


def line(task: _Task, now: float) -> str:
    """``generating math: 96/384 (25%), 12 s elapsed, about 36 s left``."""
    spent = now - task.started
    if not task.total:
        return f"{task.description}: {task.completed:g} done, {spent:.0f} s elapsed"
    done = min(task.completed, task.total)  # a run may step past its estimate (re-measured finalists)
    share = done / task.total
    left = f", about {spent * (1 - share) / share:.0f} s left" if share > 0 else ""
    return f"{task.description}: {done:g}/{task.total:g} ({100 * share:.0f}%), {spent:.0f} s elapsed{left}"


def stderr_progress() -> LineProgress:
    """A ``LineProgress`` writing to stderr (each line inert and flushed, so a log shows it now)."""
    import sys

    from dflash_ckpt.errors import inert

    def write(text: str) -> None:
        sys.stderr.write(inert(text) + "\n")
        sys.stderr.flush()

    return LineProgress(write, every=EVERY_S)
