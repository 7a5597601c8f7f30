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

import math
from typing import Any, Mapping

from dflash_ckpt.draftspec.quant.base import (QuantFormat, QuantScheme, bad, require_block, require_index, require_scale,
                                              require_scaled_weight, contradiction, scale_shape, shape)
from dflash_ckpt.errors import InputError

SUPPORTED = "compressed-tensors (pack-quantized, float-quantized, int-quantized)"
FORMATS = ("pack-quantized", "float-quantized", "int-quantized", "naive-quantized")


def parse(q: Mapping[str, Any], where: str) -> QuantScheme:
    groups = q.get("config_groups")
    if not isinstance(groups, dict) or not groups:
        raise bad(where, "config_groups", groups, "config_groups with one weight scheme")
    schemes = []
    for name, group in groups.items():
        weights = group.get("weights") if isinstance(group, dict) else None
        if not isinstance(weights, dict):
            raise bad(where, f"config_groups.{name}.weights", weights, "a weights scheme (num_bits, type, strategy)")
        schemes.append((name, group, weights, group.get("format") or q.get("format")))
    if len({repr((w, f)) for _, _, w, f in schemes}) > 1:
        raise bad(where, "config_groups", sorted(groups), "one weight scheme for every group (mixed schemes are not read)")
    name, group, weights, fmt = schemes[0]
    if fmt not in FORMATS:
        raise bad(where, "format", fmt, "format " + ", ".join(FORMATS[:3]))
    kind = weights.get("type", "int")
    bits = weights.get("num_bits")
    strategy = weights.get("strategy", "tensor")
    pre = f"config_groups.{name}.weights"
    if fmt == "float-quantized":
        if kind != "float" or bits != 8:
            raise bad(where, f"{pre}.num_bits", bits, "float-quantized weights of type float, num_bits 8 (e4m3)")
    elif kind != "int" or bits not in ((4, 8) if fmt == "pack-quantized" else (8,)):
        raise bad(where, f"{pre}.num_bits", bits, f"{fmt} weights of type int, num_bits " + ("4 or 8" if fmt == "pack-quantized" else "8"))
    if strategy not in ("tensor", "channel", "group", "block"):
        raise bad(where, f"{pre}.strategy", strategy, "strategy tensor, channel, group or block")
    size = weights.get("group_size") if strategy == "group" else None
    if strategy == "group" and not (isinstance(size, int) and not isinstance(size, bool) and size > 0):
        raise bad(where, f"{pre}.group_size", size, "a positive group_size with strategy group")
    block = weights.get("block_structure")
    if strategy == "block" and not (isinstance(block, list) and len(block) == 2 and all(isinstance(b, int) and b > 0 for b in block)):
        raise bad(where, f"{pre}.block_structure", block, "block_structure [rows, cols] with strategy block")
    if weights.get("dynamic") not in (None, False):
        raise bad(where, f"{pre}.dynamic", weights.get("dynamic"), "static weight scales (dynamic false)")
    notes = ()
    if isinstance(group.get("input_activations"), dict):
        notes = ("activations not quantized (the config quantizes input activations; the dequantized run computes them "
                 "in the compute dtype)",)
    return QuantScheme("compressed-tensors", "int-quantized" if fmt == "naive-quantized" else fmt, int(bits), size, strategy,
                       symmetric=weights.get("symmetric", True) is not False,
                       block=(block[0], block[1]) if strategy == "block" else None,
                       act_order=weights.get("actorder") in ("group", True) and strategy == "group",
                       kind=kind, where=where, notes=notes, record=FORMAT)


def components(scheme: QuantScheme) -> dict[str, str]:
    if scheme.format == "pack-quantized":
        out = {"packed": "weight_packed", "scale": "weight_scale", "shape": "weight_shape"}
    else:
        out = {"weight": "weight", "scale": "weight_scale"}
    if not scheme.symmetric:
        out["zero"] = "weight_zero_point"
    if scheme.act_order:
        out["g_idx"] = "weight_g_idx"
    return out


def require_layer(scheme: QuantScheme, base: str, parts: dict[str, str], tensors: Mapping[str, Any],
                out_features: int, in_features: int) -> None:
    if scheme.format != "pack-quantized":
        return require_scaled_weight(scheme, base, parts, tensors, out_features, in_features)
    per = 32 // scheme.bits
    pk = shape(tensors, parts["packed"])
    if pk != (out_features, math.ceil(in_features / per)):
        raise contradiction(scheme, parts["packed"], f"num_bits {scheme.bits}", pk, f"[{out_features}, {math.ceil(in_features / per)}]")
    require_scale(scheme, parts["scale"], shape(tensors, parts["scale"]), out_features, in_features)
    require_block(scheme, base, out_features, in_features)
    require_index(scheme, tensors, parts["shape"], (2,))
    if "g_idx" in parts:
        require_index(scheme, tensors, parts["g_idx"], (in_features,))
    if "zero" in parts:
        zp = shape(tensors, parts["zero"])
        grid = scale_shape(scheme, out_features, in_features)
        want = (math.ceil(grid[0] / per), *grid[1:])
        if zp != want:
            raise contradiction(scheme, parts["zero"], f"num_bits {scheme.bits}", zp, str(list(want)))
    return None


def _columns(scheme: QuantScheme, t: Any, in_features: int, g_idx: Any) -> Any:
    """A per-(row, group) tensor ``[out, groups]`` spread over the ``in_features`` columns
    (``weight_g_idx``, activation order, checked against the groups first)."""
    from dflash_ckpt.draftspec.quant.packing import checked_groups, group_index

    if scheme.strategy in ("tensor",) or t.numel() == 1:
        return t.reshape(1, 1).expand(1, in_features)
    if scheme.strategy == "channel":
        return t.reshape(-1, 1).expand(-1, in_features)
    g = group_index(in_features, scheme.group_size) if g_idx is None else g_idx
    return t[:, checked_groups(g, in_features, t.shape[1], scheme.where, "weight_g_idx")]


def _stored_shape(stored: Any) -> list[int | float]:
    """``weight_shape``'s values as Python numbers (the header check admits integer dtypes only;
    a float that slipped through stays a float, so it never equals a dimension)."""
    values = stored.reshape(-1).tolist()
    return [int(v) if isinstance(v, int) or (isinstance(v, float) and v.is_integer()) else v for v in values]


def dequantize(scheme: QuantScheme, parts: dict[str, Any], shape: tuple[int, int]) -> Any:
    import torch

    from dflash_ckpt.draftspec.quant.packing import scale_blocks, unpack_int32

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


FORMAT = QuantFormat("compressed-tensors", SUPPORTED, parse, components,
                     stored=lambda s: "packed" if s.format == "pack-quantized" else "weight",
                     dims=lambda s, rows, cols: (rows, cols * (32 // s.bits)) if s.format == "pack-quantized" else (rows, cols),
                     require_layer=require_layer, dequantize=dequantize)
