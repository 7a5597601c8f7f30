"""Dequantize a quantized target's linear layer on load, checked.

The format's record (``draftspec/quant/``) turns one layer's stored tensors into its ``[out, in]``
float32 weight; here its result is checked (shape, finite values) before the loader
(``runtime/loading.py``) casts it into its place in the fused buffers. One layer is dequantized
at a time, so the peak is the dequantized model plus one layer's temporaries. torch is imported
here, and this module only by the run path.
"""

from __future__ import annotations

from typing import Callable

import torch

from dflash_ckpt.draftspec.quant import QuantScheme
from dflash_ckpt.errors import InputError


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
    weight = scheme.record.dequantize(scheme, parts, shape)
    if tuple(weight.shape) != tuple(shape):
        raise InputError(f"layer '{base}' dequantizes to {list(weight.shape)} but the model config "
                         f"implies {list(shape)}; the quantization_config or the tensors are not this model's",
                         code="DF181", path=scheme.where)
    if not torch.isfinite(weight).all():
        raise InputError(f"layer '{base}' dequantizes to non-finite values (its scales hold inf/NaN); "
                         "the quantized files are corrupt, re-download or re-quantize them", code="DF181",
                         path=scheme.where)
    return weight


__all__ = ["dequantize_layer"]
