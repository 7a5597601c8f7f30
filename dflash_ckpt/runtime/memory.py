"""Will the weights fit? Bytes a checkpoint takes once loaded, and the device's free memory.

``smoke-run`` asks this before loading anything, so a target too big for the device is refused
in one line (exit 2) with both numbers instead of dying in the middle of loading. The count is
read from the safetensors headers (``sources.weights``); no tensor is opened.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Mapping

import torch

from dflash_ckpt.errors import UsageError

#: Tensor-name fragments of vision and audio towers and their projectors: not loaded, not counted.
_VISION = re.compile(r"(^|\.)(visual|vision_tower|vision_model|vision|mm_projector|multi_modal_projector|"
                     r"embed_vision|audio_tower|embed_audio|vit)\.")
_ST_BYTES = {"F64": 8, "F32": 4, "BF16": 2, "F16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
             "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}


def needed_bytes(tensors: Mapping[str, Any], dtype: torch.dtype) -> int:
    """Bytes the text model's weights take in ``dtype`` (MXFP4 blocks count dequantized).

    ``tensors`` maps names to objects with ``dtype`` (safetensors code) and ``numel``. Float
    tensors are cast to ``dtype``; an MXFP4 ``*_blocks`` byte holds two values; its ``*_scales``
    go away once dequantized; vision towers are not loaded.
    """
    size = torch.empty((), dtype=dtype).element_size()
    total = 0
    for name, info in tensors.items():
        if _VISION.search(name):
            continue
        if name.endswith("_scales") and info.dtype == "U8":
            continue
        if name.endswith("_blocks") and info.dtype == "U8":
            total += 2 * info.numel * size
        elif info.dtype in ("F32", "BF16", "F16", "F64"):
            total += info.numel * size
        else:
            total += info.numel * _ST_BYTES.get(info.dtype, 4)
    return total


def available_bytes(device: torch.device) -> int:
    """Free memory on ``device``: CUDA's free bytes, or the host's MemAvailable."""
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free)
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def check_fits(needed: int, device: torch.device, where: str, free: int | None = None) -> None:
    """Refuse (exit 2) before loading a pair whose weights do not fit the device's free memory."""
    free = available_bytes(device) if free is None else free
    if needed > free:
        raise UsageError(f"{where}: the target and draft need {needed / 2**30:.2f} GiB ({needed} bytes) of weights on "
                         f"{device} but only {free / 2**30:.2f} GiB ({free} bytes) are free; use a device with "
                         "more memory, or --target-dtype bfloat16 for a float32 target")
