"""benchmarks/gpu_check.py without a GPU: it says so and exits 0 (the CUDA checks themselves run
only where a device is lent; their output is recorded in benchmarks/README.md)."""

from __future__ import annotations

import pytest

import os
import subprocess
import sys

from conftest import ROOT


@pytest.mark.slow
def test_gpu_check_without_a_gpu_says_so_and_exits_0() -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py")], capture_output=True, text=True,
                          env={**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(ROOT)}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("gpu_check: no CUDA GPU here") and "nothing checked" in proc.stdout
    assert len(" ".join([sys.executable, "benchmarks/gpu_check.py"])) < 2000  # the command to run it


def test_gpu_check_ends_in_one_verdict_line_and_covers_both_layouts_and_the_self_check() -> None:
    """What the first lent GPU answers in one call: the last line is the verdict, naming what failed."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "benchmarks" / "gpu_check.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    table = mod.Table()
    assert table.verdict(3) == "gpu_check: FAIL (no claim was checked, 3 s)"
    table.add("tiny", "graphed = eager", "96/96", True)
    table.add("tiny-af", "self-check: graphed = eager within rounding", "agree over 3 steps", True)
    assert table.verdict(61.4) == "gpu_check: PASS (2 claims, 61 s)"
    table.add("0.6b", "smoke-run native", "exit 2", False)
    assert table.verdict(600) == "gpu_check: FAIL (1 of 3 claims, 600 s): 0.6b: smoke-run native"
    source = (ROOT / "benchmarks" / "gpu_check.py").read_text()
    assert '"draft-anchor-first"' in source and "self_check_claims(" in source and "--budget" in source
