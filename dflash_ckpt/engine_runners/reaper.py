"""The engine child's launcher: ``python reaper.py STATUS PARENT_PID PROGRAM ARG...``.

Why: killing the child's process group is not enough. A process vLLM starts may call ``setsid``
(a new session, so a new group) and outlive its parent, and then it belongs to no group of ours;
and when this tool itself is killed with SIGKILL, no ``finally`` of ours runs at all. This
launcher, run by the engine's python between the tool and the child, closes both holes:

- it is a *child subreaper* (``prctl(PR_SET_CHILD_SUBREAPER)``): every orphan below it, whatever
  session it moved to, is re-parented to it instead of to init, so "my descendants" is a tree it
  can walk in ``/proc`` and end completely;
- it asks for SIGTERM when the tool dies (``prctl(PR_SET_PDEATHSIG)``), however the tool died,
  and also watches the tool's process (a shell between the two would hide its death).

It runs PROGRAM, reaps every child, and when PROGRAM ends, or SIGTERM, SIGHUP or SIGINT arrives,
ends every descendant (SIGTERM, then SIGKILL after ``GRACE_S``), and writes to STATUS how
PROGRAM ended (``{"exit": n}``, ``{"signal": n}``, or ``{"stopped": n}`` when a signal stopped the
run first). Standard library only: it runs in the engine's env, where ``dflash_ckpt`` is absent.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
import time

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
#: Seconds descendants get between SIGTERM and SIGKILL (the tool waits longer for this launcher).
GRACE_S = 3.0

_stop: list[int] = []


def _prctl(option: int, value: int) -> bool:
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):  # not Linux: the tool's process-group kill still applies
        return False


def descendants(root: int) -> list[int]:
    """Every live process below ``root`` (from ``/proc``'s parent links), children first."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                fields = fh.read().rpartition(b")")[2].split()
        except OSError:
            continue
        if fields and fields[0] != b"Z":
            children.setdefault(int(fields[1]), []).append(int(name))
    out, todo = [], [root]
    while todo:
        for pid in children.get(todo.pop(), []):
            out.append(pid)
            todo.append(pid)
    return out


def start_time(pid: int) -> int | None:
    """When ``pid`` started (clock ticks after boot), to tell it from a later process given the same id."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return int(fh.read().rpartition(b")")[2].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _reap() -> list[tuple[int, int]]:
    done = []
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return done
        if pid == 0:
            return done
        done.append((pid, status))


def end_all() -> None:
    """SIGTERM every descendant, SIGKILL what is left after ``GRACE_S``, reap them all."""
    me = os.getpid()
    for sig, grace in ((signal.SIGTERM, GRACE_S), (signal.SIGKILL, 5.0)):
        deadline = time.monotonic() + grace
        pids = descendants(me)
        while pids:
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except (ProcessLookupError, PermissionError):
                    pass
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
            _reap()
            pids = descendants(me)
        if not pids:
            break
    _reap()


def _on_signal(signum: int, frame: object) -> None:
    _stop.append(signum)


def main(argv: list[str]) -> int:
    status_path, parent, program = argv[1], int(argv[2]), argv[3:]
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, _on_signal)
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)  # the fast path; a shell between us and the tool
    born = start_time(parent)                  # hides its death from it, so it is also polled
    if born is None:  # the tool died before the request above took effect
        return 1
    child = os.posix_spawnp(program[0], program, os.environ)  # a bare name is looked up on PATH, as Popen did
    status: dict[str, int] = {}
    while not _stop and not status:
        for pid, raw in _reap():
            if pid == child:
                status = {"signal": os.WTERMSIG(raw)} if os.WIFSIGNALED(raw) else {"exit": os.waitstatus_to_exitcode(raw)}
        if not status and start_time(parent) != born:  # the tool is gone (a reused id has another start)
            _stop.append(signal.SIGKILL)
        if not status and not _stop:
            time.sleep(0.05)
    if _stop and not status:
        status = {"stopped": _stop[0]}
    end_all()
    tmp = status_path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(status, fh)
    os.replace(tmp, status_path)
    return status.get("exit", 128 + status.get("signal", status.get("stopped", 0)))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
