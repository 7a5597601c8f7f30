#!/usr/bin/env python3
"""One bf16 linear layer on a CPU, every way tried for issue 28, side by side in one run.

    python benchmarks/bench_cpu_linear.py                 # one thread
    python benchmarks/bench_cpu_linear.py --threads 2

For the weight shapes of a Qwen3-0.6B layer (cycled over 28 copies, so nothing stays in the
cache), its 151936 x 1024 lm_head, and a Qwen3-4B MLP weight, at 1 row (a decode step) and 16
(a verify block): ms, GB/s of the bf16 weight bytes, GFLOP/s, and the distance from the fp32
product in bf16 ulps. The ways:

- ``torch bf16``: ``F.linear`` on bf16 (what ``--no-compile`` runs);
- ``torch fp32``: ``F.linear`` on fp32 copies of the weights (twice the bytes, MKL's sgemm);
- ``fp32 slices``: bf16 weights widened 1024 rows at a time into a buffer, then MKL's sgemm;
- ``mv, transposed``: ``torch.mv`` over a weight stored transposed (1 row only);
- ``inductor``: ``torch.compile`` of the product written as a widened multiply and sum (1 row);
- ``oneDNN packed``: ``runtime/prepack.py``'s path, where this CPU's oneDNN has bf16;
- ``AVX2 kernel``: ``runtime/cpu_kernel.py``, where it builds.

Also the streaming bandwidth (``x.sum()`` over 512 MiB), the floor's denominator.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def timed(fn: Callable[[], Any], repeats: int) -> float:
    fn()
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()

    import torch
    import torch.nn.functional as F

    from dflash_ckpt.runtime import cpu_kernel
    from dflash_ckpt.runtime.prepack import can_pack

    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} thread(s); oneDNN bf16: "
          f"{can_pack(torch.empty(2, 2, dtype=torch.bfloat16))}; AVX2 kernel: "
          f"{'yes' if cpu_kernel.kernel() is not None else 'no (' + str(cpu_kernel.why_not()) + ')'}")
    for name, dtype in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
        x = torch.ones((512 << 20) // torch.empty((), dtype=dtype).element_size(), dtype=dtype)
        print(f"x.sum() over 512 MiB, {name}: {512 * 2**20 / timed(x.sum, 5) / 1e9:.1f} GB/s")
        del x

    def sliced(a: torch.Tensor, w: torch.Tensor, rows: int = 1024) -> torch.Tensor:
        out = torch.empty(a.shape[0], w.shape[0])
        af, buf = a.float(), torch.empty(rows, w.shape[1])
        for s in range(0, w.shape[0], rows):
            b = buf[: min(rows, w.shape[0] - s)]
            b.copy_(w[s:s + rows])
            torch.mm(af, b.t(), out=out[:, s:s + rows])
        return out.to(torch.bfloat16)

    compiled = torch.compile(lambda a, w: (a.float().unsqueeze(-2) * w.float()).sum(-1).to(torch.bfloat16), dynamic=False)
    gen = torch.Generator().manual_seed(0)
    print(f"\n{'weight':<22} {'rows':>4}  {'way':<16} {'ms':>8} {'GB/s':>7} {'GFLOP/s':>8} {'ulps':>6}")
    for label, (n, k, copies) in {"0.6B layer 3072x1024": (3072, 1024, 28), "lm_head 151936x1024": (151936, 1024, 1),
                                  "4B MLP 9728x2560": (9728, 2560, 6)}.items():
        ws = [torch.randn(n, k, generator=gen).to(torch.bfloat16) for _ in range(copies)]
        nbytes = sum(w.nbytes for w in ws)
        for rows in (1, 16):
            a = torch.randn(rows, k, generator=gen).to(torch.bfloat16)
            want = a.float() @ ws[0].float().T
            ulp = want.to(torch.bfloat16).float().abs().clamp_min(1e-2).log2().floor().sub(7).exp2()
            ways: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {"torch bf16": lambda w: F.linear(a, w)}
            fp32 = [w.float() for w in ws] if copies * n * k * 4 < 4 << 30 else None
            if fp32 is not None:
                ways["torch fp32"] = lambda w, f={id(w): v for w, v in zip(ws, fp32)}: F.linear(a.float(), f[id(w)]).to(torch.bfloat16)
            ways["fp32 slices"] = lambda w: sliced(a, w)
            if rows == 1:
                tr = {id(w): w.t().contiguous() for w in ws}
                ways["mv, transposed"] = lambda w: torch.mv(tr[id(w)].t(), a[0]).unsqueeze(0)
                ways["inductor"] = lambda w: compiled(a, w)
            if can_pack(ws[0]):
                packed = {id(w): torch.ops.mkldnn._reorder_linear_weight(w, 1) for w in ws}
                ways["oneDNN packed"] = lambda w: torch.ops.mkldnn._linear_pointwise(a, packed[id(w)], None, "none", [], "")
            if cpu_kernel.kernel() is not None:
                ways["AVX2 kernel"] = lambda w: cpu_kernel.linear(a, w)
            for way, fn in ways.items():
                got = fn(ws[0]).float()
                ulps = ((got - want.to(torch.bfloat16).float()).abs() / ulp).max().item()
                t = timed(lambda: [fn(w) for w in ws], args.repeats)
                print(f"{label:<22} {rows:>4}  {way:<16} {t * 1e3:>8.1f} {nbytes / t / 1e9:>7.1f} "
                      f"{2 * rows * nbytes / 2 / t / 1e9:>8.1f} {ulps:>6.1f}", flush=True)
            del fp32


if __name__ == "__main__":
    main()
