"""Acceptance by draft position: the share of DFlash steps that accepted draft k, k = 1 .. B-1,
as a table and as a PNG chart (matplotlib, the ``report`` extra, imported only here).

A step of acceptance length L (bonus included) accepted drafts 1 .. L-1, so position k's rate is
the share of steps with L > k: it falls with k, and where it falls to ~0 is where the draft stops
helping. The chart is written deterministically (no timestamp or version in the PNG's metadata):
the same figures give the same bytes on the same matplotlib.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence


def position_rates(lengths: Sequence[int], drafts: int) -> list[float]:
    """For k = 1 .. ``drafts``: the share of steps whose acceptance length exceeds k."""
    steps = len(lengths)
    if not steps:
        return [0.0] * drafts
    return [sum(1 for n in lengths if n > k) / steps for k in range(1, drafts + 1)]


def matplotlib_missing() -> str | None:
    """Why no chart can be drawn here (None when matplotlib imports)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return 'matplotlib is not installed (pip install "dflash-ckpt[report]")'
    return None


def write_chart(path: Path, rates: Sequence[float], title: str) -> None:
    """The rates as a bar chart, PNG, at ``path``."""
    import matplotlib

    matplotlib.use("Agg", force=True)  # no display; the same pixels everywhere
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.4, 3.2), dpi=100)
    ax = fig.add_subplot()
    positions = list(range(1, len(rates) + 1))
    ax.bar(positions, [100 * r for r in rates], color="#4878a8")
    for x, r in zip(positions, rates):
        ax.text(x, 100 * r + 1.5, f"{100 * r:.0f}", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(positions)
    ax.set_ylim(0, 110)
    ax.set_xlabel("draft position in the block")
    ax.set_ylabel("steps that accepted it (%)")
    ax.set_title(title, fontsize=10)
    ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    fig.savefig(path, format="png", metadata={"Software": None})
