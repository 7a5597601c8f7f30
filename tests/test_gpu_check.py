"""benchmarks/gpu_check.py without a GPU: it says so and exits 0 (the CUDA checks themselves run
only where a device is lent; their output is recorded in benchmarks/README.md)."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import ROOT


def test_gpu_check_without_a_gpu_says_so_and_exits_0() -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py")], capture_output=True, text=True,
                          env={**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(ROOT)}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("gpu_check: no CUDA GPU here") and "nothing checked" in proc.stdout
    assert len(" ".join([sys.executable, "benchmarks/gpu_check.py"])) < 2000  # the command to run it
