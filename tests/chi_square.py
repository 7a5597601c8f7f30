"""Pearson's goodness of fit of sampled counts to a law: how the sampling tests judge that a
sampler draws from the distribution it should (tests/test_sampling_lossless.py,
tests/test_sampling_tiny_pair.py). The package compares two runs with ``homogeneity`` instead;
this one-sample form only the tests need, on the package's own ``chi2_sf``."""

from __future__ import annotations

import math
from collections.abc import Sequence

from dflash_ckpt.stats.confidence import ChiSquare, chi2_sf


def chi_square_gof(observed: Sequence[int], probs: Sequence[float], min_expected: float = 5.0) -> ChiSquare:
    """Pearson's goodness of fit of ``observed`` counts to ``probs``.

    Cells whose expected count is under ``min_expected`` are pooled, smallest first, into one
    cell (grown until it reaches ``min_expected`` too), so the chi-square approximation holds. A
    draw in a cell of probability 0 is impossible under ``probs``: p-value 0 outright."""
    if len(observed) != len(probs):
        raise ValueError("observed and probs differ in length")
    n = sum(observed)
    total_p = sum(probs)
    if any(o > 0 and p <= 0 for o, p in zip(observed, probs)):
        return ChiSquare(math.inf, max(1, len(probs) - 1), 0.0, len(probs))
    cells = sorted((n * p / total_p, o) for o, p in zip(observed, probs) if p > 0)
    pooled: list[tuple[float, int]] = []
    acc_e, acc_o = 0.0, 0
    for e, o in cells:  # ascending: the small cells are pooled together before any large one
        acc_e, acc_o = acc_e + e, acc_o + o
        if acc_e >= min_expected:
            pooled.append((acc_e, acc_o))
            acc_e, acc_o = 0.0, 0
    if acc_e > 0:  # a remainder under the minimum joins the last cell
        if pooled:
            e0, o0 = pooled[-1]
            pooled[-1] = (e0 + acc_e, o0 + acc_o)
        else:
            pooled.append((acc_e, acc_o))
    if len(pooled) < 2:
        return ChiSquare(0.0, 0, 1.0, len(pooled))
    stat = sum((o - e) ** 2 / e for e, o in pooled)
    dof = len(pooled) - 1
    return ChiSquare(stat, dof, chi2_sf(stat, dof), len(pooled))
