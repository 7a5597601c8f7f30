"""The torch half the formats' dequantizers share: bit unpacking (``32 // bits`` values in one int32,
lowest bits first), group indices, scale blocks. Imported only by a ``dequantize`` when it runs.
"""

from __future__ import annotations

import torch

from dflash_ckpt.errors import InputError


def unpack_int32(packed: torch.Tensor, bits: int, dim: int) -> torch.Tensor:
    """Unsigned values of ``packed`` (int32) spread along ``dim``: value ``j`` of each word sits at
    bits ``j*bits`` and up (AutoAWQ, GPTQ and compressed-tensors all store it so; AWQ then
    permutes its columns). Returns int32 with ``32 // bits`` times the size along ``dim``."""
    per = 32 // bits
    shifts = torch.arange(0, 32, bits, dtype=torch.int32)
    mask = (1 << bits) - 1
    if dim == 0:
        vals = (packed.unsqueeze(1) >> shifts.view(1, per, 1)) & mask  # [rows, per, cols]
        return vals.reshape(packed.shape[0] * per, packed.shape[1])
    vals = (packed.unsqueeze(-1) >> shifts.view(1, 1, per)) & mask  # [rows, cols, per]
    return vals.reshape(packed.shape[0], packed.shape[1] * per)


def group_index(in_features: int, group_size: int | None) -> torch.Tensor:
    """The group of each input column when groups are contiguous (no activation order)."""
    if not group_size:
        return torch.zeros(in_features, dtype=torch.long)
    return torch.arange(in_features, dtype=torch.long) // group_size


def checked_groups(g_idx: torch.Tensor, in_features: int, groups: int, where: str, name: str = "g_idx") -> torch.Tensor:
    """``g_idx`` (one group per input column, activation order) as indices, after checking that
    it has ``in_features`` entries, each a group in ``0..groups-1``. An index past the end would be
    an IndexError from inside the gather, and a negative one would silently pick a group counted
    from the end, so either is one DF181 line (the quantized files are corrupt)."""
    g = g_idx.reshape(-1).to(torch.long)
    if g.numel() != in_features or g.numel() and (int(g.min()) < 0 or int(g.max()) >= groups):
        low, high = (int(g.min()), int(g.max())) if g.numel() else (0, -1)
        raise InputError(f"a {name} tensor names groups {low}..{high} but the layer has groups 0..{groups - 1} "
                         f"(and {g.numel()} entries for {in_features} input columns); the quantized files are corrupt, "
                         "re-download or re-quantize them", code="DF181", path=where)
    return g


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
