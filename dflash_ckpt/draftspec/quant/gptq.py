"""GPTQ (``quant_method: gptq``; AutoGPTQ, GPTQModel): int4/int8 packed along the input, ``g_idx``.

``qweight`` ``[in*bits/32, out]``: each int32 holds ``32/bits`` consecutive input rows of one
column, lowest bits first; ``qzeros`` ``[groups, out*bits/32]`` packs zero points along the
columns; ``scales`` ``[groups, out]``; ``g_idx`` ``[in]`` maps each input row to its group
(arbitrary with ``desc_act``, ``i // group_size`` otherwise, where it may be absent).
``checkpoint_format: gptq`` (the v1 convention) stores each zero point minus one, and its kernels
add the one back (AutoGPTQ ``zeros + 1``; GPTQModel converts v1 to v2 the same way on load);
``gptq_v2`` stores the zero point itself. w[i, o] = (q[i, o] - z[g_idx[i], o]) * s[g_idx[i], o].
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from dflash_ckpt.draftspec.quant.base import (QuantFormat, QuantScheme, bad, require_index, contradiction, group_size,
                                              int_key, shape)

SUPPORTED = "gptq (4/8-bit, gptq or gptq_v2)"


def parse(q: Mapping[str, Any], where: str) -> QuantScheme:
    bits = int_key(q, "bits", where, (4, 8))
    group = group_size(q, "group_size", where)
    fmt = q.get("checkpoint_format", "gptq")
    if fmt not in ("gptq", "gptq_v2"):
        raise bad(where, "checkpoint_format", fmt, "checkpoint_format gptq or gptq_v2")
    return QuantScheme("gptq", fmt, bits, group, "group" if group else "channel",
                       symmetric=q.get("sym", True) is not False, act_order=q.get("desc_act") is True, where=where, record=FORMAT)


def require_layer(scheme: QuantScheme, base: str, parts: dict[str, str], tensors: Mapping[str, Any],
                out_features: int, in_features: int) -> None:
    per = 32 // scheme.bits
    qw, sc = shape(tensors, parts["qweight"]), shape(tensors, parts["scales"])
    if qw != (in_features // per, out_features) or in_features % per:
        raise contradiction(scheme, parts["qweight"], f"bits {scheme.bits}", qw, f"[{in_features // per}, {out_features}]")
    groups = math.ceil(in_features / scheme.group_size) if scheme.group_size else 1
    if sc != (groups, out_features):
        raise contradiction(scheme, parts["scales"], f"group_size {scheme.group_size or -1}", sc, f"[{groups}, {out_features}]")
    qz = shape(tensors, parts["qzeros"])
    if qz != (groups, math.ceil(out_features / per)):
        raise contradiction(scheme, parts["qzeros"], f"bits {scheme.bits}", qz, f"[{groups}, {math.ceil(out_features / per)}]")
    if parts["g_idx"] in tensors:
        require_index(scheme, tensors, parts["g_idx"], (in_features,))


def dequantize(scheme: QuantScheme, parts: dict[str, Any], shape: tuple[int, int]) -> Any:
    import torch

    from dflash_ckpt.draftspec.quant.packing import checked_groups, group_index, unpack_int32

    out_features, in_features = shape
    q = unpack_int32(parts["qweight"], scheme.bits, dim=0).to(torch.float32)  # [in, out]
    z = unpack_int32(parts["qzeros"], scheme.bits, dim=1)[:, :out_features].to(torch.float32)  # [groups, out]
    if scheme.format == "gptq":
        z = z + 1
    s = parts["scales"].to(torch.float32)
    g_idx = parts.get("g_idx")
    g = group_index(q.shape[0], scheme.group_size) if g_idx is None else g_idx
    g = checked_groups(g, q.shape[0], s.shape[0], scheme.where)
    return ((q - z[g]) * s[g]).t().contiguous()


FORMAT = QuantFormat("gptq", SUPPORTED, parse,
                     components=lambda s: {"qweight": "qweight", "qzeros": "qzeros", "scales": "scales", "g_idx": "g_idx"},
                     stored=lambda s: "qweight", dims=lambda s, rows, cols: (cols, rows * (32 // s.bits)),
                     require_layer=require_layer, dequantize=dequantize,
                     optional=lambda s: frozenset() if s.act_order else frozenset({"g_idx"}),
                     labels={"gptq_v2": "gptq (gptq_v2)"})
