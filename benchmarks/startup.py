#!/usr/bin/env python3
"""How fast ``dflash-ckpt inspect`` starts, against the floor any typer+rich CLI pays.

    python benchmarks/startup.py [--repeat 15] [--limit 1.3] [--phases]

Runs ``python -m dflash_ckpt inspect fixtures/tiny-pair/draft`` three ways (the text report,
``-q`` and ``--json``) and ``python -c "import typer, rich"`` in turn, round after round (so
machine noise hits all four alike), ``--repeat`` rounds, and prints the median wall time of
each and each one's ratio to the floor (the claim: at most 1.3x, for each). The package is
byte-compiled first, as ``pip install`` does, so no run times the compiler. Exit 1 when a ratio
is over ``--limit`` or inspect imported torch. ``--phases`` adds where the text report's time
goes beyond ``-q``'s, measured inside one process: rich's modules imported, the report rendered.
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
#: What is timed: the floor first, then each way inspect prints (its extra arguments).
WAYS = {"text": [], "-q": ["-q"], "--json": ["--json"]}
#: ``--phases``: the text report in one process, each step's milliseconds (the CLI, the run and
#: its checks imported first, as ``-q`` has them; then what only the text report adds).
PHASES = """
import io, sys, time
from contextlib import redirect_stdout
import dflash_ckpt.cli
from dflash_ckpt.run.inspect import run_inspect
from dflash_ckpt.run.inspect_options import InspectOptions
marks = [("run", time.perf_counter())]
result = run_inspect(InspectOptions([sys.argv[1]], None)).results[0]
marks.append(("import rich.console", time.perf_counter()))
import rich.console
marks.append(("import rich.table", time.perf_counter()))
import rich.table
marks.append(("import the report's modules", time.perf_counter()))
from dflash_ckpt.console import make_console
from dflash_ckpt.commands.inspect_report import render_result
marks.append(("render (first)", time.perf_counter()))
with redirect_stdout(io.StringIO()):
    console = make_console()
    render_result(console, result)
    marks.append(("render (again)", time.perf_counter()))
    render_result(console, result)
marks.append(("", time.perf_counter()))
print(" ".join(f"{(b - a) * 1000:.2f}" for (_, a), (_, b) in zip(marks, marks[1:])))
print("|".join(name for name, _ in marks[:-1]))
"""


def timed(argv: list[str], env: dict[str, str]) -> float:
    """Seconds one run of ``argv`` takes, start to exit (its output discarded; a failure stops)."""
    start = time.perf_counter()
    subprocess.run(argv, env=env, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def phases(env: dict[str, str], repeat: int) -> None:
    """The text report's steps beyond ``-q``'s, the median of ``repeat`` fresh processes each."""
    runs = [subprocess.run([sys.executable, "-c", PHASES, str(DRAFT)], env=env, cwd=ROOT, check=True,
                           capture_output=True, text=True).stdout.splitlines() for _ in range(repeat)]
    names = runs[0][1].split("|")
    for i, name in enumerate(names):
        print(f"  {name}: {statistics.median(float(r[0].split()[i]) for r in runs):.1f} ms")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--limit", type=float, default=1.3)
    parser.add_argument("--phases", action="store_true", help="also time the text report's steps in one process")
    args = parser.parse_args()
    compileall.compile_dir(str(ROOT / "dflash_ckpt"), quiet=1)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(ROOT)
    commands = {"import typer, rich": [sys.executable, "-c", "import typer, rich"]}
    commands |= {way: [sys.executable, "-m", "dflash_ckpt", "inspect", str(DRAFT), *extra] for way, extra in WAYS.items()}
    for extra in WAYS.values():
        check = [sys.executable, "-c", "import io, sys, contextlib, dflash_ckpt.cli as c\nwith contextlib.redirect_stdout(io.StringIO()): "
                 "c.run(['inspect', *sys.argv[1:]])\nassert 'torch' not in sys.modules, 'inspect imported torch'", str(DRAFT), *extra]
        subprocess.run(check, env=env, cwd=ROOT, check=True)
    for argv in commands.values():  # warm the file cache
        timed(argv, env)
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(args.repeat):
        for name, argv in commands.items():
            times[name].append(timed(argv, env))
    floor = statistics.median(times["import typer, rich"])
    print(f"import typer, rich: {floor * 1000:.0f} ms (medians of {args.repeat}, interleaved)")
    over = []
    for way in WAYS:
        ours = statistics.median(times[way])
        print(f"inspect {way}: {ours * 1000:.0f} ms, {ours / floor:.2f}x")
        if ours / floor > args.limit:
            over.append(way)
    if args.phases:
        print("the text report in one process:")
        phases(env, args.repeat)
    if over:
        print(f"over {args.limit}x: {', '.join(over)}")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
