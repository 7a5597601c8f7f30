"""Run the serve line the tool prints in vLLM's OpenAI server and read acceptance from ``/metrics``.

The argv is the printed one (JSON ``serve.vllm``) plus only what a local run needs
(``local_argv``: ``--host 127.0.0.1``, a free port, ``--served-model-name``); it runs through
``serve_launch.py`` (the CPU build's ``vllm`` command cannot start as it is installed) under the
same subreaper launcher as every engine child (``reaper.py``), in a session of its own, so no
server outlives the run however it ends. Readiness is ``/health`` answering 200 before a
deadline; each prompt goes to ``/v1/completions`` as token ids (greedy, fixed ``max_tokens``),
and ``/metrics`` is scraped before and after each request: the differences of vLLM's
spec-decode counters are that request's drafts, draft tokens and accepted tokens (per position).

Torch-free and vLLM-free at import; HTTP through the standard library, loopback only.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from dflash_ckpt.engine_runners.vllm_run import (REAPER, EngineFailed, _read_json, child_env, how_it_ended,
                                          last_error_line, signals_interrupt, stop_child)

LAUNCH = Path(__file__).with_name("serve_launch.py")
HOST = "127.0.0.1"
#: The name the local server serves the target under (``--served-model-name``).
SERVED_NAME = "dflash-ckpt-target"
#: Seconds a server may take to answer /health (a start on 2 shared cores takes 60-90 s).
READY_TIMEOUT_S = 600.0
#: Seconds one completion request may take.
REQUEST_TIMEOUT_S = 300.0
#: The counters read from /metrics (vLLM 0.32-0.34 names), by the key they are reported under.
COUNTERS = {"drafts": "vllm:spec_decode_num_drafts_total",
            "draft_tokens": "vllm:spec_decode_num_draft_tokens_total",
            "accepted": "vllm:spec_decode_num_accepted_tokens_total"}
PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\d+)?$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


# -- the argv ----------------------------------------------------------------------------------------


def split_env(argv: Sequence[str]) -> tuple[dict[str, str], list[str]]:
    """A printed argv's leading ``env VAR=VALUE ...`` (the environment it needs) and the rest."""
    args = list(argv)
    env: dict[str, str] = {}
    if args and args[0] == "env":
        args = args[1:]
        while args and "=" in args[0] and not args[0].startswith("-"):
            key, _, value = args.pop(0).partition("=")
            env[key] = value
    return env, args


def local_argv(serve: Sequence[str], port: int, name: str = SERVED_NAME) -> list[str]:
    """The printed ``vllm serve`` argv plus what a local run needs and nothing else."""
    _, args = split_env(serve)
    if args[:2] != ["vllm", "serve"]:
        raise ValueError(f"not a vllm serve line: {' '.join(serve[:3])}")
    return [*args, "--host", HOST, "--port", str(port), "--served-model-name", name]


def local_additions(ran: Sequence[str], printed: Sequence[str]) -> list[str]:
    """What ``ran`` has beyond ``printed`` (its env prefix set aside); raises ``ValueError`` when
    ``ran`` does not start with the printed argv exactly."""
    _, args = split_env(printed)
    if list(ran[:len(args)]) != args:
        raise ValueError("the argv that ran does not start with the printed serve line")
    return list(ran[len(args):])


def free_port() -> int:
    """A port on the loopback interface no one listens on now (the kernel's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


# -- /metrics ----------------------------------------------------------------------------------------


def parse_metrics(text: str) -> list[tuple[str, dict[str, str], float]]:
    """Prometheus text format samples: (name, labels, value); comments and bad lines skipped."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        labels = {k: v for k, v in _LABEL.findall(m.group(2) or "")}
        out.append((m.group(1), labels, value))
    return out


def spec_counters(text: str, model: str | None = None) -> dict[str, Any]:
    """vLLM's spec-decode counters from a /metrics page, summed over engines (only ``model``'s
    when given): drafts, draft tokens, accepted tokens and accepted tokens per position."""
    counts: dict[str, Any] = {key: 0.0 for key in COUNTERS}
    per: dict[int, float] = {}
    names = {v: k for k, v in COUNTERS.items()}
    for name, labels, value in parse_metrics(text):
        if model is not None and labels.get("model_name", model) != model:
            continue
        if name in names:
            counts[names[name]] += value
        elif name == PER_POS and labels.get("position", "").isdigit():
            pos = int(labels["position"])
            per[pos] = per.get(pos, 0.0) + value
    counts["accepted_per_pos"] = [per.get(k, 0.0) for k in range(max(per) + 1)] if per else []
    return counts


def difference(after: Mapping[str, Any], before: Mapping[str, Any]) -> dict[str, Any]:
    """``after - before`` counter by counter (positions aligned; a missing one is 0). A counter
    that went down means the server restarted between the scrapes: ``ValueError``."""
    out: dict[str, Any] = {}
    for key in COUNTERS:
        out[key] = after.get(key, 0.0) - before.get(key, 0.0)
    a, b = list(after.get("accepted_per_pos", [])), list(before.get("accepted_per_pos", []))
    n = max(len(a), len(b))
    out["accepted_per_pos"] = [(a + [0.0] * n)[k] - (b + [0.0] * n)[k] for k in range(n)]
    if any(v < 0 for k, v in out.items() if k != "accepted_per_pos") or any(v < 0 for v in out["accepted_per_pos"]):
        raise ValueError("a /metrics counter went down between two scrapes (the server restarted)")
    return {k: (int(v) if isinstance(v, float) and v.is_integer() else v) if k != "accepted_per_pos"
            else [int(x) if float(x).is_integer() else x for x in v] for k, v in out.items()}


def add(total: Mapping[str, Any], part: Mapping[str, Any]) -> dict[str, Any]:
    """Two counter sets summed (positions aligned)."""
    out = {key: total.get(key, 0) + part.get(key, 0) for key in COUNTERS}
    a, b = list(total.get("accepted_per_pos", [])), list(part.get("accepted_per_pos", []))
    n = max(len(a), len(b))
    out["accepted_per_pos"] = [(a + [0] * n)[k] + (b + [0] * n)[k] for k in range(n)]
    return out


def tau(counters: Mapping[str, Any]) -> float | None:
    """Mean tokens per target forward: 1 + accepted / drafts (``None`` with no drafts)."""
    drafts = counters.get("drafts", 0)
    return 1 + counters.get("accepted", 0) / drafts if drafts else None


def per_position(counters: Mapping[str, Any]) -> list[float]:
    """Acceptance rate at each draft position: accepted there / drafts."""
    drafts = counters.get("drafts", 0)
    return [x / drafts for x in counters.get("accepted_per_pos", [])] if drafts else []


# -- HTTP ---------------------------------------------------------------------------------------------


def http(url: str, payload: Mapping[str, Any] | None = None, timeout: float = 10.0) -> tuple[int, bytes]:
    """GET (or POST ``payload`` as JSON) on the loopback server: (status, body). Refuses any host
    but ``HOST``; connection errors raise ``OSError``."""
    if not url.startswith(f"http://{HOST}:"):
        raise ValueError(f"{url}: loopback only")
    data = json.dumps(payload).encode() if payload is not None else None
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - loopback http only
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def wait_ready(base: str, deadline_s: float, alive: Callable[[], bool], *, poll_s: float = 0.5,
               clock: Callable[[], float] = time.monotonic) -> float:
    """Poll ``base/health`` until it answers 200; the seconds it took. ``TimeoutError`` past the
    deadline, ``ChildProcessError`` when ``alive()`` says the server is gone."""
    start = clock()
    while True:
        if not alive():
            raise ChildProcessError("the server exited before it was ready")
        try:
            status, _ = http(f"{base}/health", timeout=min(5.0, max(0.5, deadline_s)))
            if status == 200:
                return clock() - start
        except OSError:
            pass
        if clock() - start > deadline_s:
            raise TimeoutError(f"the server was not ready within {deadline_s:g} s")
        time.sleep(poll_s)


def metrics(base: str, model: str | None = None) -> dict[str, Any]:
    status, body = http(f"{base}/metrics")
    if status != 200:
        raise OSError(f"/metrics answered {status}")
    return spec_counters(body.decode("utf-8", "replace"), model)


def completion_payload(model: str, ids: Sequence[int], *, max_tokens: int, stop_token_ids: Sequence[int] = (),
                       top_logprobs: int = 0) -> dict[str, Any]:
    """The ``/v1/completions`` body: the prompt as token ids, greedy, ``max_tokens`` new tokens
    at most, the run's stop ids, the generated ids back (``return_token_ids``) and, with
    ``top_logprobs``, that many top log-probabilities per token keyed ``token_id:N``."""
    payload: dict[str, Any] = {"model": model, "prompt": list(ids), "max_tokens": max_tokens, "temperature": 0.0,
                               "stop_token_ids": list(stop_token_ids), "return_token_ids": True,
                               "skip_special_tokens": False}
    if top_logprobs:
        payload.update({"logprobs": top_logprobs, "return_tokens_as_token_ids": True})
    return payload


def read_tops(choice: Mapping[str, Any]) -> list[list[list[float]]]:
    """Per generated token, its top ``[id, logprob]`` pairs from a choice's ``logprobs``."""
    rows = ((choice.get("logprobs") or {}).get("top_logprobs")) or []
    out = []
    for row in rows:
        pairs = []
        for key, value in (row or {}).items():
            tail = str(key).rpartition("token_id:")[2]
            if tail.isdigit() and isinstance(value, (int, float)):
                pairs.append([int(tail), float(value)])
        out.append(pairs)
    return out


def complete(base: str, model: str, ids: Sequence[int], *, max_tokens: int, stop_token_ids: Sequence[int] = (),
             top_logprobs: int = 0, timeout: float = REQUEST_TIMEOUT_S,
             with_tops: bool = False) -> Any:
    """One ``/v1/completions`` request; the generated token ids (and, ``with_tops``, their top
    log-probabilities)."""
    payload = completion_payload(model, ids, max_tokens=max_tokens, stop_token_ids=stop_token_ids,
                                 top_logprobs=top_logprobs)
    status, body = http(f"{base}/v1/completions", payload, timeout=timeout)
    if status != 200:
        raise OSError(f"/v1/completions answered {status}: {body[:300].decode('utf-8', 'replace')}")
    choice = json.loads(body)["choices"][0]
    tokens = choice.get("token_ids")
    if not isinstance(tokens, list):
        raise OSError("/v1/completions gave no token_ids (return_token_ids unsupported by this vLLM)")
    tokens = [int(t) for t in tokens]
    return (tokens, read_tops(choice)) if with_tops else tokens


# -- the server ---------------------------------------------------------------------------------------


@dataclass
class Server:
    """A running server: its base URL, the argv that ran, its log, its launcher process."""

    argv: list[str]
    base: str
    log: Path
    proc: subprocess.Popen[bytes]
    work: Path
    start_s: float = 0.0
    status_path: Path = field(default_factory=Path)

    def alive(self) -> bool:
        return self.proc.poll() is None


def _failed(server: Server, what: str, where: str) -> EngineFailed:
    status = _read_json(server.status_path)
    ended = how_it_ended(status, server.proc.returncode) if server.proc.returncode is not None else None
    said = ended if ended and "died by" in ended else f"{what}: {last_error_line(server.log)}"
    return EngineFailed(f"vLLM's server {said}; the server's log is kept in {server.log}", code="DF425", path=where)


class served:
    """``with served(printed_argv, python=..., where=...) as server:`` starts the printed serve line
    (plus host, port, name) under the launcher, waits for /health, and on leaving stops the
    launcher's tree whatever happened; the log is deleted after a good run and kept after a bad one."""

    def __init__(self, printed: Sequence[str], *, python: str, where: str, kv_space_gib: int | None = None,
                 ready_timeout_s: float = READY_TIMEOUT_S, env: Mapping[str, str] | None = None,
                 name: str = SERVED_NAME, cwd: str | None = None, extra_args: Sequence[str] = ()) -> None:
        self.printed, self.python, self.where = list(printed), python, where
        self.kv_space_gib, self.ready_timeout_s, self.extra_env, self.name = kv_space_gib, ready_timeout_s, env, name
        self.extra_args = list(extra_args)  # a run's own flags beyond the line (--tensor-parallel-size)
        self.cwd = cwd  # the printed line names paths as the user gave them: run it where they are
        self.server: Server | None = None
        self._interrupt: Any = None

    def __enter__(self) -> Server:
        port = free_port()
        argv = [*local_argv(self.printed, port, self.name), *self.extra_args]
        work = Path(tempfile.mkdtemp(prefix="dflash-ckpt-serve-"))
        log_path, status_path = work / "server.log", work / "status.json"
        env = child_env(self.kv_space_gib, work)
        env["VLLM_ENABLE_V1_MULTIPROCESSING"] = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "1")
        env.update(split_env(self.printed)[0])
        env.update(self.extra_env or {})
        cmd = [self.python, str(REAPER), str(status_path), str(os.getpid()), self.python, str(LAUNCH), *argv]
        self._interrupt = signals_interrupt()
        self._interrupt.__enter__()
        log = open(log_path, "wb")
        try:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True, cwd=self.cwd or str(work), env=env)
        except BaseException:
            self._stop()
            raise
        finally:
            log.close()
        self.server = Server(argv, f"http://{HOST}:{port}", log_path, proc, work, status_path=status_path)
        try:
            self.server.start_s = wait_ready(self.server.base, self.ready_timeout_s, self.server.alive)
        except BaseException as exc:
            self._stop()
            if isinstance(exc, TimeoutError):
                raise _failed(self.server, f"was not ready within {self.ready_timeout_s:g} s", self.where) from None
            if isinstance(exc, ChildProcessError):
                raise _failed(self.server, "exited before it was ready", self.where) from None
            raise
        return self.server

    def _stop(self) -> None:
        if self.server is not None:
            stop_child(self.server.proc)
            shutil.rmtree(self.server.work / "caches", ignore_errors=True)
        if self._interrupt is not None:
            self._interrupt.__exit__(None, None, None)
            self._interrupt = None

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> None:
        self._stop()
        if kind is None and self.server is not None:
            for path in (self.server.log, self.server.status_path):
                path.unlink(missing_ok=True)
            try:
                self.server.work.rmdir()
            except OSError:
                pass


def run_prompts(server: Server, encoded: Sequence[list[int]], *, max_tokens: int, stop_token_ids: Sequence[int] = (),
                top_logprobs: int = 0, where: str = "") -> list[dict[str, Any]]:
    """Each prompt in turn, one request at a time: its tokens and the counters' difference over it."""
    out = []
    if encoded:  # untimed, uncounted: the server's first request pays one-time costs
        try:
            complete(server.base, SERVED_NAME, encoded[0], max_tokens=min(max_tokens, 8), stop_token_ids=stop_token_ids)
        except (OSError, ValueError):
            pass  # the timed requests below say what is wrong
    for ids in encoded:
        try:
            before = metrics(server.base)
            t0 = time.perf_counter()
            tokens, tops = complete(server.base, SERVED_NAME, ids, max_tokens=max_tokens,
                                    stop_token_ids=stop_token_ids, top_logprobs=top_logprobs, with_tops=True)
            seconds = time.perf_counter() - t0
            counted = difference(metrics(server.base), before)
        except (OSError, ValueError) as exc:
            if not server.alive():
                raise _failed(server, "exited", where) from None
            raise EngineFailed(f"vLLM's server: {exc}; the server's log is kept in {server.log}", code="DF425",
                               path=where) from None
        out.append({"tokens": tokens, "tops": tops, "seconds": seconds, "metrics": counted, "tau": tau(counted),
                    "per_position": per_position(counted)})
    return out


def summary(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The runs' counters summed, their tau and per-position acceptance."""
    total: dict[str, Any] = {"drafts": 0, "draft_tokens": 0, "accepted": 0, "accepted_per_pos": []}
    for r in runs:
        total = add(total, r["metrics"])
    return {"metrics": total, "tau": tau(total), "per_position": per_position(total)}


__all__ = ["COUNTERS", "HOST", "LAUNCH", "PER_POS", "SERVED_NAME", "Server", "add", "complete", "difference",
           "free_port", "local_additions", "local_argv", "metrics", "parse_metrics", "per_position", "run_prompts",
           "served", "spec_counters", "split_env", "summary", "tau", "wait_ready"]
