#!/usr/bin/env python3
"""Peak memory of loading a quantized target of the Qwen3-0.6B shape (issue 30's bound).

    python benchmarks/bench_quant_memory.py [--format gptq|w4a16|both] [--keep DIR]

Writes a random quantized target (``fixtures/quant_random.py``), then loads it with the native
runtime in a fresh child process (dequantized into its run dtype, layer by layer) and prints the
child's peak RSS above its own baseline (VmHWM after ``import torch`` and the package) against the
dequantized weights: the bound is 1.3x the weights + 1 GiB (the real-size bound of
benchmarks/README.md). Exit 1 when the bound fails.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GIB = 2 ** 30

CHILD = r"""
import json, sys, time
from pathlib import Path
import torch
from dflash_ckpt.draftspec.quant import read_scheme
from dflash_ckpt.draftspec.target_settings import TargetSettings
from dflash_ckpt.runtime.loading import load_target, parse_dtype

def status(key):
    return next(int(l.split()[1]) * 1024 for l in open('/proc/self/status') if l.startswith(key + ':'))

folder = Path(sys.argv[1])
cfg = json.loads((folder / 'config.json').read_text())
args = TargetSettings.from_config(cfg, 'config.json')
dtype = parse_dtype(args.dtype or 'bfloat16', 'dtype')
base = status('VmRSS')
t0 = time.perf_counter()
model = load_target(folder, args, dtype=dtype, device=torch.device('cpu'), scheme=read_scheme(cfg, 'config.json'))
load_s = time.perf_counter() - t0
weights = sum(p.numel() * p.element_size() for p in {id(p): p for p in model.parameters()}.values())
print(json.dumps({'baseline': base, 'peak': status('VmHWM'), 'held': status('VmRSS'), 'weights': weights,
                  'load_s': load_s, 'dtype': str(dtype).removeprefix('torch.')}))
"""


def measure(folder: Path) -> dict[str, float]:
    """Load ``folder`` in a child; its peak and held RSS above its baseline, and the bound."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-c", CHILD, str(folder)], capture_output=True, text=True, env=env, timeout=900)
    if proc.returncode:
        raise RuntimeError(proc.stderr[-2000:])
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    got["above"] = got["peak"] - got["baseline"]
    got["bound"] = 1.3 * got["weights"] + GIB
    return got


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--format", choices=("gptq", "w4a16", "both"), default="both")
    ap.add_argument("--keep", type=Path, help="write the targets here (kept) instead of a temporary folder")
    a = ap.parse_args()
    sys.path.insert(0, str(ROOT / "fixtures"))
    from quant_random import write

    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for fmt in (("gptq", "w4a16") if a.format == "both" else (a.format,)):
            folder = write((a.keep or Path(tmp)) / f"qwen3-0.6b-{fmt}", fmt)
            files = sum(p.stat().st_size for p in folder.glob("*.safetensors"))
            m = measure(folder)
            fits = m["above"] <= m["bound"]
            ok &= fits
            print(f"0.6b {fmt}: files {files / GIB:.2f} GiB, dequantized weights {m['weights'] / GIB:.2f} GiB ({m['dtype']}), "
                  f"peak {m['above'] / GIB:.2f} GiB above baseline = {m['above'] / m['weights']:.2f}x the weights, "
                  f"held {(m['held'] - m['baseline']) / m['weights']:.2f}x, bound 1.3x + 1 GiB = {m['bound'] / GIB:.2f} GiB: "
                  f"{'within' if fits else 'OVER'}; load {m['load_s']:.1f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
