#!/usr/bin/env python3
"""How fast ``dflash-ckpt inspect`` starts, against the floor any typer+rich CLI pays.

    python benchmarks/startup.py [--repeat 15]

Runs ``python -m dflash_ckpt inspect fixtures/tiny-pair/draft -q`` and ``python -c "import typer,
rich"`` alternately (so machine noise hits both alike), ``--repeat`` times each, and prints the
median wall time of each and their ratio (the claim: at most 1.3x). The package is byte-compiled
first, as ``pip install`` does, so no run times the compiler. Exit 1 when the ratio is over
``--limit`` or torch was imported by inspect.
"""

from __future__ import annotations

import argparse
import compileall
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DRAFT = ROOT / "fixtures" / "tiny-pair" / "draft"


def timed(argv: list[str], env: dict[str, str]) -> float:
    """Seconds one run of ``argv`` takes, start to exit (its output discarded; a failure stops)."""
    start = time.perf_counter()
    subprocess.run(argv, env=env, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--limit", type=float, default=1.3)
    args = parser.parse_args()
    compileall.compile_dir(str(ROOT / "dflash_ckpt"), quiet=1)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(ROOT)
    inspect = [sys.executable, "-m", "dflash_ckpt", "inspect", str(DRAFT), "-q"]
    floor = [sys.executable, "-c", "import typer, rich"]
    check = [sys.executable, "-c", "import sys, dflash_ckpt.cli as c; c.run(['inspect', sys.argv[1], '-q']); "
             "assert 'torch' not in sys.modules, 'inspect imported torch'", str(DRAFT)]
    subprocess.run(check, env=env, cwd=ROOT, check=True)
    timed(inspect, env), timed(floor, env)  # warm the file cache
    ours, theirs = [], []
    for _ in range(args.repeat):
        ours.append(timed(inspect, env))
        theirs.append(timed(floor, env))
    a, b = statistics.median(ours), statistics.median(theirs)
    print(f"inspect {a * 1000:.0f} ms, import typer, rich {b * 1000:.0f} ms (medians of {args.repeat}): {a / b:.2f}x")
    return 0 if a / b <= args.limit else 1


if __name__ == "__main__":
    sys.exit(main())
