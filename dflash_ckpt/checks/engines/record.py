"""The record of one engine: everything the project knows about it, in the engine's own file.

Each ``checks/engines/<engine>.py`` defines one ``ENGINE = Engine(...)``; ``checks.engines.registry``
lists them, and every table keyed by an engine is derived from that list: the readers table and
JSON ``readers`` (``judge``), the titles, ``--require-engines``, the block layout its path runs
(``path``: ``checks.layout``, DF160/DF163), the serve lines (``serve``), the acceptance keys it
is counted as ignoring (``serves``), and the rules it owns (``rules``, rows in ``rule_tables``).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

from dflash_ckpt.checks.engines.launch import ServeFacts
from dflash_ckpt.checks.engines.reading import EnginePath, Verdict
from dflash_ckpt.checks.engines.versions import Versions
from dflash_ckpt.draftspec.specs import DraftSpec, TargetSpec

Judge = Callable[[DraftSpec, TargetSpec | None], Verdict]
Gate = Callable[[DraftSpec, TargetSpec | None], list[str]]


class Engine(NamedTuple):
    """One engine. Only ``key``, ``title``, ``judge`` and ``path`` are required; the rest
    default to "has none"."""

    #: Short name: ``--require-engines``, JSON ``readers`` and ``serve`` keys.
    key: str
    #: How a report names it.
    title: str
    #: Where it reads each DFlash key and what else its loader demands (its DFlash path).
    judge: Judge
    #: Which block layout its path runs the draft in, and whether through its DSpark path.
    path: Callable[[DraftSpec], EnginePath]
    #: How its launch line names its DSpark path (``None``: it has none); its DSpark verdict says it.
    dspark_launch: str | None = None
    #: The sibling families (``draftspec.siblings``: LiLiCorr, Laguna) it has a path for.
    families: frozenset[str] = frozenset()
    #: What its sibling-family paths require of the draft (one clause per problem).
    family_gate: Gate | None = None
    #: Whether it renames Muse-Glimmer's ``encoder.fc`` to ``fc`` (others find no fc.weight).
    renames_muse_glimmer: bool = False
    #: What it needs of DFlash2 content (one clause per problem).
    dflash2_gate: Gate | None = None
    #: A last clause on a verdict that loads (vLLM: what its V1 runner refuses), or ``None``.
    loading_note: Callable[[DraftSpec], str | None] | None = None
    #: Its launch command for a pair that passes, and where it comes among the serve lines.
    serve: Callable[[ServeFacts], list[str]] | None = None
    serve_rank: int = 0
    #: Whether it serves drafts itself (speculators converts them for vLLM and serves nothing):
    #: an engine that serves is counted among those that ignore an acceptance key (DF150).
    serves: bool = True
    #: The codes of the rules it owns (rows in ``rule_tables/<engine>.py``).
    rules: tuple[str, ...] = ()
    #: What it does with the speculators-native format (``draftspec.speculators_format``): the
    #: clause of a row that loads it (read through its z-lab view), or ``None``: it has no reader
    #: of the format, and its row fails saying so, with ``speculators_fact``.
    speculators_reader: str | None = None
    #: Where its row's speculators fact comes from, or that none was read.
    speculators_fact: str = "unknown/not read: none is known in its source (shared/ecosystem-2026-12.md names none)"
    #: The releases (or commit) its facts were read or measured against (``checks.engines.versions``).
    versions: Versions | None = None
