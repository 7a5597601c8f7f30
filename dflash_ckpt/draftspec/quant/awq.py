"""AutoAWQ's GEMM layout (``quant_method: awq``, ``version: gemm``): int4, asymmetric, grouped.

``qweight`` is ``[in, out/8]``: each int32 holds eight output columns of one input row, nibble
``i`` holding column ``8c + [0, 2, 4, 6, 1, 3, 5, 7][i]`` (``WQLinear_GEMM.from_linear``'s
``order_map``); ``qzeros`` ``[in/g, out/8]`` is packed the same way; ``scales`` is ``[in/g, out]``.
w[i, o] = (q[i, o] - z[i // g, o]) * s[i // g, o]; the Linear weight is its transpose.
"""

from __future__ import annotations

from typing import Any, Mapping

from dflash_ckpt.draftspec.quant.base import QuantFormat, QuantScheme, bad, contradiction, group_size, int_key, shape

SUPPORTED = "awq (GEMM, 4-bit)"
#: Where packed nibble ``j`` goes back to: the inverse of AutoAWQ's ``order_map`` [0,2,4,6,1,3,5,7].
REVERSE_ORDER = (0, 4, 1, 5, 2, 6, 3, 7)


def parse(q: Mapping[str, Any], where: str) -> QuantScheme:
    version = str(q.get("version", "gemm")).lower()
    if version != "gemm":
        raise bad(where, "version", q.get("version"), "version gemm (AutoAWQ's GEMM packing)")
    if q.get("zero_point", True) is not True:
        raise bad(where, "zero_point", q.get("zero_point"), "zero_point true (AutoAWQ's GEMM layout)")
    bits = int_key(q, "bits", where, (4,), q.get("w_bit", ...))
    group = group_size(q, "group_size", where) if "group_size" in q else group_size(
        {"q_group_size": q.get("q_group_size", 128)}, "q_group_size", where)
    return QuantScheme("awq", "awq-gemm", bits, group, "group" if group else "channel", symmetric=False, where=where, record=FORMAT)


def require_layer(scheme: QuantScheme, base: str, parts: dict[str, str], tensors: Mapping[str, Any],
                out_features: int, in_features: int) -> None:
    per = 32 // scheme.bits
    qw, sc = shape(tensors, parts["qweight"]), shape(tensors, parts["scales"])
    if qw != (in_features, out_features // per):
        raise contradiction(scheme, parts["qweight"], f"bits {scheme.bits}", qw, f"[{in_features}, {out_features // per}]")
    groups = in_features // scheme.group_size if scheme.group_size else 1
    if scheme.group_size and in_features % scheme.group_size or sc != (groups, out_features):
        raise contradiction(scheme, parts["scales"], f"group_size {scheme.group_size}", sc, f"[{groups}, {out_features}]")
    qz = shape(tensors, parts["qzeros"])
    if qz != (groups, out_features // per):
        raise contradiction(scheme, parts["qzeros"], f"bits {scheme.bits}", qz, f"[{groups}, {out_features // per}]")


def unpack_awq(packed: Any, bits: int) -> Any:
    """``[rows, cols/8]`` int32 -> ``[rows, cols]`` unsigned values in column order."""
    import torch

    from dflash_ckpt.draftspec.quant.packing import unpack_int32

    vals = unpack_int32(packed, bits, dim=1)
    per = 32 // bits
    order = torch.arange(vals.shape[1]).view(-1, per)[:, list(REVERSE_ORDER)].reshape(-1)
    return vals[:, order]


def dequantize(scheme: QuantScheme, parts: dict[str, Any], shape: tuple[int, int]) -> Any:
    import torch

    from dflash_ckpt.draftspec.quant.packing import group_index

    q = unpack_awq(parts["qweight"], scheme.bits).to(torch.float32)  # [in, out]
    z = unpack_awq(parts["qzeros"], scheme.bits).to(torch.float32)  # [groups, out]
    s = parts["scales"].to(torch.float32)
    g = group_index(q.shape[0], scheme.group_size)
    return ((q - z[g]) * s[g]).t().contiguous()


FORMAT = QuantFormat("awq", SUPPORTED, parse, components=lambda s: {"qweight": "qweight", "qzeros": "qzeros", "scales": "scales"},
                     stored=lambda s: "qweight", dims=lambda s, rows, cols: (cols * (32 // s.bits), rows),
                     require_layer=require_layer, dequantize=dequantize, labels={"awq-gemm": "awq GEMM"})
