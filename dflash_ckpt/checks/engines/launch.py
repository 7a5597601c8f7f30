"""What an engine's serve-line builder receives (``ServeFacts``) and how it writes names and JSON
into an argv that a shell, JSON, Python and YAML all read back exactly (``checks.serve`` turns
the argv into the line a user pastes)."""

from __future__ import annotations

import json
import re
from typing import NamedTuple

from dflash_ckpt.draftspec.specs import DraftSpec, TargetSpec


class ServeFacts(NamedTuple):
    """The checked facts a serve line is built from, for one engine whose verdict loads the draft.

    ``block`` is the trained block (>= 2), ``drafts`` the drafts per block in the draft's layout
    (B-1 for 1+N, B for anchor-first), ``dspark`` whether this engine runs the draft through its
    DSpark path; ``draft`` and ``target`` are as the user named them (``as_argument``),
    ``revision`` the commit a Hub draft resolved to, ``target_revision`` the revision a Hub target
    was named with."""

    spec: DraftSpec
    target_spec: TargetSpec
    block: int
    drafts: int
    dspark: bool
    draft: str
    target: str
    revision: str | None
    target_revision: str | None


def revision_flag(rev: str | None) -> list[str]:
    """``--revision REV`` when a revision was named."""
    return ["--revision", rev] if rev else []


#: What a literal writes as ``\uXXXX`` and a pasted line cannot carry: control characters (a
#: newline, a tab that a shell would complete on), C1 controls, line separators, bidi controls and
#: marks (they reorder what is shown), lone surrogates (a byte that is not UTF-8, which Python
#: carries as ``\udcXX``) and non-characters.
UNSHOWN = re.compile(r"[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff\ufffe\uffff]")


def as_argument(name: str) -> str:
    """A draft or target as an engine's argument: a local path starting with ``-`` (which the
    engine's CLI would take for an option; no Hub id starts so) is written ``./-x``."""
    return "./" + name if name.startswith("-") else name


def quoted(text: str) -> str:
    """A double-quoted literal that JSON, Python and YAML all read back as exactly ``text``: the
    real characters (an emoji stays an emoji, not a pair of surrogate escapes that Python and YAML
    would read as two lone surrogates), with what cannot be shown written as ``\\uXXXX``."""
    return UNSHOWN.sub(lambda m: f"\\u{ord(m.group()):04x}", json.dumps(text, ensure_ascii=False))


def quoted_json(value: object) -> str:
    """``value`` as JSON text, its strings ``quoted``."""
    return UNSHOWN.sub(lambda m: f"\\u{ord(m.group()):04x}", json.dumps(value, ensure_ascii=False))
