"""A chat template compiled and rendered in a forked child process, under limits the kernel enforces,
and waited for no longer than a wall-clock deadline.

Compiling is work too: jinja2 turns a 1 MiB template of ``{{x}}`` into gigabytes of AST and Python
source (2.0 GiB for 1 MiB, 7.3 GiB and 56 s for the 4 MiB cap), so the source goes to the child and
is compiled there, after its limits are set, never in this process. In the child:

- ``RLIMIT_AS``: its address space may grow by ``limits.TEMPLATE_MEMORY_BYTES`` at most, clamped to
  the hard limit the process already has (``prlimit --as=N``): asking for more than the hard limit
  fails, and a good template would then be blamed for it;
- ``RLIMIT_CPU``: a soft limit a second past the in-process timer for each rendering, with
  ``SIGXCPU`` back to its default action (a shell may have it ignored), and a hard limit over all
  the renderings, at which the kernel kills the child whatever it ignores;

and in this process, the wait for each answer ends at ``limits.TEMPLATE_WALL_SECONDS`` (a child
stopped, or starved of CPU, is not waited for forever); at that deadline, on Ctrl-C, or on any
error the child is killed (SIGKILL) and reaped. Only the text (at most ``MAX_TEMPLATE_OUTPUT``
characters) comes back, through a pipe read no further than that.

A child that stops on a limit it was given is one DF002 line (the template's fault); one that
stops because the address-space limit of this process left it less than its margin is one DF407
line (the machine's limit, not the template, is what to change).
"""

from __future__ import annotations

import math
import os
import select
import signal
import time
from typing import Any

from dflash_ckpt import limits
from dflash_ckpt.errors import InputError, UsageError
from dflash_ckpt.sources.chat_template import compile_template, cpu_limit, render_here

#: The child's exit status for a MemoryError it could not report through the pipe.
_OUT_OF_MEMORY = 3


def render_all(source: str, contexts: list[dict[str, Any]], wheres: list[str], name: str = "chat template", *,
               path: str | None = None) -> list[str]:
    """``source`` compiled, then each context rendered, all in one child process (one fork for
    all: a fork of a process that loaded torch costs about 60 ms). The first failure is raised.
    ``name`` names the template in a compile error, ``wheres`` each rendering in its error, and
    ``path`` is the folder every error is located at.

    Where ``fork`` is missing (not POSIX), the template compiles and renders here under the
    in-process limits only.
    """
    if len(source) > limits.MAX_TEMPLATE_BYTES:  # cheap, and said before any fork
        compile_template(source, name, path=path)
    if not hasattr(os, "fork"):
        template = compile_template(source, name, path=path)
        return [render_here(template, c, w, path=path) for c, w in zip(contexts, wheres)]
    room = _address_space_room()
    clamped = room is not None and room < limits.TEMPLATE_MEMORY_BYTES
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child; coverage cannot follow os._exit
        _child(read_end, write_end, source, contexts, wheres, name, path)
    os.close(write_end)
    texts: list[str] = []
    try:
        for index, step in enumerate([name, *wheres]):  # the compile's answer first, then one per rendering
            deadline = time.monotonic() + limits.TEMPLATE_WALL_SECONDS
            head = _read_exactly(read_end, 8, deadline)
            size = int.from_bytes(head, "little") if len(head) == 8 else 0
            frame = _read_exactly(read_end, size, deadline) if 0 < size <= 4 * limits.MAX_TEMPLATE_OUTPUT + 1 else b""
            if frame == b"C" and index == 0:
                continue
            if frame[:1] == b"T" and len(frame) == size and index > 0:
                texts.append(frame[1:].decode("utf-8", "surrogatepass"))
                continue
            if frame[:1] == b"E" and not (clamped and frame[1:2] == b"M"):
                raise InputError(frame[2:].decode("utf-8", "replace"), code="DF002", path=path)
            if clamped:
                raise UsageError(
                    f"{step}: stopped: this process's address-space limit (RLIMIT_AS) leaves "
                    f"{limits.human_bytes(room or 0)} for the chat template, less than the "
                    f"{limits.human_bytes(limits.TEMPLATE_MEMORY_BYTES)} it may use; raise the limit "
                    "(ulimit -v / prlimit --as) or use a machine with more memory", code="DF407", path=path)
            if time.monotonic() >= deadline:
                raise InputError(
                    f"{step}: stopped: no answer after {limits.TEMPLATE_WALL_SECONDS:g} s of wall-clock time "
                    "(the machine is overloaded, or the template never ends) (README, Limits)", code="DF002", path=path)
            status = _wait_briefly(pid)
            if status is not None:
                pid = 0  # reaped: nothing left to kill
            doing = "stopped while compiling" if index == 0 else "stopped"
            raise InputError(f"{step}: {doing}: {_which_limit(status)} (README, Limits)", code="DF002", path=path)
    finally:
        os.close(read_end)
        if pid:
            _kill(pid)
    return texts


def _which_limit(status: int | None) -> str:
    """What a child that sent no answer ran into, read from its wait status: the kernel's CPU
    limits end it by SIGXCPU or SIGKILL; a MemoryError raised where no answer could be built
    ends it with ``_OUT_OF_MEMORY``; anything else names both limits."""
    memory = f"{limits.human_bytes(limits.TEMPLATE_MEMORY_BYTES)} of memory"
    cpu = f"{limits.TEMPLATE_CPU_SECONDS:g} s of CPU time"
    if status is not None and os.WIFSIGNALED(status) and os.WTERMSIG(status) in (signal.SIGXCPU, signal.SIGKILL):
        return f"it passed its limit of {cpu}"
    if status is not None and os.WIFEXITED(status) and os.WEXITSTATUS(status) == _OUT_OF_MEMORY:
        return f"it needed more than {memory}"
    return f"it passed its limits of {memory} or {cpu}"


def _wait_briefly(pid: int, seconds: float = 2.0) -> int | None:
    """The wait status of a child whose pipe has closed (it is exiting), or ``None`` if it has
    not ended within ``seconds`` (then ``_kill`` ends it)."""
    end = time.monotonic() + seconds
    while True:
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return None
        if done:
            return status
        if time.monotonic() >= end:
            return None
        time.sleep(0.01)


def _child(read_end: int, write_end: int, source: str, contexts: list[dict[str, Any]], wheres: list[str], name: str,
           path: str | None) -> None:
    """The forked child: set the limits, compile (answer ``C``), send ``T<text>`` or
    ``E<kind><message>`` per context (kind ``M`` for memory, ``-`` otherwise), never return."""
    status = 0
    try:
        os.close(read_end)
        _limit_memory()
        _limit_cpu(len(contexts))
        try:
            with cpu_limit(limits.TEMPLATE_CPU_SECONDS):
                template = compile_template(source, name, path=path)
        except InputError as err:
            _send(write_end, b"E" + _kind(err) + err.text.encode("utf-8", "replace"))
            return
        _send(write_end, b"C")
        for context, where in zip(contexts, wheres):
            _soft_cpu()
            try:
                frame = b"T" + render_here(template, context, where, path=path).encode("utf-8", "surrogatepass")
            except InputError as err:
                frame = b"E" + _kind(err) + err.text.encode("utf-8", "replace")
            _send(write_end, frame)
            if frame[:1] == b"E":
                break
    except MemoryError:  # raised where no answer could be built; the exit status says it
        status = _OUT_OF_MEMORY
    except BaseException:  # noqa: BLE001 - the parent reports a child that stops early
        status = 1
    finally:
        os._exit(status)


def _kind(err: InputError) -> bytes:
    return b"M" if "of memory" in err.message else b"-"


def _send(fd: int, frame: bytes) -> None:
    data = memoryview(len(frame).to_bytes(8, "little") + frame)
    while data:
        data = data[os.write(fd, data):]


def _kill(pid: int) -> None:
    """End the child (it may still run: a deadline, Ctrl-C, an error here) and reap it."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    while True:
        try:
            os.waitpid(pid, 0)
            return
        except InterruptedError:  # pragma: no cover - PEP 475 retries; kept for other signals
            continue
        except ChildProcessError:
            return


def _read_exactly(fd: int, size: int, deadline: float) -> bytes:
    """Up to ``size`` bytes from ``fd``; fewer at end of file or once ``deadline`` passes."""
    chunks: list[bytes] = []
    left = size
    while left:
        wait = deadline - time.monotonic()
        if wait <= 0 or not select.select([fd], [], [], wait)[0]:
            break
        chunk = os.read(fd, min(1 << 20, left))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _address_space_room() -> int | None:
    """The room RLIMIT_AS's hard limit leaves above this process's address space; ``None`` without
    a limit (what the child's own limit is clamped to)."""
    import resource

    hard = resource.getrlimit(resource.RLIMIT_AS)[1]
    if hard == resource.RLIM_INFINITY:
        return None
    now = _vm_size()
    return max(hard - now, 0) if now is not None else None


def _vm_size() -> int | None:
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def _limit_memory() -> None:
    """In the child: its address space may grow by ``TEMPLATE_MEMORY_BYTES`` at most, and never
    past the hard limit it has (which cannot be raised: asking for it would fail)."""
    import resource

    now = _vm_size()
    if now is None:
        return
    _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = now + limits.TEMPLATE_MEMORY_BYTES
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))


def _cpu_used() -> float:
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _limit_cpu(renderings: int) -> None:
    """In the child, once: ``SIGXCPU`` back to its default (it kills), and a hard CPU limit over
    the compile and every rendering, one second past their timers each, at which the kernel kills
    the child (SIGKILL) even if the signal is ignored or blocked."""
    import resource

    signal.signal(signal.SIGXCPU, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGXCPU})
    budget = math.ceil(_cpu_used() + (renderings + 1) * (limits.TEMPLATE_CPU_SECONDS + 1)) + 1
    _soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
    if hard != resource.RLIM_INFINITY:
        budget = min(budget, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (min(_soft_for(budget), budget), budget))


def _soft_for(hard: int) -> int:
    return min(math.ceil(_cpu_used() + limits.TEMPLATE_CPU_SECONDS) + 1, hard)


def _soft_cpu() -> None:
    """In the child, before each rendering: the kernel signals it (SIGXCPU) a second past the
    timer's limit, in case one C call never lets the timer's signal run."""
    import resource

    hard = resource.getrlimit(resource.RLIMIT_CPU)[1]
    resource.setrlimit(resource.RLIMIT_CPU, (_soft_for(hard), hard))


__all__ = ["render_all"]
