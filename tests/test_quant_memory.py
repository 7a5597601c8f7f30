"""A quantized target's memory (issue 30): the pre-check counts it dequantized, and loading a
Qwen3-0.6B-shape quantized target peaks within 1.3x its dequantized weights + 1 GiB."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from dflash_ckpt.runtime.memory import needed_bytes
from dflash_ckpt.sources.local import LocalSource
from dflash_ckpt.sources.weights import load_inventory

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))


def _tensors(folder: Path) -> dict:
    return load_inventory(LocalSource(folder)).tensors


@pytest.mark.parametrize("variant", ["awq", "gptq", "w4a16", "fp8-block", "fp8-dynamic"])
def test_the_pre_check_counts_the_dequantized_size(variant: str) -> None:
    plain = needed_bytes(_tensors(ROOT / "fixtures/tiny-pair/target"), torch.bfloat16)
    assert needed_bytes(_tensors(ROOT / "fixtures/tiny-quant" / variant), torch.bfloat16) == plain


@pytest.mark.slow
def test_a_06b_quantized_target_loads_within_the_bound(tmp_path: Path) -> None:
    from bench_quant_memory import measure
    from quant_random import write

    m = measure(write(tmp_path / "q", "gptq"))
    assert m["weights"] > 1.1 * 2 ** 30  # the dequantized fp16 weights of the 0.6B shape
    assert m["above"] <= m["bound"], m  # measured 1.05x the weights
