#!/usr/bin/env python3
"""The safetensors library (``safe_open``) on the hostile headers of the tests (issue 40).

    python benchmarks/bench_safetensors_library.py

Why ``sources/safetensors_header.py`` reads headers itself and the package does not depend on
``safetensors``: each header of ``tests/test_inspect_hostile_checkpoints.py`` (REFUSED, ACCEPTED),
header lengths past the cap or past the file, a Git LFS pointer, a header of MAX_TENSORS + 10
tensors and a 99 MB padded one, written to a file and opened with ``safe_open(framework="np")``:
what it answers (its words, which name no fix, and no DF204/DF230 distinction) and in how long.
``safe_open`` needs the whole file, which a Hub draft read by range requests
never is.
"""

from __future__ import annotations

import json
import os
import struct
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def ask(path: str) -> tuple[str, float]:
    """What ``safe_open`` says about ``path``, and the seconds it took."""
    from safetensors import safe_open

    start = time.perf_counter()
    try:
        with safe_open(path, framework="np") as fh:
            answer = f"accepts ({len(list(fh.keys()))} tensors)"
    except Exception as exc:  # noqa: BLE001 - its refusal is the measurement
        answer = f"refuses: {str(exc).splitlines()[0][:110]}"
    return answer, time.perf_counter() - start


def main() -> None:
    sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "fixtures")]
    import test_inspect_hostile_checkpoints as hostile

    from dflash_ckpt.limits import MAX_TENSORS

    cases: dict[str, bytes] = {}
    for name, (text, data_len, extra, _) in sorted(hostile.REFUSED.items()):
        cases[f"refused {name}"] = hostile._safetensors(text.encode(), data_len, extra)
    for name, text in sorted(hostile.ACCEPTED.items()):
        ends = [e["data_offsets"][1] for k, e in json.loads(text).items() if k != "__metadata__"]
        cases[f"accepted {name}"] = hostile._safetensors(text.encode(), max(ends))
    cases.update({
        "length 100,000,001": struct.pack("<Q", 100_000_001) + b"{}",
        "length 2^63": struct.pack("<Q", 2**63) + b"{}",
        "length past the file": struct.pack("<Q", 1000) + b"{}",
        "Git LFS pointer (DF230)": b"version https://git-lfs.github.com/spec/v1\noid sha256:" + b"a" * 64 + b"\nsize 12\n",
        "data cut short (DF204)": hostile._safetensors(json.dumps(hostile.H).encode(), 4),
        "empty file": b"",
    })
    n = MAX_TENSORS + 10
    cases[f"{n} tensors"] = hostile._safetensors(
        json.dumps({f"t{i}": hostile._t(2 * i, 2 * i + 2, "BF16", [1]) for i in range(n)}).encode(), 2 * n)
    padded = b'{"a":{"dtype":"BF16","shape":[1],"data_offsets":[0,2]}}' + b" " * 99_000_000
    cases["99 MB padded header"] = struct.pack("<Q", len(padded)) + padded + b"\0\0"
    with tempfile.TemporaryDirectory(prefix="bench-st-") as tmp:
        path = os.path.join(tmp, "model.safetensors")
        for name, data in cases.items():
            with open(path, "wb") as fh:
                fh.write(data)
            answer, seconds = ask(path)
            print(f"{name:34s} {seconds * 1e3:8.1f} ms  {answer}")


if __name__ == "__main__":
    main()
