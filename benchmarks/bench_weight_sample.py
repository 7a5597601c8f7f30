"""The weight sampler of DF413 (``sources/weight_sample.py``): bytes read and time per checkpoint.

Claims (docs/degenerate-pairs.md): a healthy checkpoint costs 3 KiB of reads per sampled matrix
(at most 64 a file); a zero checkpoint (the worst case: every sampled matrix is read further)
costs at most 64 KiB more per matrix, or the whole matrix when it is at most 256 KiB; neither
depends on the checkpoint's size beyond the number of files.

Cases: the tiny trained pair (healthy, real data); a Qwen3-0.6B-shaped pair with sparse files
(``real_pairs.build_pair(sparse=True)``: real headers, a hole for the data, which reads back as
zeros: the never-filled shard of issue 32). Run: ``python benchmarks/bench_weight_sample.py``.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.real_pairs import build_pair  # noqa: E402
from dflash_ckpt.sources import weight_sample  # noqa: E402
from dflash_ckpt.sources.local import LocalSource  # noqa: E402
from dflash_ckpt.sources.weights import load_inventory  # noqa: E402


class _Counting:
    """A binary file that counts the bytes read from it."""

    total = 0

    def __init__(self, path: Path, mode: str) -> None:
        self._fh = open(path, mode)  # noqa: SIM115

    def seek(self, pos: int) -> int:
        return self._fh.seek(pos)

    def read(self, n: int) -> bytes:
        data = self._fh.read(n)
        _Counting.total += len(data)
        return data

    def __enter__(self) -> "_Counting":
        return self

    def __exit__(self, *exc: object) -> None:
        self._fh.close()


def measure(folder: Path) -> tuple[int, int, int, int, float, int]:
    """(tensors, matrices sampled, matrices found constant, bytes read, seconds, apparent bytes)."""
    inv = load_inventory(LocalSource(folder, label=str(folder)))
    sampled = sum(len(weight_sample.chosen(h.tensors.values())) for h in inv.headers.values())
    weight_sample.open = _Counting  # type: ignore[attr-defined]
    _Counting.total = 0
    t0 = time.perf_counter()
    found = weight_sample.constant_tensors(folder, inv)
    seconds = time.perf_counter() - t0
    del weight_sample.open  # type: ignore[attr-defined]
    apparent = sum(h.file_size for h in inv.headers.values())
    return len(inv.tensors), sampled, len(found), _Counting.total, seconds, apparent


def main() -> None:
    tiny = ROOT / "fixtures" / "tiny-pair"
    with tempfile.TemporaryDirectory() as tmp:
        draft06, target06 = build_pair("0.6b", Path(tmp), sparse=True)
        cases = [("tiny draft (healthy)", tiny / "draft"), ("tiny target (healthy)", tiny / "target"),
                 ("0.6B-shape draft (sparse: zeros)", draft06), ("0.6B-shape target (sparse: zeros)", target06)]
        print(f"{'checkpoint':36} {'apparent':>14} {'tensors':>8} {'sampled':>8} {'constant':>9} {'read':>11} {'KiB/matrix':>11} {'ms':>7}")
        for name, folder in cases:
            n, sampled, const, read, seconds, apparent = measure(folder)
            per = read / 1024 / sampled if sampled else 0.0
            print(f"{name:36} {apparent:>14,} {n:>8} {sampled:>8} {const:>9} {read:>11,} {per:>11.1f} {seconds * 1e3:>7.1f}")


if __name__ == "__main__":
    main()
