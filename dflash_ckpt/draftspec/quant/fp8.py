"""transformers' fine-grained FP8 (``quant_method: fp8``): e4m3 weights times ``weight_scale_inv``.

The official ``-FP8`` releases (DeepSeek-V3 style, Qwen3-*-FP8) store ``weight`` F8_E4M3
``[out, in]`` and one float32 scale per ``weight_block_size [b0, b1]`` block,
``[ceil(out/b0), ceil(in/b1)]`` (the last blocks may be partial), or one per tensor without a
block size. Despite its name ``weight_scale_inv`` multiplies: w = e4m3 * scale (transformers
``integrations/finegrained_fp8.py`` ``_dequantize_fp8_weight``).
"""

from __future__ import annotations

from typing import Any, Mapping

from dflash_ckpt.draftspec.quant.base import QuantFormat, QuantScheme, bad, require_scaled_weight

SUPPORTED = "fp8 (e4m3, per-tensor or block scales)"


def parse(q: Mapping[str, Any], where: str) -> QuantScheme:
    fmt = q.get("fmt", "e4m3")
    if fmt != "e4m3":
        raise bad(where, "fmt", fmt, "fmt e4m3")
    notes = (f"activations not quantized (the config's activation_scheme is {q.get('activation_scheme', 'dynamic')})",)
    block = q.get("weight_block_size")
    if block is None:
        return QuantScheme("fp8", "fp8", 8, None, "tensor", kind="float", where=where, notes=notes, record=FORMAT)
    if not (isinstance(block, list) and len(block) == 2 and all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in block)):
        raise bad(where, "weight_block_size", block, "weight_block_size [rows, cols] of positive integers, or null")
    return QuantScheme("fp8", "fp8", 8, None, "block", block=(block[0], block[1]), kind="float", where=where, notes=notes, record=FORMAT)


def dequantize(scheme: QuantScheme, parts: dict[str, Any], shape: tuple[int, int]) -> Any:
    import torch

    from dflash_ckpt.draftspec.quant.packing import scale_blocks

    return scale_blocks(parts["weight"].to(torch.float32), parts["scale"], scheme.block)


FORMAT = QuantFormat("fp8", SUPPORTED, parse, components=lambda s: {"weight": "weight", "scale": "weight_scale_inv"},
                     stored=lambda s: "weight", dims=lambda s, rows, cols: (rows, cols), require_layer=require_scaled_weight,
                     dequantize=dequantize, block_key="weight_block_size")
