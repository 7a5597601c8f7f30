"""What every engine record shares: a verdict, the lookup orders, the reader that records where
each DFlash key was found, and the block-layout path an engine runs a draft through.

Each engine's file (``checks/engines/<engine>.py``) models its reader with ``Reading`` and its
path with the helpers here (``one_plus_n``, ``dspark_from_anchor``, ``compare``); the layout
findings (``checks.layout``) and the verdicts (``checks.engines.verdicts``) read the paths.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

from dflash_ckpt.draftspec.layout import ANCHOR_FIRST, ONE_PLUS_N
from dflash_ckpt.draftspec.specs import ABSENT, NESTED, TOP_LEVEL, DraftSpec, as_int, as_int_list, same_json


class Verdict(NamedTuple):
    loads: bool
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"loads": self.loads, "reason": self.reason}


Order = tuple[str, ...]
NESTED_ONLY: Order = (NESTED,)
TOP_ONLY: Order = (TOP_LEVEL,)
NESTED_THEN_TOP: Order = (NESTED, TOP_LEVEL)
TOP_THEN_NESTED: Order = (TOP_LEVEL, NESTED)

_PLACE = {NESTED: "dflash_config", TOP_LEVEL: "the top level"}


class Reading:
    """Collects what one reader sees, its blocking problems and its caveats."""

    def __init__(self, spec: DraftSpec) -> None:
        self.spec = spec
        self.problems: list[str] = []
        self.notes: list[str] = []

    def read(self, key: str, order: Order, *, required: bool = True, kind: str = "int") -> Any:
        """``key`` as a reader looking in ``order`` finds it (``DraftSpec.declared(key).first``),
        ``None`` with a problem when it is absent (and ``required``) or not of ``kind``; a note
        when the place it skips holds another value."""
        rk = self.spec.declared(key)
        if (found := rk.first(order)) is not None:
            place, raw = found
            valid = as_int(raw) is not None if kind == "int" else as_int_list(raw) is not None
            if not valid:
                self.problems.append(f"{key} read from {_PLACE[place]} is not {'an integer' if kind == 'int' else 'a list of integers'}")
                return None
            other = rk.at(TOP_LEVEL if place == NESTED else NESTED)
            if other is not ABSENT and not same_json(other, raw):
                self.notes.append(f"reads {key}={raw} from {_PLACE[place]}, ignoring the conflicting {other}")
            return raw
        if required:
            if len(order) > 1:
                self.problems.append(f"{key} is in neither dflash_config nor the top level")
            else:
                elsewhere = rk.at(TOP_LEVEL if order[0] == NESTED else NESTED)
                there = f" (it is only in {_PLACE[TOP_LEVEL if order[0] == NESTED else NESTED]})" if elsewhere is not ABSENT else ""
                self.problems.append(f"reads {key} only from {_PLACE[order[0]]}, where it is absent{there}")
        return None

    def verdict(self, ok_text: str = "loads as is") -> Verdict:
        if self.problems:
            return Verdict(False, "fails: " + "; ".join(self.problems))
        return Verdict(True, ok_text + ("; " + "; ".join(self.notes) if self.notes else ""))


RUNS, REFUSES, MISSERVES = "runs", "refuses", "misserves"


class EnginePath(NamedTuple):
    """How one engine would run the draft: ``status`` (runs / refuses / misserves), ``dspark``
    (its DSpark path, not its DFlash path) and ``why`` (one clause for verdicts and findings)."""

    status: str
    dspark: bool
    why: str


def flag(value: Any, default: bool) -> bool:
    """A layout declaration as the engines read it: a boolean, else the path's default."""
    return value if isinstance(value, bool) else default


def compare(trained: str, runs_anchor_first: bool, dspark: bool, what: str) -> EnginePath:
    """The path named ``what`` runs the draft anchor-first or 1+N; against the layout it was trained in."""
    ran = ANCHOR_FIRST if runs_anchor_first else ONE_PLUS_N
    if ran == trained:
        return EnginePath(RUNS, dspark, f"{what} runs it {trained}")
    return EnginePath(MISSERVES, dspark, f"{what} runs it {ran}, but it was trained {trained}: every draft is one "
                                         "position off and acceptance falls to ~1 with no error")


def one_plus_n(spec: DraftSpec, launch: str) -> EnginePath:
    """A DFlash path that reads no layout key: it runs every draft 1+N."""
    return compare(spec.block_layout.layout, False, False, f"{launch} (1+N only, no layout key read)")


def one_plus_n_path(launch: str) -> Callable[[DraftSpec], EnginePath]:
    """The ``path`` of an engine whose only path is ``one_plus_n`` under the name ``launch``."""
    def path(spec: DraftSpec) -> EnginePath:
        return one_plus_n(spec, launch)
    return path


def dspark_from_anchor(spec: DraftSpec, launch: str) -> EnginePath:
    """A DSpark path that reads the top-level ``sample_from_anchor`` (default true: anchor-first)."""
    return compare(spec.block_layout.layout, flag(spec.top("sample_from_anchor"), True), True,
                   f"{launch} (top-level sample_from_anchor, default true)")
