"""Which tap sets ``probe-taps`` measures, and in what order (pure: no torch, no files).

A tap set is ``k`` strictly increasing layer ids in ``0..depth-1`` (features are concatenated in
that order, so a permutation is not another candidate). When ``C(depth, k)`` is at most
``EXHAUSTIVE_MAX`` every set is measured. Above it, a local search: from several starts, coordinate
moves (one id moved anywhere between its neighbours, keeping the best value) and shifts (every id
moved by the same small offset), until no move improves or the budget of candidates is spent.
A measured candidate is never measured again, so the count of candidates is the cost.

Measuring can stop early: ``evaluate(ids, floor)`` may give up on a candidate once it is sure to
stay below ``floor`` and return an upper bound instead of its tau (``Measured(bound, exact=False)``).
The floor is what a candidate must reach to matter: in a climb, the current point's tau (a move
must beat it); when enumerating, the ``keep``-th best tau so far (the ranked head stays exact).
A bound is always below the floor it was measured against, so no decision rests on one, and a
candidate met again with a lower floor is measured again.

Why these starts: the configured ids when there are any (the check of a config), the evenly
spaced sets that training recipes write (z-lab's ``1 .. depth-3``, and the centred spread), then
seeded random sets, so that the run is reproducible and covers what the others miss.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

#: Largest ``C(depth, k)`` measured exhaustively (the tiny pair has C(8, 3) = 56; a 36-layer
#: target with 5 taps has 376,992, which only a search can afford).
EXHAUSTIVE_MAX = 256
#: Candidates a search measures when ``--budget`` is not given.
DEFAULT_SEARCH_BUDGET = 400
#: Random starts a search adds after the fixed ones, budget permitting.
RANDOM_STARTS = 4
SHIFTS = (-2, -1, 1, 2)

#: Candidates a full enumeration keeps exact at the head of the ranking.
KEEP_EXACT = 10

TapSet = tuple[int, ...]


@dataclass(frozen=True)
class Measured:
    """A candidate's tau, or (``exact=False``) a bound it is known to stay below."""

    value: float
    exact: bool = True


#: ``evaluate(ids, floor)``: a float (exact) or a ``Measured``; ``floor`` may be ``None``.
Evaluate = Callable[[TapSet, "float | None"], "float | Measured"]


@dataclass
class SearchResult:
    """Every candidate measured, in the order measured, and how the search went."""

    method: str  # "exhaustive" or "search"
    space: int  # C(depth, k)
    scores: dict[TapSet, float] = field(default_factory=dict)
    #: Candidates measured only until they were sure to lose: tau is below this bound.
    bounds: dict[TapSet, float] = field(default_factory=dict)
    starts: list[TapSet] = field(default_factory=list)
    budget_exhausted: bool = False
    seconds: float = 0.0

    @property
    def evaluated(self) -> int:
        return len(self.scores) + len(self.bounds)

    def ranked(self) -> list[tuple[TapSet, float]]:
        """Exact taus, best first (ties keep the order measured)."""
        return sorted(self.scores.items(), key=lambda kv: -kv[1])

    def ranked_bounds(self) -> list[tuple[TapSet, float]]:
        """Candidates stopped early, by their bound; every one ranks below the exact head."""
        return sorted(self.bounds.items(), key=lambda kv: -kv[1])


class _Budget(Exception):
    pass


class _Scorer:
    """Memoised ``evaluate`` that stops the search once ``budget`` candidates are measured."""

    def __init__(self, evaluate: Evaluate, result: SearchResult, budget: int | None) -> None:
        self.evaluate, self.result, self.budget = evaluate, result, budget

    def __call__(self, ids: TapSet, floor: float | None = None) -> float:
        res = self.result
        if ids in res.scores:
            return res.scores[ids]
        bound = res.bounds.get(ids)
        if bound is not None and floor is not None and bound <= floor:
            return bound  # still sure to stay below
        if bound is None and self.budget is not None and res.evaluated >= self.budget:
            res.budget_exhausted = True
            raise _Budget
        got = self.evaluate(ids, floor)
        m = got if isinstance(got, Measured) else Measured(float(got))
        if m.exact:
            res.bounds.pop(ids, None)
            res.scores[ids] = m.value
        else:
            res.bounds[ids] = m.value
        return m.value


def valid(ids: Sequence[int], depth: int) -> bool:
    return all(0 <= i < depth for i in ids) and all(a < b for a, b in zip(ids, ids[1:]))


def evenly_spaced(depth: int, k: int, lo: float, hi: float) -> TapSet | None:
    """``k`` ids spread from ``lo`` to ``hi``, rounded; ``None`` if rounding merges two."""
    if k == 1:
        ids: TapSet = (int(round((lo + hi) / 2)),)
    else:
        ids = tuple(int(round(lo + i * (hi - lo) / (k - 1))) for i in range(k))
    return ids if valid(ids, depth) else None


def fixed_starts(depth: int, k: int, configured: Sequence[int] | None) -> list[TapSet]:
    out: list[TapSet] = []
    cands = [
        tuple(configured) if configured is not None else None,
        evenly_spaced(depth, k, 1, depth - 3),
        evenly_spaced(depth, k, depth / (2 * k) - 0.5, depth - depth / (2 * k) - 0.5),
    ]
    for c in cands:
        if c is not None and len(c) == k and valid(c, depth) and c not in out:
            out.append(c)
    return out


def _climb(start: TapSet, depth: int, score: _Scorer) -> TapSet:
    """Coordinate and shift moves from ``start`` until none improves."""
    cur, best = start, score(start)  # exact: no floor
    improved = True
    while improved:
        improved = False
        for i in range(len(cur)):
            lo = cur[i - 1] + 1 if i > 0 else 0
            hi = cur[i + 1] if i + 1 < len(cur) else depth
            for v in range(lo, hi):
                cand = cur[:i] + (v,) + cur[i + 1:]
                s = score(cand, best)
                if s > best:
                    cur, best, improved = cand, s, True
        for d in SHIFTS:
            cand = tuple(x + d for x in cur)
            if valid(cand, depth):
                s = score(cand, best)
                if s > best:
                    cur, best, improved = cand, s, True
    return cur


def search_taps(
    depth: int,
    k: int,
    evaluate: Evaluate,
    *,
    configured: Sequence[int] | None = None,
    budget: int | None = None,
    exhaustive_max: int = EXHAUSTIVE_MAX,
    keep: int = KEEP_EXACT,
    seed: int = 0,
) -> SearchResult:
    """Measure tap sets with ``evaluate`` (higher is better) and return every score.

    ``budget`` caps the candidates measured (a search defaults to ``DEFAULT_SEARCH_BUDGET``);
    exhaustive enumeration is used when ``C(depth, k) <= exhaustive_max`` and fits the budget,
    and keeps the best ``keep`` taus exact (others may be bounds, see the module's docstring).
    """
    if k < 1 or k > depth:
        raise ValueError(f"cannot choose {k} tap layers out of {depth}")
    space = math.comb(depth, k)
    t0 = time.perf_counter()
    exhaustive = space <= exhaustive_max and (budget is None or space <= budget)
    result = SearchResult("exhaustive" if exhaustive else "search", space)
    score = _Scorer(evaluate, result, budget if budget is not None or exhaustive else DEFAULT_SEARCH_BUDGET)
    try:
        if exhaustive:
            import itertools

            # Climbs from the fixed starts first: a high floor early lets the sweep give up on
            # most losers sooner. The order changes the cost only: the best ``keep`` stay exact.
            for start in fixed_starts(depth, k, configured):
                result.starts.append(start)
                _climb(start, depth, score)
            for ids in itertools.combinations(range(depth), k):
                head = sorted(result.scores.values(), reverse=True)[:keep]
                score(ids, head[-1] if len(head) >= keep else None)
        else:
            rng = random.Random(seed)
            starts = fixed_starts(depth, k, configured)
            starts += [tuple(sorted(rng.sample(range(depth), k))) for _ in range(RANDOM_STARTS)]
            for start in starts:
                if start in result.starts:
                    continue
                result.starts.append(start)
                _climb(start, depth, score)
    except _Budget:
        pass
    result.seconds = time.perf_counter() - t0
    return result


def configured_problem(ids: Sequence[int] | None, k: int, depth: int) -> str | None:
    """Why the configured ids cannot be a candidate (``None``: they can, or there are none)."""
    if ids is None:
        return None
    if len(ids) != k:
        return f"{len(ids)} ids but fc.weight reads {k} taps"
    if not valid(ids, depth):
        return f"not strictly increasing layers in 0..{depth - 1}"
    return None
