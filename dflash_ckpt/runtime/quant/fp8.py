"""transformers' fine-grained FP8 (``quant_method: fp8``): e4m3 weights times ``weight_scale_inv``.

The official ``-FP8`` releases (DeepSeek-V3 style, Qwen3-*-FP8) store ``weight`` as e4m3 and one
float32 scale per ``weight_block_size`` block (the last blocks may be partial), or one per tensor
without a block size. Despite its name ``weight_scale_inv`` multiplies: w = e4m3 * scale
(transformers ``integrations/finegrained_fp8.py`` ``_dequantize_fp8_weight``).
"""

from __future__ import annotations

import torch

from dflash_ckpt.draftspec.quant_scheme import QuantScheme


def scale_blocks(weight: torch.Tensor, scale: torch.Tensor, block: tuple[int, int] | None) -> torch.Tensor:
    """``weight`` (float32 ``[out, in]``) times its scale grid: one value per ``block`` (partial
    blocks at the edges), or a single value."""
    scale = scale.to(torch.float32)
    if block is None or scale.numel() == 1:
        return weight * scale.reshape(())
    rows, cols = weight.shape
    full = scale.repeat_interleave(block[0], dim=0)[:rows].repeat_interleave(block[1], dim=1)[:, :cols]
    return weight * full


def dequantize(scheme: QuantScheme, parts: dict[str, torch.Tensor], shape: tuple[int, int]) -> torch.Tensor:
    return scale_blocks(parts["weight"].to(torch.float32), parts["scale"], scheme.block)
