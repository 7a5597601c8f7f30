"""DF431: the target's embedding row for ``mask_token_id`` is about zero and the draft ships no
learned mask embedding.

A DFlash draft embeds its mask slots with the target's row for ``mask_token_id``. Some targets
never trained that row (MiMo: sglang#27924, acceptance length 1.42 against 6.30), and their drafts
publish the embedding they were trained with beside the weights (``mask_embedding.pt``, which vLLM
and SGLang load; or a ``mask_embedding`` tensor, exllamav3 1.6.5). With neither, every engine feeds
the draft a zero vector. The row's values are not in any header, so this is judged in smoke-run,
where the target's embedding is loaded (inspect cannot: it reads headers only).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from dflash_ckpt.rules import Finding, finding

#: A row whose norm is below this fraction of the median row norm counts as "about zero".
NEAR_ZERO = 1e-3
#: What counts as the draft's own mask embedding: a side file or a tensor.
MASK_SIDE_FILE = "mask_embedding.pt"
MASK_TENSOR = "mask_embedding"
#: Rows sampled for the median norm (evenly spaced; the whole table when smaller).
SAMPLE_ROWS = 4096


def row_ratio(weight: Any, row: int) -> float | None:
    """The mask row's norm over the median row norm of ``weight`` (a torch ``[vocab, H]`` tensor),
    or ``None`` when ``row`` is not a row of it or the table is all zeros."""
    import torch  # noqa: PLC0415 - smoke-run only: the target is loaded already

    vocab = weight.shape[0]
    if not 0 <= row < vocab:
        return None
    step = max(1, vocab // SAMPLE_ROWS)
    with torch.no_grad():
        median = weight[::step].float().norm(dim=1).median().item()
        if median <= 0:
            return None
        return weight[row].float().norm().item() / median


def mask_row_findings(weight: Any, mask_token_id: int | None, draft_dir: Path, draft_tensors: Iterable[str],
                      where: str) -> list[Finding]:
    """DF431 when the target's mask row is about zero and the draft has neither
    ``mask_embedding.pt`` nor a ``mask_embedding`` tensor."""
    if mask_token_id is None:
        return []
    ratio = row_ratio(weight, mask_token_id)
    if ratio is None or ratio >= NEAR_ZERO:
        return []
    if (draft_dir / MASK_SIDE_FILE).exists() or MASK_TENSOR in set(draft_tensors):
        return []
    return [finding("DF431", f"the target's embedding row for mask_token_id {mask_token_id} is about zero "
                             f"({ratio:.1e} of the median row's norm) and the draft ships no mask embedding "
                             f"({MASK_SIDE_FILE} or a {MASK_TENSOR} tensor): every engine feeds its mask slots "
                             "a zero vector; fetch the mask embedding its publisher trained with", path=where)]
