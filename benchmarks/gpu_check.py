#!/usr/bin/env python3
"""One prepared check of the CUDA path, unattended, in a few minutes on one GPU.

    python benchmarks/gpu_check.py            # exit 0: every claim held; 1: one failed
    python benchmarks/gpu_check.py --quick    # the tiny pairs only

Takes fixtures/tiny-pair (trained; its 1+N draft and its anchor-first draft, so both block
layouts run graphed) and builds a random Qwen3-0.6B-shape bf16 pair (benchmarks/real_pairs.py,
cached), then prints one table of claims with their figures and, last, one verdict line
(``gpu_check: PASS ...`` or ``gpu_check: FAIL ...``):

- graphed = eager: the static path with CUDA graphs gives the generic eager loop's tokens
  (target-only and DFlash), for every pair;
- self-check: smoke-run's check of the graphed executor against the eager one
  (runtime/self_check.py) agrees, with its cost and largest logit difference against the
  rounding it allows; on the tiny pairs a fault captured into the verify graph is caught;
- decode vs memory bound: one graphed decode step against weights bytes / bandwidth, the
  bandwidth measured here with a large device copy (read + write);
- verify(16) + draft vs decode: one DFlash step's two graphed passes against one decode step;
- smoke-run: wall time, tau and the lossless verdict per backend (a fresh CLI process each), and
  on the native backend that the graphed executor ran (its self-check agreed);
- memory: peak device memory of a DFlash run against smoke-run's pre-check estimate
  (runtime/memory.py), which must not be below the peak.

Without a CUDA GPU it says so and exits 0 (nothing to check here). It is sized to finish within
10 minutes on one GPU; a claim not reached within ``--budget`` seconds (default 540) fails as such.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
TINY = ROOT / "fixtures" / "tiny-pair"
#: Claim bounds. A batch-1 decode step reads every weight once; kernel latencies dominate a
#: small model, so the 0.6B step may sit well above the bound; 8x still catches a step that
#: reads the weights several times or runs uncaptured.
DECODE_OVER_BOUND_MAX = 8.0
#: verify(16) + draft against one decode step: at batch 1 both passes are memory bound, so a
#: DFlash step should cost a small multiple of a decode step (the speedup is tau over this).
STEP_OVER_DECODE_MAX = 3.0
#: smoke-run's "code" prompt in the tiny target's chat template (its drafts get accepted); the ids
#: are valid rows of the 0.6B shape's vocabulary too.
PROMPT = [721, 296, 198, 54, 406, 257, 361, 344, 366, 69, 72, 65, 7, 77, 408, 334, 400, 277, 305, 12, 278, 458, 700, 375,
          435, 259, 710, 363, 11, 388, 257, 663, 304, 541, 668, 13, 722, 198, 721, 301, 198, 723, 256, 724, 256]


class Table:
    def __init__(self) -> None:
        self.rows: list[tuple[str, str, str, bool]] = []

    def add(self, pair: str, claim: str, figure: str, ok: bool) -> None:
        self.rows.append((pair, claim, figure, ok))
        print(f"  {'ok  ' if ok else 'FAIL'} {pair}: {claim}: {figure}", file=sys.stderr, flush=True)

    def print(self) -> bool:
        width = max(len(r[1]) for r in self.rows)
        print(f"{'pair':<8} {'claim':<{width}} {'result':<6} figures")
        for pair, claim, figure, ok in self.rows:
            print(f"{pair:<8} {claim:<{width}} {'PASS' if ok else 'FAIL':<6} {figure}")
        return all(r[3] for r in self.rows)

    def verdict(self, seconds: float) -> str:
        """The one line a reader needs: PASS, or FAIL with the claims that failed."""
        failed = [f"{pair}: {claim}" for pair, claim, _figure, ok in self.rows if not ok]
        if not self.rows:
            return f"gpu_check: FAIL (no claim was checked, {seconds:.0f} s)"
        if failed:
            return f"gpu_check: FAIL ({len(failed)} of {len(self.rows)} claims, {seconds:.0f} s): " + "; ".join(failed)
        return f"gpu_check: PASS ({len(self.rows)} claims, {seconds:.0f} s)"


def bandwidth(torch: Any, dev: Any) -> float:
    """Bytes per second of a 1 GiB device-to-device copy (read + write counted)."""
    src = torch.empty(1 << 29, dtype=torch.float16, device=dev)
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    torch.cuda.synchronize(dev)
    t0 = time.perf_counter()
    for _ in range(10):
        dst.copy_(src)
    torch.cuda.synchronize(dev)
    return 10 * 2 * src.numel() * 2 / (time.perf_counter() - t0)


def load_pair(draft_dir: Path, target_dir: Path, dev: Any) -> tuple[Any, Any]:
    import torch

    from dflash_ckpt.draftspec.draft_settings import DraftSettings

    from dflash_ckpt.draftspec.target_settings import TargetSettings
    from dflash_ckpt.runtime.loading import load_draft, load_target
    from dflash_ckpt.sources.local import LocalSource
    from dflash_ckpt.draftspec.specs import read_draft_spec as read_draft

    cfg = json.loads((target_dir / "config.json").read_text())
    target = load_target(target_dir, TargetSettings.from_config(cfg, "t"), dtype=torch.bfloat16, device=dev)
    draft = load_draft(draft_dir, DraftSettings.from_spec(read_draft(LocalSource(draft_dir))), dtype=torch.bfloat16, device=dev)
    return target, draft


def step_ms(torch: Any, dev: Any, fn: Any, reps: int = 50) -> float:
    for _ in range(3):
        fn()
    torch.cuda.synchronize(dev)
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    torch.cuda.synchronize(dev)
    return (time.perf_counter() - t0) / reps * 1e3


def check_pair(name: str, draft_dir: Path, target_dir: Path, dev: Any, table: Table, bw: float, tokens: int) -> None:
    import torch

    from dflash_ckpt.runtime.generate import decode, teacher_forced_logits

    from dflash_ckpt.runtime.eager_dflash import dflash_decode
    from dflash_ckpt.runtime.judge import TIE_TOLERANCE, judge_logits
    from dflash_ckpt.draftspec.specs import build_spec, target_from_config
    from dflash_ckpt.runtime.memory import Shapes, estimate_run
    from dflash_ckpt.runtime.static import StaticRunner

    torch.cuda.reset_peak_memory_stats(dev)
    base = torch.cuda.memory_allocated(dev)
    target, draft = load_pair(draft_dir, target_dir, dev)
    prompt = list(PROMPT)
    block = draft.args.block_size
    cap = len(prompt) + tokens + block + 1
    tc, dc = target.new_cache(cap), draft.new_cache(cap)
    ref = decode(target, prompt, max_new_tokens=tokens, cache=tc)
    eager = dflash_decode(target, draft, prompt, max_new_tokens=tokens, target_cache=tc, draft_cache=dc, block_size=draft.args.block_size)
    del tc, dc
    runner = StaticRunner(target, draft, cap, graphs=True, block_size=draft.args.block_size)
    graphed_t = runner.decode(prompt, max_new_tokens=tokens)
    graphed = runner.dflash(prompt, max_new_tokens=tokens)
    # Equal up to near ties in the target's logits, judged as smoke-run judges (runtime/judge.py).
    verdicts = [judge_logits(teacher_forced_logits(target, prompt, gen.tokens, forward_all=runner.forward_all), gen.tokens,
                             TIE_TOLERANCE[torch.bfloat16]).status for gen in (graphed_t, graphed, eager)]
    table.add(name, "graphed = eager (target-only, DFlash; up to ties)",
              f"{sum(a == b for a, b in zip(graphed.tokens, eager.tokens))}/{len(eager.tokens)} DFlash, "
              f"{sum(a == b for a, b in zip(graphed_t.tokens, ref.tokens))}/{len(ref.tokens)} target-only tokens equal; "
              f"judged {'/'.join(verdicts)}; capture {runner.capture_s:.1f} s",
              set(verdicts) <= {"identical", "tie"})
    peak = torch.cuda.max_memory_allocated(dev) - base
    weights = sum(p.numel() * p.element_size() for m in (target, draft) for p in m.parameters())
    cfg_t = json.loads((target_dir / "config.json").read_text())
    cfg_d = json.loads((draft_dir / "config.json").read_text())
    est = estimate_run(target=Shapes.of_target(target_from_config(cfg_t, label="t", where="t")), target_file_bytes=0,
                       target_dtype=torch.bfloat16, draft=Shapes.of_draft(build_spec(cfg_d, label="d")),
                       draft_file_bytes=0, draft_dtype=torch.bfloat16, capacity=cap, longest=len(prompt) + tokens,
                       block=block, backend="native", taps=len(draft.args.target_layer_ids))
    table.add(name, "peak device memory <= pre-check estimate",
              f"peak {peak / 2**20:.0f} MiB, estimate {est.total / 2**20:.0f} MiB ({peak / est.total:.2f})",
              peak <= est.total)
    self_check_claims(name, target, draft, runner, prompt, table, tokens)  # after the peak: it builds a second runner
    with torch.inference_mode():
        runner.pos.fill_(len(prompt))
        runner.t_pos.fill_(len(prompt))
        runner.limit.fill_(block - 1)
        dec = step_ms(torch, dev, lambda: (runner._run("decode", len(prompt) + 1), runner.pos.fill_(len(prompt))))
        ver = step_ms(torch, dev, lambda: (runner._run("draft", len(prompt) + block),
                                           runner.t_pos.fill_(len(prompt)), runner._run("verify", len(prompt) + block),
                                           runner.t_pos.fill_(len(prompt))))
    bound = weights / bw * 1e3
    claimed = weights >= 2**28  # a few MB of weights: launch latency, not bandwidth, sets the step
    table.add(name, f"decode step <= {DECODE_OVER_BOUND_MAX:g}x memory bound" + ("" if claimed else " (shown only)"),
              f"{dec:.3f} ms vs {bound:.3f} ms ({weights / 2**30:.2f} GiB at {bw / 1e9:.0f} GB/s): "
              f"{dec / bound:.2f}x", dec <= DECODE_OVER_BOUND_MAX * bound or not claimed)
    table.add(name, f"draft + verify(16) <= {STEP_OVER_DECODE_MAX:g}x decode",
              f"{ver:.3f} ms vs {dec:.3f} ms: {ver / dec:.2f}x", ver <= STEP_OVER_DECODE_MAX * dec)
    del runner, target, draft
    torch.cuda.empty_cache()


def self_check_claims(name: str, target: Any, draft: Any, runner: Any, prompt: list[int], table: Table,
                      tokens: int) -> None:
    """smoke-run's self-check on the graphed runner, and (tiny pairs) on one whose captured verify
    graph holds a fault: the first must agree, the second must not."""
    import torch

    from dflash_ckpt.runtime.self_check import ROUNDING_ULPS, self_check
    from dflash_ckpt.runtime.static import StaticRunner

    got = self_check(runner, prompt, max_new_tokens=tokens)
    table.add(name, "self-check: graphed = eager within rounding",
              f"{got.status} over {got.steps} steps{' (' + got.detail + ')' if got.detail else ''}; largest logit "
              f"difference {got.max_logit_diff:.4g} (allowed {ROUNDING_ULPS.get(target.dtype, 64.0):g} units of "
              f"rounding); {got.seconds:.2f} s", got.passed)
    if not name.startswith("tiny"):
        return
    original = StaticRunner._verify_step

    def faulty(self: Any, span: int) -> None:  # a graph that hands the next step a wrong anchor
        original(self, span)
        self.ids[0, :1].add_(1)

    StaticRunner._verify_step = faulty  # type: ignore[method-assign]
    try:
        bad = StaticRunner(target, draft, runner.capacity, graphs=True, block_size=runner.block)
    finally:
        StaticRunner._verify_step = original  # type: ignore[method-assign]
    caught = self_check(bad, prompt, max_new_tokens=tokens)
    table.add(name, "self-check catches a fault captured into the verify graph",
              f"{caught.status}: {caught.detail}", caught.status == "differs")
    del bad
    torch.cuda.empty_cache()


def smoke(name: str, draft_dir: Path, target_dir: Path, table: Table, tokens: int, min_tau: float) -> None:
    for backend in ("native", "transformers"):
        cmd = [sys.executable, "-m", "dflash_ckpt", "smoke-run", str(draft_dir), "--target", str(target_dir),
               "--backend", backend, "-n", str(tokens), "--json", "--device", "cuda"]
        if time.perf_counter() > DEADLINE[0]:
            table.add(name, f"smoke-run {backend}", "not reached within the time budget", False)
            continue
        if min_tau == 0:
            cmd += ["--min-acceptance", "0"]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
        wall = time.perf_counter() - t0
        try:
            doc = json.loads(proc.stdout)
        except ValueError:
            table.add(name, f"smoke-run {backend}", f"exit {proc.returncode}: {proc.stderr.strip()[-300:]}", False)
            continue
        verdicts = sorted({p["lossless"]["status"] for p in doc["prompts"]})
        tau = (doc.get("overall") or {}).get("tau") or 0.0
        ok = proc.returncode == 0 and set(verdicts) <= {"identical", "tie"} and tau >= min_tau
        settings = doc["settings"]
        check = settings.get("self_check") or {}
        want = "static-graphs" if backend == "native" else "eager"
        ok = ok and settings.get("executor") == want
        table.add(name, f"smoke-run {backend}: exit 0, lossless, tau >= {min_tau:g}, executor {want}",
                  f"wall {wall:.1f} s, tau {tau:.2f}, lossless {'/'.join(verdicts)}, exit {proc.returncode}, "
                  f"executor {settings.get('executor')} ({settings.get('executor_reason')}), self-check "
                  f"{check.get('seconds', 0):.2f} s", ok)


#: When (perf_counter) the remaining claims stop being started: ``--budget`` after the start.
DEADLINE = [float("inf")]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="the tiny pairs only")
    ap.add_argument("--tokens", type=int, default=96)
    ap.add_argument("--budget", type=float, default=540.0, help="seconds after which no further claim starts")
    a = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        print(f"gpu_check: no CUDA GPU here (torch {torch.__version__}): nothing checked")
        return 0
    t0 = time.perf_counter()
    DEADLINE[0] = t0 + a.budget
    dev = torch.device("cuda")
    print(f"gpu_check on {torch.cuda.get_device_name(dev)}, torch {torch.__version__}", file=sys.stderr)
    table = Table()
    bw = bandwidth(torch, dev)
    pairs = [("tiny", TINY / "draft", TINY / "target", 4.0),
             ("tiny-af", TINY / "draft-anchor-first", TINY / "target", 3.5)]  # anchor-first: verify 9 wide
    if not a.quick:
        from benchmarks.real_pairs import build_pair

        d, t = build_pair("0.6b")
        pairs.append(("0.6b", d, t, 0.0))  # random weights: tau near 1, only losslessness is claimed
    for name, d, t, _ in pairs:
        if time.perf_counter() > DEADLINE[0]:
            table.add(name, "graphed = eager, self-check, memory, step times", "not reached within the time budget",
                      False)
            continue
        check_pair(name, d, t, dev, table, bw, a.tokens)
    for name, d, t, min_tau in pairs:
        smoke(name, d, t, table, a.tokens, min_tau)
    print(f"measured bandwidth {bw / 1e9:.0f} GB/s; total {time.perf_counter() - t0:.0f} s")
    ok = table.print()
    print(table.verdict(time.perf_counter() - t0))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
