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
    blocks at the edges), or a single value. The grid is gathered by each row's and column's
    block, so nothing larger than the weight is allocated whatever the block size (repeating
    each scale ``block`` times would make ``[out, 2**24]`` of a ``[1, 2**24]`` block)."""
    scale = scale.to(torch.float32)
    if block is None or scale.numel() == 1:
        return weight * scale.reshape(())
    rows, cols = weight.shape
    row_block = torch.div(torch.arange(rows), block[0], rounding_mode="floor")
    col_block = torch.div(torch.arange(cols), block[1], rounding_mode="floor")
    return weight * scale[row_block][:, col_block]


def dequantize(scheme: QuantScheme, parts: dict[str, torch.Tensor], shape: tuple[int, int]) -> torch.Tensor:
    return scale_blocks(parts["weight"].to(torch.float32), parts["scale"], scheme.block)
