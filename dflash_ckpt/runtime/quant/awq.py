"""AutoAWQ's GEMM layout (``quant_method: awq``, ``version: gemm``): int4, asymmetric, grouped.

``qweight`` is ``[in, out/8]``: each int32 holds eight output columns of one input row, nibble
``i`` holding column ``8c + [0, 2, 4, 6, 1, 3, 5, 7][i]`` (``WQLinear_GEMM.from_linear``'s
``order_map``); ``qzeros`` ``[in/g, out/8]`` is packed the same way; ``scales`` is ``[in/g, out]``.
w[i, o] = (q[i, o] - z[i // g, o]) * s[i // g, o]; the Linear weight is its transpose.
"""

from __future__ import annotations

import torch

from dflash_ckpt.draftspec.quant_scheme import QuantScheme
from dflash_ckpt.runtime.quant.packing import group_index, unpack_int32

#: Where packed nibble ``j`` goes back to: the inverse of AutoAWQ's ``order_map`` [0,2,4,6,1,3,5,7].
REVERSE_ORDER = (0, 4, 1, 5, 2, 6, 3, 7)


def unpack_awq(packed: torch.Tensor, bits: int) -> torch.Tensor:
    """``[rows, cols/8]`` int32 -> ``[rows, cols]`` unsigned values in column order."""
    vals = unpack_int32(packed, bits, dim=1)
    per = 32 // bits
    order = torch.arange(vals.shape[1]).view(-1, per)[:, list(REVERSE_ORDER)].reshape(-1)
    return vals[:, order]


def dequantize(scheme: QuantScheme, parts: dict[str, torch.Tensor], shape: tuple[int, int]) -> torch.Tensor:
    q = unpack_awq(parts["qweight"], scheme.bits).to(torch.float32)  # [in, out]
    z = unpack_awq(parts["qzeros"], scheme.bits).to(torch.float32)  # [groups, out]
    s = parts["scales"].to(torch.float32)
    g = group_index(q.shape[0], scheme.group_size)
    return ((q - z[g]) * s[g]).t().contiguous()
