#!/usr/bin/env python3
"""Download throughput: this tool's downloader against huggingface_hub's (what `hf download` runs).

    python benchmarks/bench_hub_download.py [--mib 96] [--files 2] [--repeat 3]

Both fetch the same repo (a config and ``--files`` weight files of ``--mib`` MiB of random bytes,
listed with their real sha256) from the loopback Hub of the tests (``tests/hub_server.py``) into a
fresh cache each time, in a fresh process each, interleaved so that machine noise hits both alike:

- ours: ``download_snapshot`` (what ``normalize`` and ``smoke-run`` call): one streamed GET per
  file, capped at its listed size, sha256 / git blob id verified before the rename, 0644 blobs;
- theirs: ``huggingface_hub.snapshot_download`` (``hf download``), its own HTTP downloads (the
  loopback serves no Xet, so both move plain HTTP bytes).

The time is measured inside each child around the download call alone (no interpreter start-up);
it prints MB/s (10^6 bytes per second) for both, the median of ``--repeat`` runs, and the ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests")]

import hub_server  # noqa: E402
from hub_server import HubServer, hub_env  # noqa: E402

REPO = "bench/download"

OURS = """
import json, sys, time
from dflash_ckpt.sources.hub.repo import download_snapshot
from dflash_ckpt.sources.repo_ref import RepoRef
start = time.perf_counter()
path = download_snapshot(RepoRef(sys.argv[1], None), allow_patterns=["*.json", "*.safetensors"])
print(json.dumps({"seconds": time.perf_counter() - start, "path": str(path)}))
"""

THEIRS = """
import json, sys, time
from huggingface_hub import snapshot_download
start = time.perf_counter()
path = snapshot_download(sys.argv[1], allow_patterns=["*.json", "*.safetensors"])
print(json.dumps({"seconds": time.perf_counter() - start, "path": str(path)}))
"""


def make_repo(folder: Path, mib: int, files: int) -> int:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "qwen3", "architectures": ["DFlashDraftModel"]}))
    total = (folder / "config.json").stat().st_size
    for i in range(files):
        path = folder / f"model-{i + 1:05d}-of-{files:05d}.safetensors"
        with open(path, "wb") as fh:
            for _ in range(mib):
                fh.write(os.urandom(1 << 20))
        total += path.stat().st_size
    return total


def once(server: HubServer, home: Path, code: str) -> float:
    env = {**os.environ, **hub_env(server, home), "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", code, REPO], env=env, capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        sys.exit(f"failed:\n{proc.stderr}")
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    return float(got["seconds"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=int, default=96, help="size of each weight file (MiB)")
    ap.add_argument("--files", type=int, default=2, help="weight files in the repo")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    hub_server.REAL_SHA256_MAX = 1 << 40  # real digests for every file: both clients get them listed
    with tempfile.TemporaryDirectory(prefix="bench-hub-dl-") as tmp:
        root = Path(tmp)
        total = make_repo(root / "repo", args.mib, args.files)
        server = HubServer()
        server.add_repo(REPO, root / "repo")
        times: dict[str, list[float]] = {"ours (download_snapshot)": [], "huggingface_hub (snapshot_download)": []}
        try:
            for i in range(args.repeat):
                for label, code in zip(times, (OURS, THEIRS)):
                    home = root / f"home-{i}-{len(times[label])}-{label[:4]}"
                    times[label].append(once(server, home, code))
                    subprocess.run(["rm", "-rf", str(home)], check=True)
        finally:
            server.close()
    print(f"repo: config.json + {args.files} x {args.mib} MiB random weights = {total / 1e6:,.1f} MB; loopback Hub; "
          f"{args.repeat} runs each, interleaved, fresh cache each")
    print(f"{'downloader':40s} {'median s':>9s} {'min s':>7s} {'MB/s':>8s}")
    rates = {}
    for label, values in times.items():
        med = statistics.median(values)
        rates[label] = total / 1e6 / med
        print(f"{label:40s} {med:9.3f} {min(values):7.3f} {rates[label]:8.1f}")
    ours, theirs = rates.values()
    print(f"ours / huggingface_hub throughput: {ours / theirs:.2f}x")


if __name__ == "__main__":
    main()
