"""Import a fixtures/ or benchmarks/ script as tests/test_house.py does, skipping (not failing) a
script whose optional extra is not installed.

The house test imports every script so that a moved name fails at once; but a script that needs
the ``hf`` extra (benchmarks/bench_backends.py, through the transformers backend) cannot import
where only the base and ``run`` extras are, and that is no moved name. Only a missing top-level
package that one of pyproject.toml's extras installs is a skip, and the skip names the extra: a
missing module of the project itself (``dflash_ckpt.x``), a missing package no extra provides, or
a missing submodule of an installed package is still the failure it is.
"""

from __future__ import annotations

import functools
import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@functools.lru_cache(maxsize=1)
def optional_packages() -> dict[str, str]:
    """Top-level import name -> the extra of pyproject.toml that installs it (the first extra
    listing it), e.g. ``transformers`` -> ``hf``, ``torch`` -> ``run``."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        tomllib = pytest.importorskip("tomli")
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    out: dict[str, str] = {}
    for extra, requirements in extras.items():
        for requirement in requirements:
            name = re.split(r"[\s<>=!~\[;@]", requirement, maxsplit=1)[0]
            out.setdefault(name.lower().replace("-", "_"), extra)
    return out


def _installed(name: str) -> bool:
    """Whether the package can be found (a blocked or absent one cannot)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def missing_extra(err: ModuleNotFoundError) -> str | None:
    """The extra to install when ``err`` is a package of an extra that is not installed; None for
    every other missing module, which stays a failure."""
    top = (err.name or "").split(".")[0]
    extra = optional_packages().get(top)
    if extra is None or err.name != top or _installed(top):
        return None
    return extra


def import_script(script: Path) -> None:
    """Import ``script`` as a module (``__name__`` is not ``__main__``, so no ``main`` runs); skip
    the calling test, naming the extra, when the script needs one that is not installed."""
    rel = script.relative_to(ROOT) if script.is_relative_to(ROOT) else script
    name = "house_check_" + "_".join(rel.with_suffix("").parts).replace("/", "_")
    spec = importlib.util.spec_from_file_location(name, script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except ModuleNotFoundError as err:
        extra = missing_extra(err)
        if extra is None:
            raise
        pytest.skip(f"{rel} needs the {extra!r} extra ({err.name} is not installed: "
                    f"pip install 'dflash-ckpt[{extra}]')")
    finally:
        sys.modules.pop(name, None)
