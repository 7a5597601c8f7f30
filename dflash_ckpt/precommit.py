"""The pre-commit hook: ``inspect`` every draft folder whose config.json changed.

pre-commit passes the changed files that match the hook's ``files`` pattern (``config.json``);
inspect takes folders. So the files become their folders (each once, in order) and every other
argument (``--strict``, ``--select``, ``--target`` ...) goes to inspect as given:

    dflash-ckpt-pre-commit [INSPECT OPTIONS] [--] PATH/config.json...

An argument that names a ``config.json`` is a file whatever it starts with: a draft in a folder
named ``--token=x`` or ``--revision=main`` is inspected, never read as an option (and everything
after ``--`` is a file). The folders are passed on after ``--``, so inspect cannot take one for an
option either.

A ``config.json`` that is no model's (``tools/config.json``: no ``architectures``, ``model_type``
or DFlash key, no safetensors beside it) is skipped, so a repository's other settings files do
not fail the hook; a model folder that is not a draft (a target) gets DF232. To check only some
folders, narrow the hook with ``files:`` in ``.pre-commit-config.yaml`` (``files: ^drafts/.*config\\.json$``).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

#: inspect options that take a value (the value is never a file to map to its folder).
_VALUED = {"--target", "-t", "--from-file", "--revision", "--token", "--select", "--ignore", "--require-engines",
           "--output-format", "--annotations"}
#: Keys of a model's config.json (any one makes the folder a model folder worth inspecting).
_MODEL_KEYS = ("architectures", "model_type", "dflash_config", "block_size", "target_layer_ids")
#: A config.json larger than this is inspected without being read here (inspect has its own caps).
_SNIFF_MAX_BYTES = 1_000_000


def is_config_file(arg: str) -> bool:
    """Whether ``arg`` names a config.json (a path, not an option, whatever it starts with)."""
    return os.path.basename(arg) == "config.json"


def folders_and_options(argv: list[str]) -> tuple[list[str], list[str]]:
    """``(draft folders, inspect options)`` from the hook's arguments."""
    folders: list[str] = []
    options: list[str] = []
    args = iter(argv)
    files_only = False
    for arg in args:
        if arg == "--" and not files_only:
            files_only = True
            continue
        if not files_only and arg.startswith("-") and not is_config_file(arg):
            options.append(arg)
            if arg in _VALUED:
                options.append(next(args, ""))
            continue
        folder = os.path.dirname(arg) if is_config_file(arg) else arg
        folder = folder or "."
        if folder not in folders:
            folders.append(folder)
    return folders, options


def is_model_folder(folder: str) -> bool:
    """Whether ``folder`` holds a model (weights, or a config with a model's keys). A config that
    cannot be read or parsed counts as one: inspect says what is wrong with it."""
    path = Path(folder)
    try:
        if any(path.glob("*.safetensors")) or any(path.glob("*.safetensors.index.json")):
            return True
        config = path / "config.json"
        if not config.is_file() or config.stat().st_size > _SNIFF_MAX_BYTES:
            return True
        data = json.loads(config.read_bytes())
    except (OSError, ValueError):
        return True
    return not isinstance(data, dict) or any(k in data for k in _MODEL_KEYS)


def main(argv: list[str] | None = None) -> int:
    """Run inspect on the folders; exit as inspect exits (0 clean, 1 findings, 2 unreadable)."""
    from dflash_ckpt.cli import run

    folders, options = folders_and_options(sys.argv[1:] if argv is None else argv)
    models = [f for f in folders if is_model_folder(f)]
    skipped = len(folders) - len(models)
    if skipped:
        print(f"dflash-ckpt-pre-commit: skipped {skipped} config.json that hold no model "
              "(no architectures, model_type, DFlash key or safetensors)", file=sys.stderr)
    if not models:
        return 0  # no draft's config.json changed: nothing to check
    return run(["inspect", *options, "--", *models])
