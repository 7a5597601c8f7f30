"""Every third-party package the package imports is one pyproject.toml installs.

A dependency is declared for what the code imports, and only for that: ``safetensors`` was a base
dependency that no module imported (issue 40; it now sits in the extras whose scripts and tests
use it), and a module importing a package that no requirement brings fails on a clean install.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: Imported directly but installed by a declared requirement (its own dependency), with which one.
BROUGHT_BY = {"click": "typer", "httpx2": "huggingface_hub"}


def _requirement_names(requirements: list[str]) -> set[str]:
    return {re.split(r"[\s<>=!~\[;@]", r, maxsplit=1)[0].lower().replace("-", "_") for r in requirements}


def _imported_packages() -> dict[str, str]:
    """Top-level third-party name -> the first module of the package importing it."""
    found: dict[str, str] = {}
    for path in sorted((ROOT / "dflash_ckpt").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top != "dflash_ckpt":
                    found.setdefault(top, str(path.relative_to(ROOT)))
    return found


def test_every_imported_package_is_declared() -> None:
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    base = _requirement_names(project["dependencies"])
    extras = set().union(*(_requirement_names(r) for r in project["optional-dependencies"].values()))
    imported = _imported_packages()
    assert {"typer", "huggingface_hub", "torch"} <= set(imported), imported  # the scan sees the imports
    undeclared = {name: where for name, where in imported.items()
                  if name.lower() not in base | extras and BROUGHT_BY.get(name) not in base}
    assert not undeclared, f"imported but installed by no requirement of pyproject.toml: {undeclared}"
    unused = base - set(imported) - set(BROUGHT_BY.values())
    assert not unused, f"base dependencies that no module of the package imports: {sorted(unused)}"
