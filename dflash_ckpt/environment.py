"""Where the tool runs, as a bug report or a validation report needs it: the tool's version and
commit, Python, the libraries, torch and the GPU (when torch is installed: imported here, lazily),
the engines found, the CPU and the numeric path its bf16 matrix products take.

Read-only and best effort: a fact that cannot be read is ``None``, never an error. Nothing is
built or started (the AVX2 kernel is named, not compiled; vLLM's facts are read from its files by
its own python, as ``smoke-run --engine vllm`` reads them). torch is imported only by
``collect(torch=True)``: ``dflash-ckpt env`` asks for it, inspect's report does not.
"""

from __future__ import annotations

import importlib.metadata as md
import importlib.util
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

from dflash_ckpt._version import __version__

#: Libraries whose versions change what the tool does (the run extra, the hf extra, the report's).
LIBRARIES = ("torch", "transformers", "tokenizers", "safetensors", "huggingface_hub", "typer", "rich", "matplotlib")
#: Engines looked for in this python (vLLM also in ``DFLASH_CKPT_VLLM_PYTHON``'s): distribution names.
ENGINES = {"sglang": "sglang", "lmdeploy": "lmdeploy", "tensorrt-llm": "tensorrt_llm", "mlx-vlm": "mlx-vlm",
           "exllamav3": "exllamav3"}


def collect(*, torch: bool = True, engines: bool = True) -> dict[str, Any]:
    """Every fact, as JSON-ready data (``torch``: import torch for its build and the GPUs;
    ``engines``: look for the serving engines, vLLM through its python)."""
    return {
        "tool": {"version": __version__, "commit": git_commit(), "location": str(Path(__file__).resolve().parent)},
        "python": {"version": platform.python_version(), "executable": sys.executable, "platform": platform.platform()},
        "libraries": {name: _version(name) for name in LIBRARIES},
        "cpu": cpu_facts(),
        "torch": torch_facts() if torch else None,
        "engines": engine_facts() if engines else None,
    }


def git_commit() -> str | None:
    """The checkout's commit (``+ changes`` when files differ from it), or None outside a git
    checkout (an installed wheel)."""
    root = Path(__file__).resolve().parent.parent
    if not (root / ".git").exists():
        return None
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    commit = head.stdout.strip()
    if head.returncode != 0 or not commit:
        return None
    return commit + (" + changes" if dirty.returncode == 0 and dirty.stdout.strip() else "")


def _version(dist: str) -> str | None:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


def cpu_facts() -> dict[str, Any]:
    """The CPU's model, logical cores, the instruction sets the bf16 paths need, and the path a
    bf16 matrix product takes here (``runtime/prepack.py``, ``runtime/cpu_kernel.py``): oneDNN's
    packed path (AVX-512 or AVX-NE-CONVERT), else the AVX2 kernel, else torch's plain one."""
    model, flags = None, set()
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and model is None:
                model = value.strip()
            elif key.strip() == "flags" and not flags:
                flags = set(value.split())
    except OSError:
        pass
    model = model or platform.processor() or None
    onednn = bool({"avx512bw", "avx512vl", "avx512dq"} <= flags or "avx_ne_convert" in flags)
    isa_cap = os.environ.get("ONEDNN_MAX_CPU_ISA", "").upper()
    if isa_cap and not isa_cap.startswith(("AVX512", "AVX10", "ALL", "DEFAULT")):
        onednn = False  # capped below AVX-512 (ONEDNN_MAX_CPU_ISA=AVX2), as the tests force it
    kernel = {"avx2", "fma"} <= flags and os.environ.get("DFLASH_CKPT_NO_KERNEL") != "1"
    path = "onednn-packed" if onednn else "avx2-kernel" if kernel else "torch"
    return {"model": model, "logical_cores": os.cpu_count(), "machine": platform.machine(),
            "avx2": "avx2" in flags, "avx512_bf16": "avx512_bf16" in flags, "amx_bf16": "amx_bf16" in flags,
            "bf16_linear_path": path if flags else None}


def torch_facts() -> dict[str, Any] | None:
    """torch's build and each GPU it sees (name, memory, compute capability), with the driver
    ``nvidia-smi`` reports; None without torch."""
    if importlib.util.find_spec("torch") is None:
        return None
    try:
        import torch
    except Exception as exc:  # noqa: BLE001 - a broken torch is a fact of the report, not a crash
        return {"error": f"{type(exc).__name__}: {exc}"}
    gpus = []
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            gpus.append({"name": p.name, "memory_gib": round(p.total_memory / 2**30, 1),
                         "capability": f"{p.major}.{p.minor}"})
    return {"version": torch.__version__, "cuda": torch.version.cuda, "threads": torch.get_num_threads(),
            "gpus": gpus, "driver": _nvidia_driver() if gpus else None}


def _nvidia_driver() -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    first = out.stdout.strip().splitlines()[:1]
    return first[0].strip() if out.returncode == 0 and first else None


def engine_facts() -> dict[str, Any]:
    """vLLM as ``smoke-run --engine vllm`` would run it (its python, version, DFlash), and the
    versions of the other engines installed in this python (None: not installed)."""
    from dflash_ckpt.engine_runners.vllm_facts import PYTHON_ENV, read_facts

    facts = read_facts()
    vllm = {"python": facts.python, "named_by": PYTHON_ENV if os.environ.get(PYTHON_ENV) else None,
            "installed": facts.installed, "version": facts.version, "distribution": facts.distribution,
            "dflash": facts.dflash}
    return {"vllm": vllm, **{key: _version(dist) for key, dist in ENGINES.items()}}


def lines(facts: dict[str, Any]) -> list[str]:
    """The facts as ``name: value`` lines, in the order a bug report reads them."""
    tool, py, cpu = facts["tool"], facts["python"], facts["cpu"]
    out = [f"dflash-ckpt: {tool['version']}, commit {tool['commit'] or 'unknown (not a git checkout)'} ({tool['location']})",
           f"python: {py['version']} ({py['executable']}), {py['platform']}",
           "libraries: " + ", ".join(f"{k} {v or '-'}" for k, v in facts["libraries"].items())]
    isa = [name for name, on in (("AVX2", cpu["avx2"]), ("AVX512-BF16", cpu["avx512_bf16"]), ("AMX-BF16", cpu["amx_bf16"])) if on]
    out.append(f"cpu: {cpu['model'] or 'unknown'}, {cpu['logical_cores']} logical cores, {cpu['machine']}"
               + (f", {' '.join(isa)}" if isa else "") + f"; bf16 linear path: {cpu['bf16_linear_path'] or 'unknown'}")
    t = facts.get("torch")
    if t is None:
        out.append("torch: not installed (inspect and normalize need none; smoke-run needs the run extra)")
    elif "error" in t:
        out.append(f"torch: installed, fails to import ({t['error']})")
    else:
        gpus = "; ".join(f"{g['name']} ({g['memory_gib']} GiB, sm {g['capability']})" for g in t["gpus"]) or "none"
        out.append(f"torch: {t['version']}" + (f", CUDA {t['cuda']}" if t["cuda"] else ", CPU build")
                   + f", {t['threads']} threads; GPU: {gpus}" + (f", driver {t['driver']}" if t["driver"] else ""))
    e = facts.get("engines")
    if e is not None:
        v = e["vllm"]
        where = f" ({v['named_by']}={v['python']})" if v["named_by"] else ""
        out.append("vllm: " + (f"{v['distribution']} {v['version']}{where}, DFlash {'yes' if v['dflash'] else 'no'}"
                               if v["installed"] else f"not installed{where}"))
        out.append("other engines: " + ", ".join(f"{k} {e[k] or '-'}" for k in ENGINES))
    return out


__all__ = ["collect", "cpu_facts", "git_commit", "lines", "torch_facts"]
