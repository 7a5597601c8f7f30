#!/usr/bin/env python3
"""The hostile-Hub threats of the tests, met by huggingface_hub's own calls and by ours (issue 40).

    python benchmarks/bench_hub_library.py [--timeout 40] [--only NAME]

Why ``sources/hub/`` still streams, caps and verifies its own requests rather than calling
``hf_hub_download`` / ``HfApi.model_info(files_metadata=True)`` / ``get_safetensors_metadata``:
each row is one hostile answer of the loopback Hub (``tests/hub_server.py``), asked for by the
library's call and by ours, each in a fresh process with a fresh cache, under ``--timeout``
seconds. Columns: how the call ended (its exception's first line, or ``returned``), seconds, the
child's peak RSS (VmHWM), the bytes left in the cache (files, not links), and bytes written
outside the cache folder.
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests")]

from hub_server import HubServer, hub_env  # noqa: E402

REPO = "bench/draft"
SLOW = "bench/slow-header"
CONFIG = r"/resolve/[^/]+/config.json$"

CHILD = """
import json, sys, time, traceback
what, repo = sys.argv[1], sys.argv[2]
start = time.perf_counter()
try:
    if what == "hf_hub_download":
        from huggingface_hub import hf_hub_download
        hf_hub_download(repo, sys.argv[3])
    elif what == "model_info":
        from huggingface_hub import HfApi
        HfApi().model_info(repo, files_metadata=True)
    elif what == "get_safetensors_metadata":
        from huggingface_hub import get_safetensors_metadata
        get_safetensors_metadata(repo)
    elif what == "ours: download":
        from dflash_ckpt.sources.hub.repo import download_snapshot
        from dflash_ckpt.sources.repo_ref import RepoRef
        download_snapshot(RepoRef(repo, None), allow_patterns=[sys.argv[3]])
    elif what == "ours: inspect":
        from dflash_ckpt.sources.hub.repo import open_hub_source
        from dflash_ckpt.sources.repo_ref import RepoRef
        from dflash_ckpt.sources.safetensors_header import read_header
        read_header(open_hub_source(RepoRef(repo, None)), "model.safetensors")
    outcome = "returned"
except BaseException as exc:  # noqa: BLE001 - what the call ended with is the measurement
    text = str(exc).strip().splitlines()
    outcome = f"{type(exc).__name__}: {text[0][:110] if text else ''}"
hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print(json.dumps({"outcome": outcome, "seconds": time.perf_counter() - start, "hwm_kib": hwm}))
"""


def make_repos(root: Path) -> tuple[Path, Path]:
    """A draft (config + a 4 KiB safetensors file) and one whose header length says 99,000,000."""
    draft = root / "draft"
    draft.mkdir()
    (draft / "config.json").write_text(json.dumps({"model_type": "qwen3", "architectures": ["DFlashDraftModel"]}))
    header = json.dumps({"fc.weight": {"dtype": "BF16", "shape": [32, 64], "data_offsets": [0, 4096]}}).encode()
    (draft / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + os.urandom(4096))
    slow = root / "slow"
    slow.mkdir()
    (slow / "config.json").write_bytes((draft / "config.json").read_bytes())
    with open(slow / "model.safetensors", "wb") as fh:
        fh.write(struct.pack("<Q", 99_000_000) + b'{"__metadata__":{}')
        fh.truncate(99_000_100)
    return draft, slow


#: name -> (fault set-up, [(call, repo, file)])
CASES = {
    "config: Content-Length 10^12 (256 MiB sent)": (
        lambda hub: hub.corrupt(CONFIG, "oversize", extra=10**12, times=20),
        [("hf_hub_download", REPO, "config.json"), ("ours: download", REPO, "config.json")],
    ),
    "weights: 200 MiB more than listed, no length": (
        lambda hub: hub.corrupt(r"^/blobs/", "overflow", extra=200 << 20, server="cdn", times=20),
        [("hf_hub_download", REPO, "model.safetensors"), ("ours: download", REPO, "model.safetensors")],
    ),
    "config: gzip bomb (256 MiB of zeros)": (
        lambda hub: hub.corrupt(CONFIG, "gzip", extra=256 << 20, times=20),
        [("hf_hub_download", REPO, "config.json"), ("ours: download", REPO, "config.json")],
    ),
    "weights: other bytes of the listed size": (
        lambda hub: hub.corrupt(r"^/blobs/", "flip", server="cdn", times=20),
        [("hf_hub_download", REPO, "model.safetensors"), ("ours: download", REPO, "model.safetensors")],
    ),
    "config: body dripped, 1 byte / 0.3 s": (
        lambda hub: hub.corrupt(CONFIG, "drip", interval=0.3, times=20),
        [("hf_hub_download", REPO, "config.json"), ("ours: download", REPO, "config.json")],
    ),
    "repo info: response head dripped": (
        lambda hub: hub.corrupt(rf"^/api/models/{REPO}$", "drip-head", interval=0.3, times=20),
        [("model_info", REPO, ""), ("ours: download", REPO, "config.json")],
    ),
    "repo info: 60 MiB of empty objects": (
        lambda hub: hub.raw_info.__setitem__(REPO, b"[" + b"{}," * (20 * 1024 * 1024) + b"{}]"),
        [("model_info", REPO, ""), ("ours: download", REPO, "config.json")],
    ),
    "repo info: 600k siblings": (
        lambda hub: hub.tamper.__setitem__(
            REPO, lambda sib: sib + [{"rfilename": f"f{i}.json", "size": 1, "blobId": "2" * 40} for i in range(600_000)]),
        [("model_info", REPO, ""), ("ours: download", REPO, "config.json")],
    ),
    "header: 99 MB length, dripped and cut": (
        lambda hub: hub.corrupt(r"^/blobs/", "drip", interval=0.02, times=1000, server="cdn"),
        [("get_safetensors_metadata", SLOW, ""), ("ours: inspect", SLOW, "")],
    ),
}


def run_case(hub: HubServer, root: Path, setup: Callable[[HubServer], object], call: str, repo: str, name: str,
             timeout: float) -> dict[str, Any]:
    hub.reset()
    setup(hub)
    home = Path(tempfile.mkdtemp(dir=root, prefix="home-"))
    env = {**os.environ, **hub_env(hub, home), "PYTHONPATH": str(ROOT), "DFLASH_CKPT_HUB_DEADLINE": "5",
           "HF_HUB_ETAG_TIMEOUT": "10", "HF_HUB_DOWNLOAD_TIMEOUT": "10"}
    start = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, "-c", CHILD, call, repo, name], env=env, capture_output=True,
                              text=True, timeout=timeout)
        got = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.stdout.strip() else {
            "outcome": f"exit {proc.returncode}: {proc.stderr.strip().splitlines()[-1][:100] if proc.stderr.strip() else ''}",
            "hwm_kib": 0}
    except subprocess.TimeoutExpired:
        got = {"outcome": f"still running at {timeout:g} s (killed)", "hwm_kib": 0}
    got["seconds"] = time.monotonic() - start
    files = [p for p in home.rglob("*") if p.is_file() and not p.is_symlink()]
    got["cache_bytes"] = sum(p.stat().st_size for p in files if (home / "hub") in p.parents)
    got["outside_bytes"] = sum(p.stat().st_size for p in files if (home / "hub") not in p.parents)
    return got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--timeout", type=float, default=40.0, help="seconds a call may take before it is killed")
    ap.add_argument("--only", help="run the cases whose name contains this")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-hub-lib-") as tmp:
        root = Path(tmp)
        draft, slow = make_repos(root)
        hub = HubServer()
        hub.add_repo(REPO, draft)
        hub.add_repo(SLOW, slow)
        try:
            for case, (setup, calls) in CASES.items():
                if args.only and args.only not in case:
                    continue
                print(case)
                for call, repo, name in calls:
                    got = run_case(hub, root, setup, call, repo, name, args.timeout)
                    hub.raw_info.pop(REPO, None)
                    hub.tamper.pop(REPO, None)
                    print(f"  {call:26s} {got['seconds']:6.1f} s {got['hwm_kib'] / 1024:7.0f} MiB peak "
                          f"{got['cache_bytes'] / 1024:9.1f} KiB kept {got['outside_bytes']:>6d} B outside  {got['outcome']}",
                          flush=True)
        finally:
            hub.close()
    print("ETag naming a path outside the cache: tests/test_hub_library_canary.py (hf_hub_download writes there)")


if __name__ == "__main__":
    main()
