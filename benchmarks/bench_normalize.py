#!/usr/bin/env python3
"""What `dflash-ckpt normalize DRAFT OUT` costs on a published-size draft, next to a full copy.

    python benchmarks/bench_normalize.py [--draft Qwen3.6-27B-DFlash] [--shards 1] [--repeat 7] [--copy-repeat 1]

It builds the draft (its published config, safetensors with real headers and sparse data: several
GiB on paper, a few KiB on disk) in a temporary folder on the filesystem of --where, then measures,
interleaving runs so that machine noise hits them alike:

- `python -c "import typer, rich"`: the floor any typer+rich CLI pays to start;
- `python -m dflash_ckpt normalize DRAFT OUT` (weights hard-linked): wall time, and the disk it
  adds, counted as the allocated blocks of every file and folder in OUT that is not an inode of
  DRAFT (hard links add none), cross-checked with the filesystem's free-space counter;
- the same in-process (`dflash_ckpt.cli.run`), without the interpreter's start-up;
- `python -m dflash_ckpt normalize DRAFT OUT --copy`: a full copy of the weights (every byte
  written and fsynced, as a copy of real weights would be), time and disk added.

Claims checked at the end: the hard-link run completes in under a second and adds under 1 MiB.
The package is byte-compiled first, as `pip install` does.
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "fixtures"))

import make_fixtures  # noqa: E402

MiB = 1 << 20


def build_draft(folder: Path, name: str, shards: int) -> int:
    """The published draft ``name`` with sparse weights; returns the weights' apparent size."""
    raw = (make_fixtures.PUBLISHED / "configs" / f"{name}.json").read_bytes()
    make_fixtures.write_draft(folder, json.loads(raw), shards=shards)
    (folder / "config.json").write_bytes(raw)
    return sum(p.stat().st_size for p in folder.iterdir() if p.name.endswith(".safetensors"))


def disk_added(out: Path, draft: Path) -> int:
    """Allocated bytes under OUT that DRAFT does not already own (hard links count zero)."""
    draft_inodes = {os.stat(p).st_ino for p in draft.iterdir()}
    total = os.lstat(out).st_blocks * 512
    for root, dirs, files in os.walk(out):
        for name in dirs + files:
            st = os.lstat(os.path.join(root, name))
            if st.st_ino not in draft_inodes:
                total += st.st_blocks * 512
    return total


def free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def timed(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    dt = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"command failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr}")
    return dt


def run_in_process(args: list[str]) -> float:
    from dflash_ckpt.cli import run

    sink = io.StringIO()
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(sink):
        code = run(args)
    dt = time.perf_counter() - t0
    if code != 0:
        raise SystemExit(f"in-process normalize failed with {code}")
    return dt


def fmt_s(xs: list[float]) -> str:
    if len(xs) == 1:
        return f"{xs[0]:8.3f} s"
    return f"{statistics.median(xs):8.3f} s (min {min(xs):.3f}, max {max(xs):.3f}, n={len(xs)})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--draft", default="Qwen3.6-27B-DFlash", help="a name from fixtures/published/configs")
    ap.add_argument("--shards", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=7, help="hard-link runs")
    ap.add_argument("--copy-repeat", type=int, default=1, help="full-copy runs (each writes the whole draft)")
    ap.add_argument("--where", type=Path, default=Path(tempfile.gettempdir()), help="folder to work in")
    args = ap.parse_args()

    compileall.compile_dir(str(ROOT / "dflash_ckpt"), quiet=1)
    py = sys.executable
    work = Path(tempfile.mkdtemp(prefix="bench-normalize-", dir=args.where))
    try:
        draft = work / args.draft
        apparent = build_draft(draft, args.draft, args.shards)
        on_disk = sum(p.stat().st_blocks * 512 for p in draft.iterdir())
        need = apparent * 1.05 + 64 * MiB
        if args.copy_repeat and shutil.disk_usage(work).free < need:
            raise SystemExit(f"a full copy needs {need / 2**30:.1f} GiB free in {work}; pass --copy-repeat 0 or --where")
        print(f"draft {args.draft} ({args.shards} weight file(s)): {apparent / 2**30:.2f} GiB apparent, {on_disk / 1024:.0f} KiB on disk")

        floor, link_cli, link_inproc, copy_cli = [], [], [], []
        link_disk, link_free, copy_disk, copy_free = [], [], [], []
        n = 0
        for i in range(max(args.repeat, args.copy_repeat)):
            floor.append(timed([py, "-c", "import typer, rich"]))
            if i < args.repeat:
                out = work / f"out{n}"
                n += 1
                free0 = free_bytes(work)
                link_cli.append(timed([py, "-m", "dflash_ckpt", "normalize", str(draft), str(out), "-q"]))
                link_free.append(free0 - free_bytes(work))
                link_disk.append(disk_added(out, draft))
                shutil.rmtree(out)
                out = work / f"out{n}"
                n += 1
                link_inproc.append(run_in_process(["normalize", str(draft), str(out), "-q"]))
                shutil.rmtree(out)
            if i < args.copy_repeat:
                out = work / f"out{n}"
                n += 1
                free0 = free_bytes(work)
                copy_cli.append(timed([py, "-m", "dflash_ckpt", "normalize", str(draft), str(out), "--copy", "-q"]))
                copy_free.append(free0 - free_bytes(work))
                copy_disk.append(disk_added(out, draft))
                shutil.rmtree(out)

        print()
        print(f"{'python -c import typer, rich (floor)':44} {fmt_s(floor)}")
        print(f"{'normalize, hard links (CLI process)':44} {fmt_s(link_cli)}")
        print(f"{'normalize, hard links (in-process)':44} {fmt_s(link_inproc)}")
        if copy_cli:
            print(f"{'normalize --copy, full copy (CLI process)':44} {fmt_s(copy_cli)}")
        print()
        print(f"{'disk added, hard links':44} {max(link_disk) / 1024:9.1f} KiB   (free-space counter: {statistics.median(link_free) / 1024:.1f} KiB)")
        if copy_disk:
            print(f"{'disk added, full copy':44} {max(copy_disk) / MiB:9.1f} MiB   (free-space counter: {statistics.median(copy_free) / MiB:.1f} MiB)")
            print()
            t_link, t_copy = statistics.median(link_cli), statistics.median(copy_cli)
            print(f"full copy / hard links: time x{t_copy / t_link:.1f}, disk x{max(copy_disk) / max(max(link_disk), 1):.0f}")
            gibps = apparent / statistics.median(copy_cli) / 2**30
            print(f"full copy throughput: {gibps:.2f} GiB/s")

        ok_time = statistics.median(link_cli) < 1.0
        ok_disk = max(link_disk) < 1 * MiB
        print()
        print(f"claim: hard-link normalize under 1 s  -> {'PASS' if ok_time else 'FAIL'} ({statistics.median(link_cli):.3f} s median)")
        print(f"claim: hard-link normalize adds < 1 MiB -> {'PASS' if ok_disk else 'FAIL'} ({max(link_disk) / 1024:.1f} KiB worst)")
        return 0 if ok_time and ok_disk else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
