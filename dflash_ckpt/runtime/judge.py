"""The lossless judge: is DFlash's greedy output the target's greedy output, up to near ties?

Input: the target's teacher-forced logits over prompt + DFlash output (one forward; row ``j``
is the target's distribution for new token ``j`` given the DFlash tokens before it) and the
DFlash tokens. Greedy decoding reproduces the output exactly when every DFlash token is the
argmax of its row. Where it is not, the row says by how much: the **margin** is the row's maximum
minus the logit of the DFlash token (>= 0), whatever the token's rank. A margin within the
tolerance is a **tie**: batched verification (16 positions in one matmul), one-token decoding and
the teacher-forced pass add in different orders, so logits that close may come out in either
order, and either token is a correct greedy choice. Serving engines test their speculative paths
the same way (an argmax-gap tolerance, not bit equality). A margin above it is a real divergence.

Every position is judged, not only the first divergence: the teacher-forced rows follow DFlash's
own tokens, so a later row is still "what would greedy pick here". The verdict is ``identical``
(no position differs), ``tie`` (all that differ are ties; the largest margin is reported) or
``differs``; the first divergence is reported (for ``differs``, the first beyond the tolerance)
with its margin and rank, and for ties also their count and largest margin.

Tolerances (``TIE_TOLERANCE``), in logit units, by the target's dtype: about 4 units in the last
place of a logit between 16 and 32 (bf16 0.5, fp16 0.0625); fp32 1e-3, far above its rounding and
far below a real disagreement. ``--tie-tolerance`` overrides them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Sequence

import torch

TIE_TOLERANCE: dict[torch.dtype, float] = {torch.float32: 1e-3, torch.float16: 0.0625, torch.bfloat16: 0.5}


@dataclass(frozen=True)
class Position:
    """One new token where DFlash's token is not the target's argmax."""

    index: int
    target_token: int
    dflash_token: int
    #: The row's maximum minus the DFlash token's logit (float32).
    margin: float
    #: The DFlash token's rank in the row: 1 + the number of tokens with a larger logit.
    rank: int


@dataclass(frozen=True)
class Judgement:
    """The lossless judge's reading of one prompt's tokens (an engine's ``Verdict`` is another
    thing: ``checks/engines/reading.py``, whether a reader loads a draft)."""

    status: str  # identical, tie or differs
    compared: int
    #: The target's argmax at every position (its greedy choice given DFlash's tokens before).
    target_tokens: list[int]
    #: The reported position: the first beyond the tolerance, else the first tie.
    position: Position | None = None
    #: How many positions were ties, and the largest tie margin.
    ties: int = 0
    largest_margin: float | None = None
    #: Rows whose two best logits are equal (the argmax is decided by token order alone), and
    #: rows whose logits are all equal: degenerate weights give both at every position (DF414).
    tied_rows: int = 0
    flat_rows: int = 0


def tie_counts(logits: torch.Tensor) -> tuple[int, int]:
    """``(rows whose top two logits are equal, rows whose logits are all equal)`` of ``[n, V]``
    logits; two numbers reach the host."""
    if logits.shape[0] == 0:
        return 0, 0
    scores = logits.float()
    if scores.shape[-1] < 2:
        return scores.shape[0], scores.shape[0]
    top = scores.topk(2, dim=-1).values
    tied = int((top[:, 0] == top[:, 1]).sum())
    flat = int((top[:, 0] == scores.min(dim=-1).values).sum())
    return tied, flat


def row_figures(logits: torch.Tensor, tokens: Sequence[int]) -> tuple[list[int], list[float], list[int]]:
    """For logits ``[n, V]`` (row ``j`` predicts ``tokens[j]``): each row's argmax, the margin of
    ``tokens[j]`` below the row's maximum, and its rank. Computed on the logits' device; only
    ``3n`` numbers reach the host."""
    scores = logits.float()
    chosen = torch.as_tensor(list(tokens), dtype=torch.long, device=scores.device)
    top, arg = scores.max(dim=-1)
    mine = scores.gather(-1, chosen[:, None])[:, 0]
    rank = (scores > mine[:, None]).sum(-1) + 1
    return arg.tolist(), (top - mine).tolist(), rank.tolist()


def judge_rows(target_tokens: Sequence[int], dflash_tokens: Sequence[int], margins: Sequence[float],
               ranks: Sequence[int], tolerance: float) -> Judgement:
    """The verdict from per-position figures (``row_figures``); pure, so tests build the rows."""
    n = min(len(target_tokens), len(dflash_tokens))
    first: Position | None = None
    ties, largest = 0, None
    for j in range(n):
        if target_tokens[j] == dflash_tokens[j] and margins[j] == margins[j]:
            continue  # (a NaN row makes its argmax meaningless: judged below, never a tie)
        pos = Position(j, int(target_tokens[j]), int(dflash_tokens[j]), float(margins[j]), int(ranks[j]))
        if not pos.margin <= tolerance:  # NaN margins are no tie
            return Judgement("differs", n, list(target_tokens), pos, ties, largest)
        ties += 1
        first = first or pos
        largest = pos.margin if largest is None else max(largest, pos.margin)
    return Judgement("tie" if ties else "identical", n, list(target_tokens), first, ties, largest)


def judge_logits(logits: torch.Tensor, dflash_tokens: Sequence[int], tolerance: float) -> Judgement:
    """``judge_rows`` over ``row_figures`` of teacher-forced ``logits [n, V]``."""
    if not dflash_tokens:
        return Judgement("identical", 0, [])
    argmax, margins, ranks = row_figures(logits, dflash_tokens)
    tied, flat = tie_counts(logits)
    return dataclasses.replace(judge_rows(argmax, dflash_tokens, margins, ranks, tolerance), tied_rows=tied, flat_rows=flat)
