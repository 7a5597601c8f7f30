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

import torch

from dflash_ckpt.draftspec.quant_scheme import QuantScheme
from dflash_ckpt.runtime.quant.packing import checked_groups, group_index, unpack_int32


def dequantize(scheme: QuantScheme, parts: dict[str, torch.Tensor], shape: tuple[int, int]) -> torch.Tensor:
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
