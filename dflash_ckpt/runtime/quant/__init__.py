"""Dequantize a quantized target's linear layers on load: one function per format, one registry.

``draftspec/quant_scheme.py`` reads the format from ``quantization_config`` and checks the headers
(pure); the functions here turn one layer's stored tensors into its ``[out, in]`` float32 weight,
which the loader (``runtime/loading.py``) casts into its place in the fused buffers. One layer is
dequantized at a time, so the peak is the dequantized model plus one layer's temporaries. torch
is imported here, and this package only by the run path.
"""

from __future__ import annotations

from typing import Callable

import torch

from dflash_ckpt.draftspec.quant_scheme import QuantScheme
from dflash_ckpt.errors import InputError
from dflash_ckpt.runtime.quant import awq, compressed, fp8, gptq

#: ``(scheme, tensors by role, (out, in)) -> float32 [out, in]``, by ``QuantScheme.method``.
DEQUANTIZERS: dict[str, Callable[[QuantScheme, dict[str, torch.Tensor], tuple[int, int]], torch.Tensor]] = {
    "fp8": fp8.dequantize,
    "awq": awq.dequantize,
    "gptq": gptq.dequantize,
    "compressed-tensors": compressed.dequantize,
}


def dequantize_layer(scheme: QuantScheme, base: str, read: Callable[[str], torch.Tensor],
                     shape: tuple[int, int]) -> torch.Tensor:
    """The float32 weight of quantized layer ``base``; ``read(name)`` gives a stored tensor.
    A result of another shape (a ``weight_shape`` tensor that contradicts the config) is DF181."""
    present = {role: name for role, name in scheme.components(base).items()}
    parts: dict[str, torch.Tensor] = {}
    for role, name in present.items():
        try:
            parts[role] = read(name)
        except KeyError:
            if role not in scheme.optional():
                raise
    weight = DEQUANTIZERS[scheme.method](scheme, parts, shape)
    if tuple(weight.shape) != tuple(shape):
        raise InputError(f"layer '{base}' dequantizes to {list(weight.shape)} but the model config "
                         f"implies {list(shape)}; the quantization_config or the tensors are not this model's",
                         code="DF181", path=scheme.where)
    if not torch.isfinite(weight).all():
        raise InputError(f"layer '{base}' dequantizes to non-finite values (its scales hold inf/NaN); "
                         "the quantized files are corrupt, re-download or re-quantize them", code="DF181",
                         path=scheme.where)
    return weight


__all__ = ["DEQUANTIZERS", "dequantize_layer"]
