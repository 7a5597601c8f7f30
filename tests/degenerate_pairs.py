"""Hostile copies of the tiny pair built at test time (issue 32): weights zeroed, set to one constant,
or with one tensor changed, the rest of each folder copied as is."""

from __future__ import annotations

import shutil
import struct
from pathlib import Path
from typing import Callable

import torch
from safetensors.torch import load_file, save_file

TINY = Path(__file__).resolve().parents[1] / "fixtures" / "tiny-pair"


def zeroed(src: Path, dst: Path) -> Path:
    """``src`` copied with every safetensors data byte zero (a preallocated, never-filled shard):
    headers untouched, so every header check passes."""
    shutil.copytree(src, dst)
    for f in dst.glob("*.safetensors"):
        raw = f.read_bytes()
        (n,) = struct.unpack("<Q", raw[:8])
        f.write_bytes(raw[:8 + n] + bytes(len(raw) - 8 - n))
    return dst


def rewritten(src: Path, dst: Path, change: Callable[[str, torch.Tensor], torch.Tensor | None]) -> Path:
    """``src`` copied with each tensor replaced by ``change(name, tensor)`` (None keeps it)."""
    shutil.copytree(src, dst)
    for f in dst.glob("*.safetensors"):
        tensors = load_file(str(f))
        out = {}
        for name, t in tensors.items():
            new = change(name, t)
            out[name] = (t if new is None else new).contiguous()
        save_file(out, str(f), metadata={"format": "pt"})
    return dst


def constant(value: float) -> Callable[[str, torch.Tensor], torch.Tensor]:
    """Every tensor filled with ``value``."""
    return lambda _name, t: torch.full_like(t, value)


def only(name: str, fill: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[str, torch.Tensor], torch.Tensor | None]:
    """The tensor named ``name`` replaced by ``fill(tensor)``, the others kept."""
    return lambda n, t: fill(t) if n == name else None
