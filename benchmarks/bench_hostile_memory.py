#!/usr/bin/env python3
"""Peak memory of `dflash-ckpt inspect` and `normalize` on hostile inputs just under the size caps.

    python benchmarks/bench_hostile_memory.py

Issue 10 measured 1.4 GB for a 63 MB config and a 90 MB header of 900k tensors. This builds such
inputs (and others shaped to cost the most per byte) in a temporary folder, runs each command in
its own process, and reads the child's peak RSS (``resource.getrusage(RUSAGE_CHILDREN)`` after
each run, one process per run so the maxima do not mix). It prints the peak, the peak above the
baseline (the same command on a clean small draft), the largest input file, and their ratio. The
claims (README, Limits): above the baseline, inspect's peak is at most 3x the largest input file
read plus 64 MiB; normalize's at most 15x the config's size plus 128 MiB.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "fixtures"))
sys.path.insert(0, str(ROOT))

import make_fixtures  # noqa: E402

from dflash_ckpt import limits  # noqa: E402

MiB = 1 << 20


def peak_rss(args: list[str]) -> tuple[int, int]:
    """(exit code, peak RSS in bytes) of ``python -m dflash_ckpt ARGS`` in a fresh process."""
    code = (
        "import resource, subprocess, sys; "
        "p = subprocess.run([sys.executable, '-m', 'dflash_ckpt', *sys.argv[1:]], "
        "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); "
        "print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, check=True)
    rc, kib = out.stdout.split()
    return int(rc), int(kib) * 1024


def header_file(path: Path, header: bytes, data_len: int) -> None:
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(header)) + header)
        fh.truncate(8 + len(header) + data_len)


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="dflash-mem-"))
    try:
        base = tmp / "fixtures"
        make_fixtures.build_all(base)
        clean = base / "mutants/base"
        cases: list[tuple[str, list[str], Path]] = []

        def draft(name: str) -> Path:
            d = tmp / name
            shutil.copytree(clean, d)
            return d

        # 1. a 90 MB header with 900k tiny tensors (the input)
        d = draft("header-900k")
        n = 900_000
        entries = ",".join(f'"t{i:07d}":{{"dtype":"BF16","shape":[1],"data_offsets":[{2 * i},{2 * i + 2}]}}' for i in range(n))
        text = ("{" + entries + "}").encode()
        text += b" " * (90 * MiB - len(text)) if len(text) < 90 * MiB else b""
        header_file(d / "model.safetensors", text, 2 * n)
        cases.append(("header: 900k tensors, 90 MiB", ["inspect", str(d), "-q"], d / "model.safetensors"))

        # 1b. as many tensors as a draft may have, padded to 90 MB with spaces
        d = draft("header-16k")
        n = limits.MAX_TENSORS
        entries = ",".join(f'"t{i:07d}":{{"dtype":"BF16","shape":[1],"data_offsets":[{2 * i},{2 * i + 2}]}}' for i in range(n))
        text = ("{" + entries + "}").encode()
        text += b" " * (90 * MiB - len(text))
        header_file(d / "model.safetensors", text, 2 * n)
        cases.append((f"header: {n:,} tensors, padded to 90 MiB", ["inspect", str(d), "-q"], d / "model.safetensors"))

        # 2. a 95 MB header: one tensor whose name is the whole header
        d = draft("header-long-name")
        name = "x" * (95 * MiB)
        header_file(d / "model.safetensors", json.dumps({name: {"dtype": "BF16", "shape": [1], "data_offsets": [0, 2]}}).encode(), 2)
        cases.append(("header: one 95 MiB name", ["inspect", str(d), "-q"], d / "model.safetensors"))

        # 3. a 90 MB header of metadata values (just under the item cap)
        d = draft("header-metadata")
        per = (90 * MiB) // (limits.MAX_HEADER_ITEMS - 10)
        meta = {f"k{i}": "v" * max(1, per - 12) for i in range(limits.MAX_HEADER_ITEMS - 10)}
        header_file(d / "model.safetensors", json.dumps({"__metadata__": meta, "fc.weight": {"dtype": "BF16", "shape": [1], "data_offsets": [0, 2]}}, separators=(",", ":")).encode(), 2)
        cases.append(("header: 128k metadata strings, 90 MiB", ["inspect", str(d), "-q"], d / "model.safetensors"))

        # 4. a 63 MB config (the issue's), now over the config cap: refused unread
        d = draft("config-63mb")
        cfg = json.loads((clean / "config.json").read_text())
        cfg["padding"] = "x" * (63 * MiB)
        (d / "config.json").write_text(json.dumps(cfg))
        cases.append(("config: 63 MiB (over the cap)", ["inspect", str(d), "-q"], d / "config.json"))

        # 5. a config just under the cap with the most values it may hold (many small keys)
        d = draft("config-keys")
        cfg = json.loads((clean / "config.json").read_text())
        cfg["junk"] = {f"k{i}": i for i in range(limits.MAX_JSON_ITEMS - 200)}
        (d / "config.json").write_text(json.dumps(cfg, separators=(",", ":")))
        cases.append(("config: 200k keys", ["inspect", str(d), "-q"], d / "config.json"))

        # 6. the same config through normalize (ConfigText keeps spans of every top-level member)
        out = tmp / "out-keys"
        cases.append(("normalize: config with 200k keys", ["normalize", str(d), str(out), "-q"], d / "config.json"))

        # 7. a 16 MB config that is one long list of floats
        d = draft("config-floats")
        cfg = json.loads((clean / "config.json").read_text())
        cfg["junk"] = [0.5] * (limits.MAX_JSON_ITEMS - 200)
        raw = json.dumps(cfg, separators=(",", ":"))
        (d / "config.json").write_text(raw)
        cases.append(("config: 200k floats", ["inspect", str(d), "-q"], d / "config.json"))

        # 8. a config just under the size cap, of long strings
        d = draft("config-strings")
        cfg = json.loads((clean / "config.json").read_text())
        cfg["notes"] = ["n" * (1 << 20)] * 15
        (d / "config.json").write_text(json.dumps(cfg))
        cases.append(("config: 15 MiB of strings", ["inspect", str(d), "-q"], d / "config.json"))
        cases.append(("normalize: config of 15 MiB of strings", ["normalize", str(d), str(tmp / "out-strings"), "-q"], d / "config.json"))

        _, baseline = peak_rss(["inspect", str(clean), "-q"])
        print(f"baseline: inspect of a clean small draft, peak RSS {baseline / MiB:.1f} MiB")
        print(f"{'input':40} {'file MiB':>9} {'exit':>4} {'peak MiB':>9} {'above base':>10} {'x file':>7}")
        for label, args, path in cases:
            rc, peak = peak_rss(args)
            size = path.stat().st_size
            above = max(0, peak - baseline)
            print(f"{label:40} {size / MiB:9.1f} {rc:4d} {peak / MiB:9.1f} {above / MiB:10.1f} {above / size:7.2f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
