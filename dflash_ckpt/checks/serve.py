"""Serve lines: for a pair that passes, the command that launches it in each engine that loads it.

Each command is an argv list (JSON ``serve: {engine: argv}``), built by the engine's record
(``ENGINE.serve`` in ``checks/engines/<engine>.py``, which cites the engine's launch syntax) from
the checked facts (``ServeFacts``): the trained block, the drafts per block in the draft's block
layout (B-1 for 1+N, B for anchor-first), whether the engine serves the draft through its DSpark
path (``checks.layout``). An engine whose path would run the draft in the other block layout gets
no line (its verdict fails). An environment variable an engine needs is part of the argv through
``env``, so each list runs as it is. Draft and target are named as the user named them.
"""

from __future__ import annotations

import shlex

from dflash_ckpt.checks.engines.launch import UNSHOWN, ServeFacts, as_argument, quoted
from dflash_ckpt.checks.engines.reading import Verdict
from dflash_ckpt.checks.engines.registry import BY_KEY, SERVE_ENGINES
from dflash_ckpt.draftspec.specs import DraftSpec, TargetSpec
from dflash_ckpt.neutral import OPENER

__all__ = ["NOT_SHOWN", "SERVE_ENGINES", "as_argument", "quoted", "serve_commands", "shell_line"]


def serve_commands(spec: DraftSpec, target: TargetSpec, readers: dict[str, Verdict], *,
                   draft: str, target_name: str, revision: str | None = None,
                   target_revision: str | None = None) -> dict[str, list[str]]:
    """engine -> argv for each engine in ``SERVE_ENGINES`` whose verdict loads the draft.

    ``revision`` is the commit a Hub draft resolved to: vLLM and SGLang are told to load that one
    (the repo may change layout under its branch, DF314); ``target_revision`` the revision a Hub
    target was named with."""
    block = spec.block_size
    if block is None or block < 2:
        return {}
    draft, target_name = as_argument(draft), as_argument(target_name)
    drafts = spec.block_layout.drafts_per_block(block)
    out: dict[str, list[str]] = {}
    for key in SERVE_ENGINES:
        engine = BY_KEY[key]
        if engine.serve is not None and readers.get(key, Verdict(False, "")).loads:
            out[key] = engine.serve(ServeFacts(spec, target, block, drafts, engine.path(spec).dspark, draft,
                                               target_name, revision, target_revision))
    return out


def shell_line(argv: list[str]) -> str | None:
    """One line a user pastes into a POSIX shell (``shlex.split`` gives ``argv`` back exactly), or
    None when an argument holds a character the line cannot carry faithfully (``UNSHOWN``: shown
    as an escape, or reordered, it would paste as something else). No CI runner reads it as a
    command."""
    if any(UNSHOWN.search(arg) for arg in argv):
        return None
    # ``##[`` in a line is a CI runner's command (``neutral``): every one is inside single quotes
    # (``#`` and ``[`` are quoted), where ``''`` ends and reopens the quote: the same argument.
    return OPENER.sub(r"\1''[", shlex.join(argv))


#: What the report says instead of a serve line ``shell_line`` cannot show.
NOT_SHOWN = ("not shown: an argument holds a newline, control character, bidi mark or byte that is not UTF-8, "
             "which a pasted line would not keep; the exact argv is in --json 'serve'")
