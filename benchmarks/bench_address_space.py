#!/usr/bin/env python3
"""smoke-run under an address-space limit (issue 32): what each limit ends in.

    python benchmarks/bench_address_space.py [MiB ...]

Runs the tiny pair under ``RLIMIT_AS`` of each size (what ``prlimit --as`` and ``ulimit -v``
set; soft and hard alike) in a fresh process, and prints the exit code, whether a traceback
appeared, the peak address space the imports alone reach (``VmPeak`` after importing smoke-run's
modules, no limit) and the floor ``runtime/address_space.py`` computes. Claim (README, Limits):
every limit ends in exit 0 or in one DF407 line with exit 2; never a traceback, an abort or a
signal; the floor sits below the smallest limit the tiny pair passes with, give or take its margin.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAIR = ROOT / "fixtures" / "tiny-pair"
MiB = 1 << 20
DEFAULT = (300, 400, 500, 600, 700, 750, 800, 900, 1024)

PEAK = """
import dflash_ckpt.cli, dflash_ckpt.commands.options
from dflash_ckpt.runtime.address_space import import_floor
floor = import_floor()
import dflash_ckpt.run.smoke, dflash_ckpt.run.probe
peak = next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmPeak:"))
print(floor, peak)
"""


def run(mib: int) -> tuple[int, bool, str]:
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (mib * MiB, mib * MiB))

    proc = subprocess.run([sys.executable, "-m", "dflash_ckpt", "smoke-run", str(PAIR / "draft"), "--target",
                           str(PAIR / "target"), "-n", "8", "--quiet"], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, preexec_fn=limit)
    text = (proc.stderr.strip().splitlines() or proc.stdout.strip().splitlines() or [""])[-1]
    return proc.returncode, "Traceback" in proc.stderr, text


def main() -> None:
    sizes = [int(a) for a in sys.argv[1:]] or list(DEFAULT)
    floor, peak = (int(v) for v in subprocess.run([sys.executable, "-c", PEAK], capture_output=True, text=True,
                                                  env={**os.environ, "PYTHONPATH": str(ROOT)}).stdout.split())
    print(f"imports peak {peak / MiB:.0f} MiB of address space; floor {floor / MiB:.0f} MiB; {os.cpu_count()} CPUs")
    print(f"{'RLIMIT_AS':>10} {'exit':>5} {'traceback':>9}  last line")
    for mib in sizes:
        code, tb, line = run(mib)
        shown = (line if "DF407" not in line else line[line.index("DF407"):]) or ("(passed)" if code == 0 else "")
        print(f"{mib:>6} MiB {code:>5} {str(tb):>9}  {shown[:110]}")


if __name__ == "__main__":
    main()
