"""``inspect``'s options, apart from the other commands' (``run/options.py``), with every default once.

Kept apart so that ``inspect`` starts without building the other commands' dataclasses: turning
smoke-run's forty fields into an ``__init__`` costs a few milliseconds, a twentieth of inspect's
start. The fields are the CLI's long options with its defaults, as in ``run/options.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NewType, Sequence

#: A file or folder named as text (or a Hub repo id): what the run reads is a ``str``; the API
#: takes an ``os.PathLike`` there too (``api_types.api_hint``).
PathText = NewType("PathText", str)


@dataclass
class InspectOptions:
    """``dflash-ckpt inspect DRAFT... [--target T]``: ``select``, ``ignore`` and
    ``require_engines`` are lists of codes or names (comma lists allowed)."""

    draft: PathText | Sequence[PathText]
    target: PathText | None = None
    revision: str | None = None
    token: str | None = None
    strict: bool = False
    select: Sequence[str] = ()
    ignore: Sequence[str] = ()
    require_engines: Sequence[str] = ()
