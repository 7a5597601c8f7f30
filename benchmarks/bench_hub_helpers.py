#!/usr/bin/env python3
"""The huggingface_hub helpers ``sources/hub/`` could lean on further, met with hostile answers (issue 40).

    python benchmarks/bench_hub_helpers.py [--timeout 40]

``bench_hub_library.py`` measures the library's download calls; this one measures the helpers
that would replace the rest of our Hub layer, each in a fresh process against a loopback server
of its own (no Hub repo needed), so that what stays ours is kept for a measured reason:

- ``HfApi.list_repo_tree`` (instead of our capped repo-info request): one 63 MiB page of 600,000
  files, a server whose every page links to a next one, and a page dripped a byte a second;
- ``http_backoff`` (instead of ``retry.with_retries``): a 503 asking ``Retry-After: 86400``;
- ``filelock.FileLock`` (instead of ``canonical/lock.py``): a lock file planted as a hard link to
  a file of the user's;
- the import cost of ``huggingface_hub.constants`` and ``huggingface_hub.file_download`` (what
  ``hf_hub_cache()`` and ``try_to_load_from_cache`` would add to a cached ``inspect``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

CHILD = r"""
import json, os, sys, time
what, arg = sys.argv[1], sys.argv[2]
start = time.perf_counter()
n = 0
try:
    if what == "http_backoff":
        import huggingface_hub.utils._http as h
        def sleep(s):  # record the pause asked for instead of taking it
            if s > 100:
                raise SystemExit(f"would sleep {s:g} s")
        h.time.sleep = sleep
        h.http_backoff("GET", arg + "/api/models/a/b/tree/main")
    elif what == "filelock":
        from filelock import FileLock
        with FileLock(arg):
            pass
    else:
        from huggingface_hub import HfApi
        for _ in HfApi(endpoint=arg).list_repo_tree("a/b", recursive=True):
            n += 1
            if time.perf_counter() - start > 15:
                raise SystemExit(f"{n:,} files after 15 s, still paging")
    outcome = f"returned ({n:,} files)" if what.startswith("tree") else "returned"
except BaseException as exc:  # noqa: BLE001 - how the call ended is the measurement
    outcome = f"{type(exc).__name__}: {str(exc).strip()[:100]}"
hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print(json.dumps({"outcome": outcome, "seconds": time.perf_counter() - start, "hwm_kib": hwm}))
"""


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:  # quiet
        pass

    def _head(self, status: int, length: int, **extra: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(length))
        for k, v in extra.items():
            self.send_header(k.replace("_", "-"), v)
        self.end_headers()

    def do_GET(self) -> None:  # noqa: N802
        mode = self.server.mode  # type: ignore[attr-defined]
        one = json.dumps([{"type": "file", "oid": "0" * 40, "size": 1, "path": f"f{time.monotonic_ns()}"}]).encode()
        if mode == "tree: one 63 MiB page":
            body = self.server.big  # type: ignore[attr-defined]
            self._head(200, len(body))
            self.wfile.write(body)
        elif mode == "tree: endless pages":
            nxt = f"http://127.0.0.1:{self.server.server_port}/api/models/a/b/tree/main?cursor=x"
            self._head(200, len(one), Link=f'<{nxt}>; rel="next"')
            self.wfile.write(one)
        elif mode == "tree: page dripped":
            self._head(200, len(one))
            try:
                for b in one:
                    self.wfile.write(bytes([b]))
                    self.wfile.flush()
                    time.sleep(1)
            except (BrokenPipeError, ConnectionResetError):  # the child was killed: done
                pass
        else:  # Retry-After
            self._head(503, 0, Retry_After="86400")


def run(call: str, arg: str, timeout: float) -> dict[str, object]:
    env = {**os.environ, "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_OFFLINE": "0", "HF_TOKEN": "",
           "HF_HUB_DISABLE_IMPLICIT_TOKEN": "1"}
    start = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, "-c", CHILD, call, arg], capture_output=True, text=True,
                              timeout=timeout, env=env)
        got = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.stdout.strip() else {
            "outcome": f"exit {proc.returncode}", "hwm_kib": 0}
    except subprocess.TimeoutExpired:
        got = {"outcome": f"still running at {timeout:g} s (killed)", "hwm_kib": 0}
    got["seconds"] = time.monotonic() - start
    return got


def import_ms(module: str, rounds: int = 5) -> float:
    """Median cumulative time of ``import module`` in a fresh interpreter (``-X importtime``)."""
    def once() -> float:
        err = subprocess.run([sys.executable, "-X", "importtime", "-c", f"import {module}"], check=True,
                             capture_output=True, text=True).stderr
        return int(err.strip().splitlines()[-1].split("|")[1]) / 1000

    return sorted(once() for _ in range(rounds))[rounds // 2]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--timeout", type=float, default=40.0)
    args = ap.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    entries = [{"type": "file", "oid": "%040x" % i, "size": i, "path": f"d/{i:08d}.bin"} for i in range(600_000)]
    server.big = json.dumps(entries).encode()  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    endpoint = f"http://127.0.0.1:{server.server_port}"
    rows = ["tree: one 63 MiB page", "tree: endless pages", "tree: page dripped", "http_backoff: Retry-After 86400"]
    for mode in rows:
        server.mode = mode  # type: ignore[attr-defined]
        got = run(mode.split(":")[0] if mode.startswith("http") else mode, endpoint, args.timeout)
        peak = f"{got['hwm_kib'] // 1024:6d} MiB" if got["hwm_kib"] else "     -    "
        print(f"{mode:34s} {got['seconds']:6.1f} s {peak}  {got['outcome']}")
    with tempfile.TemporaryDirectory() as tmp:
        user_file = Path(tmp, "notes.txt")
        user_file.write_text("the user's words\n")
        os.link(user_file, Path(tmp, ".out.lock"))  # planted beside OUT, where the lock goes
        got = run("filelock", str(Path(tmp, ".out.lock")), args.timeout)
        print(f"{'filelock: lock file hard-linked':34s} {got['seconds']:6.1f} s {'':10s}  {got['outcome']}; "
              f"the user's file now holds {user_file.stat().st_size} bytes (was 17)")
    for module in ("huggingface_hub.constants", "huggingface_hub.file_download"):
        print(f"{'import ' + module:34s} {import_ms(module):6.0f} ms")


if __name__ == "__main__":
    main()
