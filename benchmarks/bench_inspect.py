#!/usr/bin/env python3
"""How much `dflash-ckpt inspect` costs on a published-size draft: time, memory, bytes read.

    python benchmarks/bench_inspect.py [--repeat 21]

It builds the fixtures (sparse safetensors with real headers: a Qwen3.6-27B draft is 3.2 GiB on
paper and a few KiB on disk) into a temporary folder, then measures, interleaving the commands so
that machine noise hits all of them alike:

- wall time of `python -c "import typer, rich"` (the floor any typer+rich CLI pays) against
  `python -m dflash_ckpt inspect DRAFT --target TARGET`, human and --json output; the claim is
  inspect <= 2x the floor;
- peak RSS of inspect (claim: under 80 MiB) and that torch was never imported;
- bytes read from the checkpoint, for the same draft in 1 file and in 16 shards: the counter of
  the tool's own reads, and the process's `rchar` from /proc (every byte it read, Python's own
  modules included) so the figure does not rest on the tool's word alone.

The package is byte-compiled first, as `pip install` does: this machine sets
PYTHONDONTWRITEBYTECODE, and without .pyc files every run would also time the compiler.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "fixtures"))

import make_fixtures  # noqa: E402

DRAFT = "Qwen3.6-27B-DFlash"
TARGET = "Qwen3.6-27B"

MEASURE_READS = """
import contextlib, io, json, sys
from dflash_ckpt.cli import run
buf = io.StringIO()
with contextlib.redirect_stdout(buf):
    code = run(sys.argv[1:])
io_stats = dict(line.split(": ") for line in open("/proc/self/io").read().splitlines())
print(json.dumps({"code": code, "rchar": int(io_stats["rchar"]),
                  "bytes_read": json.loads(buf.getvalue())["results"][0]["bytes_read"],
                  "torch": "torch" in sys.modules}))
"""


PHASES = """
import contextlib, io, json, sys, time
t0 = time.perf_counter()
from dflash_ckpt.cli import run
t1 = time.perf_counter()
with contextlib.redirect_stdout(io.StringIO()):
    run(sys.argv[1:])
print(json.dumps({"import_cli": t1 - t0, "command": time.perf_counter() - t1}))
"""


def timed(cmd: list[str]) -> tuple[float, int]:
    """Wall seconds and peak RSS (KiB) of one run of ``cmd``."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) not in (0, 1):
        raise SystemExit(f"{' '.join(cmd)} failed")
    return elapsed, usage.ru_maxrss


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=21)
    args = parser.parse_args()
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "dflash_ckpt")], check=True)
    with tempfile.TemporaryDirectory() as tmp:
        out = make_fixtures.build_all(Path(tmp) / "build")
        single = out / "drafts" / DRAFT
        sharded = out / "drafts" / f"{DRAFT}-sharded"
        target = out / "targets" / TARGET
        py = sys.executable
        cmds = {
            "import typer, rich": [py, "-c", "import typer, rich"],
            "inspect (report)": [py, "-m", "dflash_ckpt", "inspect", str(sharded), "--target", str(target)],
            "inspect --json": [py, "-m", "dflash_ckpt", "inspect", str(sharded), "--target", str(target), "--json"],
        }
        times: dict[str, list[float]] = {k: [] for k in cmds}
        rss: dict[str, int] = {k: 0 for k in cmds}
        for _ in range(args.repeat):
            for name, cmd in cmds.items():
                t, r = timed(cmd)
                times[name].append(t)
                rss[name] = max(rss[name], r)
        floor = statistics.median(times["import typer, rich"])
        print(f"draft: {DRAFT}, 16 shards, {sum(p.stat().st_size for p in sharded.glob('*.safetensors')) / 2**30:.2f} GiB apparent")
        print(f"{'command':<22}{'median ms':>10}{'min ms':>9}{'x floor':>9}{'peak RSS MiB':>13}")
        for name in cmds:
            med = statistics.median(times[name])
            print(f"{name:<22}{med * 1e3:>10.1f}{min(times[name]) * 1e3:>9.1f}{med / floor:>9.2f}{rss[name] / 1024:>13.1f}")

        # Where inspect --json's time goes past the interpreter: importing the CLI (typer and the
        # commands' registration) and the command itself (its lazy imports, typer turning the
        # command's signature into click options, reading and checking the draft).
        phases: dict[str, list[float]] = {"import_cli": [], "command": []}
        for _ in range(args.repeat):
            res = subprocess.run([py, "-c", PHASES, *cmds["inspect --json"][3:]], capture_output=True, text=True, check=True)
            for key, value in json.loads(res.stdout).items():
                phases[key].append(value)
        for key, label in (("import_cli", "import dflash_ckpt.cli"), ("command", "inspect --json, in process")):
            print(f"{label:<28}{statistics.median(phases[key]) * 1e3:>10.1f}{min(phases[key]) * 1e3:>9.1f} ms (median, min)")

        print()
        print(f"{'layout':<10}{'apparent bytes':>16}{'headers+jsons':>14}{'tool read':>11}{'rchar':>11}")
        rchars = {}
        for name, folder in (("1 file", single), ("16 shards", sharded)):
            res = subprocess.run([py, "-c", MEASURE_READS, "inspect", str(folder), "--target", str(target), "--json"],
                                 capture_output=True, text=True, check=True)
            doc = json.loads(res.stdout)
            assert not doc["torch"], "inspect imported torch"
            shards = list(folder.glob("*.safetensors"))
            headers = sum(8 + int.from_bytes(p.open("rb").read(8), "little") for p in shards)
            small = sum(p.stat().st_size for p in [*folder.glob("*.json"), target / "config.json"])
            apparent = sum(p.stat().st_size for p in shards)
            rchars[name] = doc["rchar"]
            print(f"{name:<10}{apparent:>16,}{headers + small:>14,}{doc['bytes_read']:>11,}{doc['rchar']:>11,}")
        print(f"rchar difference 16 shards - 1 file: {rchars['16 shards'] - rchars['1 file']:,} bytes "
              "(15 more headers and the index; the weights are never read)")
        print("torch imported by inspect: no")


if __name__ == "__main__":
    main()
