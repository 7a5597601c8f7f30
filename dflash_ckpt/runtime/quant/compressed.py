"""compressed-tensors (``quant_method: compressed-tensors``, llm-compressor's output).

- ``pack-quantized``: ``weight_packed`` ``[out, ceil(in*bits/32)]`` int32, values stored unsigned
  (signed value + 2^(bits-1)) lowest bits first (``pack_to_int32``); ``weight_shape`` the
  unpacked ``[out, in]``; ``weight_zero_point`` (asymmetric) packed the same way along dim 0;
  ``weight_g_idx`` with activation order;
- ``float-quantized``: ``weight`` e4m3 and ``weight_scale``;
- ``int-quantized`` (``naive-quantized``): ``weight`` int8 and ``weight_scale``.

Scales by strategy: ``tensor`` one value, ``channel`` ``[out, 1]``, ``group`` ``[out, in/g]``,
``block`` ``[ceil(out/b0), ceil(in/b1)]``. w = (q - zp) * scale, as its ``dequantize`` computes.
"""

from __future__ import annotations

import torch

from dflash_ckpt.draftspec.quant_scheme import QuantScheme
from dflash_ckpt.errors import InputError
from dflash_ckpt.runtime.quant.fp8 import scale_blocks
from dflash_ckpt.runtime.quant.packing import checked_groups, group_index, unpack_int32


def _columns(scheme: QuantScheme, t: torch.Tensor, in_features: int, g_idx: torch.Tensor | None) -> torch.Tensor:
    """A per-(row, group) tensor ``[out, groups]`` spread over the ``in_features`` columns
    (``weight_g_idx``, activation order, checked against the groups first)."""
    if scheme.strategy in ("tensor",) or t.numel() == 1:
        return t.reshape(1, 1).expand(1, in_features)
    if scheme.strategy == "channel":
        return t.reshape(-1, 1).expand(-1, in_features)
    g = group_index(in_features, scheme.group_size) if g_idx is None else g_idx
    return t[:, checked_groups(g, in_features, t.shape[1], scheme.where, "weight_g_idx")]


def _stored_shape(shape: torch.Tensor) -> list[int | float]:
    """``weight_shape``'s values as Python numbers (the header check admits integer dtypes only;
    a float that slipped through stays a float, so it never equals a dimension)."""
    values = shape.reshape(-1).tolist()
    return [int(v) if isinstance(v, int) or (isinstance(v, float) and v.is_integer()) else v for v in values]


def dequantize(scheme: QuantScheme, parts: dict[str, torch.Tensor], shape: tuple[int, int]) -> torch.Tensor:
    out_features, in_features = shape
    offset = 1 << (scheme.bits - 1)
    if scheme.format == "pack-quantized":
        stored = _stored_shape(parts["shape"])
        if stored != [out_features, in_features]:
            raise InputError(f"tensor 'weight_shape' of a quantized layer holds {stored} but the model "
                             f"config implies {[out_features, in_features]}; the files are not this model's",
                             code="DF181", path=scheme.where)
        q = unpack_int32(parts["packed"], scheme.bits, dim=1)[:, :in_features].to(torch.float32) - offset
    else:
        q = parts["weight"].to(torch.float32)
    if scheme.strategy == "block":
        if "zero" in parts:
            raise InputError("an asymmetric block scheme is not read; supported: symmetric block "
                             "scales", code="DF180", path=scheme.where)
        return scale_blocks(q, parts["scale"], scheme.block)
    g_idx = parts.get("g_idx")
    scale = _columns(scheme, parts["scale"].to(torch.float32), in_features, g_idx)
    if "zero" in parts:
        zp = parts["zero"]
        if scheme.format == "pack-quantized":
            rows = 1 if scheme.strategy == "tensor" else out_features
            zp = unpack_int32(zp, scheme.bits, dim=0)[:rows] - offset
        q = q - _columns(scheme, zp.to(torch.float32), in_features, g_idx)
    return q * scale
