#!/usr/bin/env python3
"""Bytes on the wire: ``inspect`` of a Hub repo id against downloading the repo's snapshot.

    python benchmarks/bench_hub_bytes.py [--draft Qwen3-8B-DFlash-b16-sharded] [--all] [--no-download]

Both run against the loopback Hub of the tests (``tests/hub_server.py``), which counts every byte
it receives and sends (request heads, response heads, bodies), serving a published-size sharded
draft built by ``fixtures/make_fixtures.py`` (real headers, sparse data). ``inspect`` runs as a
user runs it (``python -m dflash_ckpt inspect org/name --json``, fresh cache); the snapshot is
fetched with huggingface_hub's ``snapshot_download`` into another fresh cache (the weights are
written to disk for real, then deleted). The claim: inspect costs the config, the index, the
safetensors headers and a small constant, whatever the size of the weights; ``--all`` shows it
for every published sharded draft, from 0.88 GiB to 3.58 GiB of weights.
"""

from __future__ import annotations

import argparse
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "fixtures")]

import make_fixtures  # noqa: E402
from hub_server import HubServer, Seen, hub_env  # noqa: E402

REPO_ORG = "bench"


def header_bytes(path: Path) -> int:
    with open(path, "rb") as fh:
        return 8 + struct.unpack("<Q", fh.read(8))[0]


def run(server: HubServer, home: Path, argv: list[str]) -> tuple[list[Seen], float]:
    server.reset()
    env = {**os.environ, **hub_env(server, home)}
    start = time.perf_counter()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=3600)
    elapsed = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        sys.exit(f"failed ({proc.returncode}): {' '.join(argv)}\n{proc.stderr}")
    return server.requests, elapsed


def inspect(server: HubServer, home: Path, repo: str) -> tuple[list[Seen], float]:
    return run(server, home, [sys.executable, "-m", "dflash_ckpt", "inspect", repo, "--json"])


def snapshot(server: HubServer, home: Path, repo: str) -> tuple[list[Seen], float]:
    code = f"from huggingface_hub import snapshot_download; snapshot_download({repo!r})"
    return run(server, home, [sys.executable, "-c", code])


def kind(seen: Seen) -> str:
    if seen.server == "cdn":
        return "weights (CDN)"
    if seen.path.startswith("/api/models/"):
        return "repo info / tree"
    if "/resolve/" in seen.path:
        return "resolve"
    return "other (huggingface_hub)"


def mib(n: float) -> str:
    return f"{n / 2**20:,.2f} MiB" if n >= 2**20 else f"{n / 1024:,.1f} KiB"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draft", default="Qwen3-8B-DFlash-b16-sharded", help="folder under drafts/ of the fixtures")
    ap.add_argument("--all", action="store_true", help="inspect every published sharded draft too")
    ap.add_argument("--no-download", action="store_true", help="skip the snapshot download (writes the weights to disk)")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-hub-"))
    server = HubServer()
    try:
        drafts = make_fixtures.build_all(work / "fixtures") / "drafts"
        names = sorted(p.name for p in drafts.iterdir() if p.name.endswith("-sharded")) if args.all else [args.draft]
        if args.draft not in names:
            names.insert(0, args.draft)
        for name in names:
            server.add_repo(f"{REPO_ORG}/{name}", drafts / name)

        folder = drafts / args.draft
        repo = f"{REPO_ORG}/{args.draft}"
        shards = sorted(folder.glob("*.safetensors"))
        weights = sum(p.stat().st_size for p in shards)
        small = sum((folder / n).stat().st_size for n in ("config.json", "model.safetensors.index.json") if (folder / n).exists())
        headers = sum(header_bytes(p) for p in shards)

        seen, t_inspect = inspect(server, work / "home-inspect", repo)
        wire = sum(s.wire_bytes for s in seen)
        body = sum(s.body_bytes for s in seen)
        print(f"draft {args.draft}: {len(shards)} shards, {weights / 2**30:.2f} GiB of weights; "
              f"config + index {mib(small)}, safetensors headers {mib(headers)}")
        print(f"\ninspect {repo} ({len(seen)} requests, {t_inspect:.2f} s)")
        for k in sorted({kind(s) for s in seen}):
            part = [s for s in seen if kind(s) == k]
            print(f"  {k:<24} {len(part):>3} requests  {mib(sum(s.wire_bytes for s in part)):>12} on the wire")
        print(f"  {'total':<24} {len(seen):>3} requests  {mib(wire):>12} on the wire ({mib(body)} of bodies)")
        print(f"  bodies beyond config + index + headers: {mib(body - small - headers)}")

        if not args.no_download:
            home = work / "home-snapshot"
            seen_dl, t_dl = snapshot(server, home, repo)
            wire_dl = sum(s.wire_bytes for s in seen_dl)
            shutil.rmtree(home, ignore_errors=True)
            print(f"\nsnapshot_download {repo} ({len(seen_dl)} requests, {t_dl:.2f} s): {mib(wire_dl)} on the wire")
            print(f"\nratio snapshot / inspect: {wire_dl / wire:,.0f}x  ({wire_dl:,} / {wire:,} bytes)")

        if args.all:
            print("\ninspect of every published sharded draft (fresh cache each):")
            print(f"  {'draft':<36} {'weights':>9} {'shards':>6} {'headers':>11} {'inspect wire':>13} {'overhead':>11}")
            for name in names:
                f = drafts / name
                sh = sorted(f.glob("*.safetensors"))
                hdr = sum(header_bytes(p) for p in sh)
                sm = sum((f / n).stat().st_size for n in ("config.json", "model.safetensors.index.json") if (f / n).exists())
                s_seen, _ = inspect(server, work / f"home-{name}", f"{REPO_ORG}/{name}")
                w = sum(s.wire_bytes for s in s_seen)
                print(f"  {name:<36} {sum(p.stat().st_size for p in sh) / 2**30:>6.2f}GiB {len(sh):>6} {mib(hdr):>11} "
                      f"{mib(w):>13} {mib(w - hdr - sm):>11}")
    finally:
        server.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
