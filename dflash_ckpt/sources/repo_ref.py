"""Hub repo ids as the command line spells them: ``org/name`` or ``org/name@revision``."""

from __future__ import annotations

import re
from typing import NamedTuple

from dflash_ckpt.errors import InputError

#: ``org/name`` as the Hub spells repo ids, optionally ``@revision``.
REPO_ID_RE = re.compile(r"^(?P<repo>[A-Za-z0-9][\w.\-]*/[\w.\-]+)(?:@(?P<rev>[^\s@]+))?$")


class RepoRef(NamedTuple):
    """A Hub repo id with an optional revision, parsed from ``org/name[@rev]``."""

    repo_id: str
    revision: str | None

    @property
    def label(self) -> str:
        return f"{self.repo_id}@{self.revision}" if self.revision else self.repo_id


def parse_repo_ref(arg: str, revision: str | None = None) -> RepoRef | None:
    """``org/name`` or ``org/name@rev`` as a ``RepoRef``; ``None`` if ``arg`` is not a repo id."""
    m = REPO_ID_RE.match(arg)
    if not m or ".." in m.group("repo") or m.group("repo").endswith(".json"):
        return None
    rev = m.group("rev")
    if rev and revision and rev != revision:
        raise InputError(
            f"revision given twice ('@{rev}' and --revision {revision}); keep one",
            code="DF001", path=arg,
        )
    return RepoRef(m.group("repo"), rev or revision)
