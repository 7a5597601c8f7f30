"""Which block layout a draft was trained with, measured: probe-taps' layout step.

Both layouts feed the draft the same block ``[bonus, mask, ...]`` and differ only in which slots
are drafts (shared DESIGN section 12), so the same loaded draft can be run either way
(``reading_layout``). A draft run in the layout it was not trained in proposes every token one
position off: the target accepts almost none and tau falls to about 1 with nothing failing. So
the layout is measured the way the taps are: tau of each layout over the prompts, by smoke-run's
own loop (``loops.make_loop``), and the same evidence rule: the leader must lead the other by at
least ``LIKELY_Z`` standard errors of the difference (``stats.ranking.verdict``), else no
layout is claimed.

Two measurements: a quick one before the tap search, with the taps the search starts from (the
configured ones), by the probe's simulation on the recordings (``probe.measure``), so a draft
whose layout is lost is searched in its own layout; and the reported one after it, with the
winning taps, by the real loop, whose figures the findings (DF416, DF417) and ``--write`` use.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Sequence

from dflash_ckpt.draftspec.layout import ANCHOR_FIRST, ONE_PLUS_N, BlockLayout
from dflash_ckpt.runtime.loops import make_loop
from dflash_ckpt.runtime.measure import Candidate
from dflash_ckpt.runtime.probe import Recording, measure, reading, reading_taps

#: The two layouts, in the order measured (the default one first).
LAYOUTS = (ONE_PLUS_N, ANCHOR_FIRST)


def reading_layout(draft: Any, layout: str) -> AbstractContextManager[Any]:
    """The same loaded draft run in ``layout`` for a while (the weights do not depend on it)."""
    return reading(draft, block_layout=BlockLayout(layout, "probe-taps", {}))


@dataclass
class LayoutMeasurement:
    """Both layouts' tau with one tap set, and what the config declares."""

    declared: BlockLayout
    taps: tuple[int, ...]
    #: ``layout -> Candidate`` (``target_layer_ids`` are ``taps``; ``tau`` and its lengths).
    by_layout: dict[str, Candidate] = field(default_factory=dict)
    measured_by: str = "loop"

    def ranked(self) -> list[tuple[str, Candidate]]:
        return sorted(self.by_layout.items(), key=lambda kv: -(kv[1].tau or 0.0))

    @property
    def best(self) -> str | None:
        return self.ranked()[0][0] if self.by_layout else None

    @property
    def z(self) -> float | None:
        """Standard errors of the difference the leader leads the other layout by."""
        r = self.ranked()
        return r[0][1].z_over(r[1][1]) if len(r) > 1 else None

    def verdict(self) -> str:
        from dflash_ckpt.stats.ranking import verdict

        return verdict(self.z)

    @property
    def matches_config(self) -> bool:
        return self.best == self.declared.layout

    def to_json(self) -> dict[str, Any]:
        d = self.declared
        return {
            "declared": {"layout": d.layout, "source": d.source, "declared": d.declared},
            "target_layer_ids": list(self.taps),
            "measured_by": self.measured_by,
            "tau": {name: c.tau for name, c in self.by_layout.items()},
            "steps": {name: len(c.lengths) for name, c in self.by_layout.items()},
            "stderr": {name: c.stderr for name, c in self.by_layout.items()},
            "best": self.best,
            "z": self.z,
            "verdict": self.verdict(),
            "matches_config": self.matches_config,
        }


def simulate_layouts(draft: Any, recs: Sequence[Recording], taps: Sequence[int], declared: BlockLayout, *,
                     embed_w: Any, head_w: Any, draft_cache: Any, block_size: int,
                     stop_ids: Sequence[int] = ()) -> LayoutMeasurement:
    """Both layouts by the probe's simulation over the recordings (draft calls only)."""
    out = LayoutMeasurement(declared, tuple(taps), measured_by="probe")
    for layout in LAYOUTS:
        with reading_layout(draft, layout):
            m = measure(draft, recs, taps, embed_w=embed_w, head_w=head_w, draft_cache=draft_cache,
                        block_size=block_size, stop_ids=stop_ids)
        out.by_layout[layout] = Candidate(tuple(taps), m.tau, lengths=m.acceptance_lengths)
    return out


def loop_layouts(draft: Any, target: Any, encoded: Sequence[Sequence[int]], taps: Sequence[int],
                 declared: BlockLayout, *, capacity: int, block_size: int, max_new_tokens: int,
                 stop_ids: Sequence[int] = ()) -> LayoutMeasurement:
    """Both layouts by smoke-run's loop (the static one where it runs the pair), reading ``taps``."""
    out = LayoutMeasurement(declared, tuple(taps))
    for layout in LAYOUTS:
        lengths: list[int] = []
        with reading_layout(draft, layout), reading_taps(draft, taps):
            loop = make_loop(target, draft, capacity, block_size=block_size)
            for ids in encoded:
                lengths += loop.dflash(ids, max_new_tokens=max_new_tokens, stop_ids=stop_ids).acceptance_lengths
        tau = sum(lengths) / len(lengths) if lengths else 1.0
        out.by_layout[layout] = Candidate(tuple(taps), None, tau_loop=tau, lengths=lengths)
    return out


__all__ = ["LAYOUTS", "LayoutMeasurement", "loop_layouts", "reading_layout", "simulate_layouts"]
