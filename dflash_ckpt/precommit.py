"""The pre-commit hook: ``inspect`` every draft folder whose config.json changed.

pre-commit passes the changed files that match the hook's ``files`` pattern (``config.json``);
inspect takes folders. So the files become their folders (each once, in order) and every other
argument (``--strict``, ``--select``, ``--target`` ...) goes to inspect as given:

    dflash-ckpt-pre-commit [INSPECT OPTIONS] PATH/config.json...

A ``config.json`` file that is not in a draft folder is still inspected (and fails): restrict the
hook with ``files:`` in ``.pre-commit-config.yaml`` to where the drafts live.
"""

from __future__ import annotations

import os
import sys

#: inspect options that take a value (the value is never a file to map to its folder).
_VALUED = {"--target", "-t", "--from-file", "--revision", "--token", "--select", "--ignore", "--require-engines",
           "--output-format"}


def folders_and_options(argv: list[str]) -> tuple[list[str], list[str]]:
    """``(draft folders, inspect options)`` from the hook's arguments."""
    folders: list[str] = []
    options: list[str] = []
    args = iter(argv)
    for arg in args:
        if arg.startswith("-"):
            options.append(arg)
            if arg in _VALUED:
                options.append(next(args, ""))
            continue
        folder = os.path.dirname(arg) if os.path.basename(arg) == "config.json" else arg
        folder = folder or "."
        if folder not in folders:
            folders.append(folder)
    return folders, options


def main(argv: list[str] | None = None) -> int:
    """Run inspect on the folders; exit as inspect exits (0 clean, 1 findings, 2 unreadable)."""
    from dflash_ckpt.cli import run

    folders, options = folders_and_options(sys.argv[1:] if argv is None else argv)
    if not folders:
        return 0  # no config.json changed: nothing to check
    return run(["inspect", *folders, *options])


if __name__ == "__main__":
    sys.exit(main())
