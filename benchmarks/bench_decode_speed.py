#!/usr/bin/env python3
"""Decode speed of the reference runtime against the memory-bandwidth floor and vLLM's CPU build (issue 28).

    python benchmarks/bench_decode_speed.py                       # 0.6B shape, 1 and 2 threads, vLLM if found
    python benchmarks/bench_decode_speed.py --shape 4b --threads 1 --rounds 2
    python benchmarks/bench_decode_speed.py --no-vllm --profile   # + a torch.profiler breakdown of a step

One run measures, per shape and thread count, in this order:

- streaming bandwidth: ``x.sum()`` over 512 MiB of bf16 and of fp32 (the floor of a step that
  reads every weight once is weight bytes / this);
- ours, in one child process, ``--rounds`` rounds interleaved between the plain path (torch's
  ``F.linear``, what ``--no-compile`` runs) and the fast one, smoke-run's default on a CPU
  (``runtime/prepack.py``: oneDNN-prepacked weights where oneDNN has a bf16 path, else the own
  AVX2 kernel of ``runtime/cpu_kernel.py``; the report names which ran): the static runner's
  target decode step, its DFlash step (draft + verify of
  a whole block; a random draft, so one token a step) and a 16-token verify, each the median
  over its steps; the two paths' tokens compared;
- vLLM's CPU build (``/work/vllm-venv`` or ``--vllm-python``) in its own child on the same
  target folder: its target decode step from the time of 64 against 8 generated tokens,
  its OpenMP threads bound to the same cores (``VLLM_CPU_OMP_THREADS_BIND``).

Step times: with one thread, the decoding thread's CPU time (what smoke-run uses; other
processes on a shared machine do not inflate it) and, for vLLM, the CPU time of its engine
processes; with more threads, the wall clock. The table gives medians; the two paths' ratios
come from the same interleaved rounds. Pairs are random-weight
bf16 pairs at the real shapes (``real_pairs.py``, cached in fixtures/build/real-size/).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
VLLM_PYTHON = Path("/work/vllm-venv/bin/python")


def bandwidth(clock: Callable[[], float]) -> dict[str, float]:
    """GB/s of ``x.sum()`` over 512 MiB, bf16 and fp32 (the best of 5: streaming, not noise)."""
    import torch

    out = {}
    for name, dtype in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
        x = torch.ones((512 << 20) // torch.empty((), dtype=dtype).element_size(), dtype=dtype)
        x.sum()
        best = min(_timed(lambda: x.sum(), clock) for _ in range(5))
        out[name] = x.numel() * x.element_size() / best / 1e9
        del x
    return out


def _timed(fn: Callable[[], Any], clock: Callable[[], float] = time.perf_counter) -> float:
    t0 = clock()
    fn()
    return clock() - t0


def ours(shape: str, threads: int, rounds: int, tokens: int, profile: bool) -> dict[str, Any]:
    """The child measuring our runtime: both paths, interleaved over ``rounds``."""
    import torch

    from benchmarks.real_pairs import build_pair
    from dflash_ckpt.draftspec.specs import read_draft_spec
    from dflash_ckpt.draftspec.draft_settings import DraftSettings
    from dflash_ckpt.draftspec.target_settings import TargetSettings
    from dflash_ckpt.runtime.generate import step_clock
    from dflash_ckpt.runtime.loading import load_draft, load_target
    from dflash_ckpt.runtime.prepack import cpu_linear_path, prepack, unpack
    from dflash_ckpt.runtime.static import StaticRunner
    from dflash_ckpt.sources.local import LocalSource

    torch.set_num_threads(threads)
    # One thread: the thread's own CPU time, which other processes on a shared machine do not
    # inflate (what smoke-run does); more: the wall clock.
    clock = time.thread_time if threads == 1 else time.perf_counter
    draft_dir, target_dir = build_pair(shape)
    cfg = json.loads((target_dir / "config.json").read_text())
    bf16, cpu = torch.bfloat16, torch.device("cpu")
    t0 = time.perf_counter()
    target = load_target(target_dir, TargetSettings.from_config(cfg, "t"), dtype=bf16, device=cpu)
    dargs = DraftSettings.from_spec(read_draft_spec(LocalSource(draft_dir)))
    draft = load_draft(draft_dir, dargs, dtype=bf16, device=cpu)
    load_s = time.perf_counter() - t0
    target_bytes = sum(f.stat().st_size for f in target_dir.glob("*.safetensors"))
    out: dict[str, Any] = {"shape": shape, "threads": threads, "load_s": load_s, "target_bytes": target_bytes,
                           "bw_before": bandwidth(clock),
                           "clock": "thread CPU time" if threads == 1 else "wall"}
    gen = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, 700, (32,), generator=gen).tolist()
    block = dargs.block_size
    cap = len(prompt) + tokens + 2 * block + 1
    runner = StaticRunner(target, draft, cap, block_size=draft.args.block_size)
    figures: dict[str, dict[str, list[float]]] = {"plain": {}, "packed": {}}
    toks: dict[str, list[list[int]]] = {"plain": [], "packed": []}
    pack_s: list[float] = []

    def add(path: str, key: str, value: float) -> None:
        figures[path].setdefault(key, []).append(value)

    blk = torch.randint(0, 700, (1, block), generator=gen)
    for r in range(rounds):
        for path in ("plain", "packed") if r % 2 == 0 else ("packed", "plain"):
            if path == "packed":
                pack_s.append(_timed(lambda: (prepack(target), prepack(draft))))
                out["fast_path"] = cpu_linear_path(target, draft)
            with step_clock(clock), torch.inference_mode():
                d = runner.decode(prompt, max_new_tokens=tokens)
                s = runner.dflash(prompt, max_new_tokens=tokens // 2 + block)
                full = s.step_s[: max(1, len(s.step_s) - 1)]  # the last step may verify a short block
                add(path, "decode_ms", statistics.median(d.step_s) * 1e3)
                add(path, "dflash_ms", statistics.median(full) * 1e3)
                cache = target.new_cache(cap)
                target(torch.tensor([prompt]), cache=cache, logits="last")
                n0 = len(prompt)

                def one() -> None:
                    target(blk[:, :1], cache=cache, logits="last").logits.argmax(-1).tolist()
                    cache.crop(n0)

                def verify() -> None:
                    target(blk, cache=cache, taps=list(dargs.target_layer_ids), logits="all").logits.argmax(-1).tolist()
                    cache.crop(n0)

                one()
                verify()
                add(path, "eager_decode_ms", statistics.median(_timed(one, clock) for _ in range(5)) * 1e3)
                add(path, "verify16_ms", statistics.median(_timed(verify, clock) for _ in range(5)) * 1e3)
                toks[path].append(d.tokens + s.tokens)
            if profile and r == rounds - 1:
                out.setdefault("profile", {})[path] = profile_steps(runner, target, prompt, blk, dargs)
            if path == "packed":
                unpack(target)
                unpack(draft)
    out["paths"] = {p: {k: statistics.median(v) for k, v in f.items()} for p, f in figures.items()}
    out["pack_s"] = statistics.median(pack_s) if pack_s else 0.0
    out["same_tokens"] = all(a == b for a, b in zip(toks["plain"], toks["packed"]))
    out["bw_after"] = bandwidth(clock)
    return out


def profile_steps(runner: Any, target: Any, prompt: list[int], blk: Any, dargs: Any) -> dict[str, dict[str, float]]:
    """ms per step by kind of work, from torch.profiler over 6 static decode steps and 6 DFlash steps
    (draft + verify of a whole block) at a fixed position."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from dflash_ckpt.runtime.generate import step_clock

    steps = 6
    with step_clock(time.perf_counter), torch.inference_mode():
        runner.decode(prompt, max_new_tokens=4)  # leaves the decode state set
        at = int(runner.pos.item())
        s = runner.dflash(prompt, max_new_tokens=dargs.block_size)  # and the DFlash state
        start = len(prompt) + len(s.tokens)
        used = start + 2 * dargs.block_size

        def decode_step() -> None:
            runner.pos.fill_(at)
            runner._run("decode", at + 1)
            runner.dpack.tolist()

        def dflash_step() -> None:
            runner.t_pos.fill_(start)
            runner.d_len.fill_(start - 1)
            runner._run("draft", used)
            runner._run("verify", used)
            runner.packed.tolist()

        from dflash_ckpt.runtime import cpu_kernel

        real = cpu_kernel.linear

        def recorded(x: Any, weight: Any, bias: Any = None) -> Any:
            """The kernel is not a torch op: name it for the profiler by its weight's rows."""
            with torch.profiler.record_function(f"dflash::bf16_linear {weight.shape[0]}"):
                return real(x, weight, bias)

        result = {}
        cpu_kernel.linear = recorded
        for name, step in (("decode", decode_step), ("dflash", dflash_step)):
            step()
            with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
                t0 = time.perf_counter()
                for _ in range(steps):
                    step()
                wall = time.perf_counter() - t0
            result[name] = classify(prof.key_averages(group_by_input_shape=True), target, wall, steps)
        cpu_kernel.linear = real
    return result


def classify(events: Any, target: Any, wall: float, steps: int) -> dict[str, float]:
    """Self CPU time per kind (ms a step): matmuls by weight shape, attention, norms, rope, rest."""
    d = target.args.dims
    h, inter, vocab = d.hidden_size, d.intermediate_size, d.vocab_size
    qkv = (d.num_heads + 2 * d.num_kv_heads) * d.head_dim
    kinds = {qkv: "qkv", h: "o_proj/down/fc", 2 * inter: "gate_up", vocab: "lm_head"}
    out: dict[str, float] = {}
    for ev in events:
        name, ms = ev.key, ev.self_cpu_time_total / 1e3 / steps
        shapes = [list(s) for s in ev.input_shapes]
        if name.startswith("dflash::bf16_linear "):
            rows = int(name.rsplit(" ", 1)[1])
            kind = "linear " + kinds.get(rows, f"other {rows}")
        elif name in ("mkldnn::_linear_pointwise", "aten::mm", "aten::addmm"):
            # the output width: the packed weight is [n, k]; mm reads x [m, k] @ w.T [k, n]; addmm (bias, x, w.T)
            w = shapes[1] if name != "aten::addmm" else shapes[2]
            rows = (w[0] if name == "mkldnn::_linear_pointwise" else w[-1]) if w else 0
            kind = "linear " + kinds.get(rows, f"other {rows}")
        elif "attention" in name or name in ("aten::bmm", "aten::baddbmm", "aten::_softmax"):
            kind = "attention"
        elif "rms_norm" in name or name in ("aten::pow", "aten::rsqrt", "aten::mean"):
            kind = "norms"
        elif name in ("aten::roll", "aten::index_select", "aten::gather", "aten::index"):
            kind = "rope/gathers"
        else:
            kind = "other " + name
        out[kind] = out.get(kind, 0.0) + ms
    ops = sum(out.values())
    small = [k for k, v in out.items() if k.startswith("other ") and not k.startswith("other ops") and v < 0.03 * ops
             and not k.startswith("linear")]
    if small:
        out["other ops (each < 3%)"] = sum(out.pop(k) for k in small)
    out["step wall"] = wall * 1e3 / steps
    out["python + dispatch (wall - ops)"] = out["step wall"] - ops
    return out


VLLM_CHILD = r'''
import json, os, sys, time
def main():
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt
    target, rounds = sys.argv[1], int(sys.argv[2])
    llm = LLM(model=target, dtype="bfloat16", enforce_eager=True, max_model_len=512, max_num_seqs=1)
    prompt = TokensPrompt(prompt_token_ids=list(range(100, 132)))
    tick = os.sysconf("SC_CLK_TCK")
    def engine_cpu():
        """CPU seconds (user + sys) of this process's descendants: the engine core and its threads."""
        stats = {}
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    f = open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                stats[int(d)] = (int(f[1]), int(f[11]) + int(f[12]))
        todo, total = [os.getpid()], 0
        while todo:
            p = todo.pop()
            for pid, (ppid, ticks) in stats.items():
                if ppid == p:
                    todo.append(pid)
                    total += ticks
        return total / tick
    def run(n):
        p = SamplingParams(max_tokens=n, min_tokens=n, temperature=0.0, ignore_eos=True)
        t0, c0 = time.perf_counter(), engine_cpu()
        out = llm.generate([prompt], p, use_tqdm=False)
        return time.perf_counter() - t0, engine_cpu() - c0, list(out[0].outputs[0].token_ids)
    run(8)
    walls, cpus = [], []
    for _ in range(rounds):
        w64, c64, toks = run(64)
        w8, c8, _ = run(8)
        walls.append((w64 - w8) / 56 * 1e3)
        cpus.append((c64 - c8) / 56 * 1e3)
    med = lambda xs: sorted(xs)[len(xs) // 2]
    print("VLLM_RESULT " + json.dumps({"wall_ms": med(walls), "cpu_ms": med(cpus), "all_wall_ms": walls,
                                       "all_cpu_ms": cpus, "tokens": toks}))
if __name__ == "__main__":
    main()
'''


def vllm(shape: str, threads: int, rounds: int, python: Path) -> dict[str, Any] | None:
    """vLLM's target decode step on the same target folder, in its own process (None if absent)."""
    if not python.exists():
        return None
    from benchmarks.real_pairs import build_pair

    _, target_dir = build_pair(shape)
    cores = "0" if threads == 1 else f"0-{threads - 1}"
    env = {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, "VLLM_CPU_OMP_THREADS_BIND": cores,
           "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}
    t0 = time.perf_counter()
    proc = subprocess.run([str(python), "-c", VLLM_CHILD, str(target_dir), str(rounds)], capture_output=True,
                          text=True, env=env, timeout=1800)
    for line in proc.stdout.splitlines():
        if line.startswith("VLLM_RESULT "):
            res = json.loads(line.removeprefix("VLLM_RESULT "))
            res["wall_s"] = time.perf_counter() - t0
            return res
    print(f"vLLM child failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}", file=sys.stderr)
    return None


def smoke_runs(shape: str, rounds: int, tokens: int) -> dict[str, list[tuple[float, float]]]:
    """``(wall s, CPU s)`` of whole smoke-runs (fresh processes: load, target-only, DFlash, the
    lossless check; 3 default prompts x ``tokens``), the packed default against ``--no-compile``,
    alternating."""
    import resource

    from benchmarks.real_pairs import build_pair

    draft_dir, target_dir = build_pair(shape)
    out: dict[str, list[tuple[float, float]]] = {"packed": [], "plain": []}
    for r in range(rounds):
        for path in ("plain", "packed") if r % 2 == 0 else ("packed", "plain"):
            cmd = [sys.executable, "-m", "dflash_ckpt", "smoke-run", str(draft_dir), "--target", str(target_dir),
                   "-n", str(tokens), "--threads", "1", "-q"] + (["--no-compile"] if path == "plain" else [])
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            subprocess.run(cmd, capture_output=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
            wall = time.perf_counter() - t0
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            out[path].append((wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime))
    return out


def report(r: dict[str, Any], v: dict[str, Any] | None) -> None:
    # The floor's bandwidth: the faster of the two sums (an AVX2 CPU's bf16 sum is bound by its
    # widening, not by the memory), the lower of before and after.
    bw = max(min(r["bw_before"][t], r["bw_after"][t]) for t in ("bf16", "fp32"))
    floor_ms = r["target_bytes"] / (bw * 1e9) * 1e3
    print(f"\nshape {r['shape']}, {r['threads']} thread(s), times by {r['clock']}: target weights {r['target_bytes'] / 1e9:.2f} GB, "
          f"bandwidth bf16 {r['bw_before']['bf16']:.1f} / {r['bw_after']['bf16']:.1f} GB/s, fp32 "
          f"{r['bw_before']['fp32']:.1f} / {r['bw_after']['fp32']:.1f} GB/s (before / after); floor {floor_ms:.1f} ms a step")
    print(f"  load {r['load_s']:.1f} s, prepack {r['pack_s']:.2f} s; fast path: {r.get('fast_path')} (the 'packed' row); "
          f"plain and fast tokens equal: {r['same_tokens']}")
    print(f"  {'path':<8} {'decode ms':>10} {'x floor':>8} {'DFlash ms':>10} {'verify16 ms':>12} {'eager decode':>13} "
          f"{'verify16/decode':>16}")
    for path, f in r["paths"].items():
        print(f"  {path:<8} {f['decode_ms']:>10.1f} {f['decode_ms'] / floor_ms:>7.2f}x {f['dflash_ms']:>10.1f} "
              f"{f['verify16_ms']:>12.1f} {f['eager_decode_ms']:>13.1f} {f['verify16_ms'] / f['eager_decode_ms']:>15.2f}x")
    p, q = r["paths"]["plain"], r["paths"]["packed"]
    print(f"  plain / packed: decode {p['decode_ms'] / q['decode_ms']:.2f}x, DFlash step {p['dflash_ms'] / q['dflash_ms']:.2f}x, "
          f"verify16 {p['verify16_ms'] / q['verify16_ms']:.2f}x")
    if v:
        print(f"  vLLM CPU target decode: engine CPU {v['cpu_ms']:.1f} ms a token, wall {v['wall_ms']:.1f} ms "
              f"(rounds, CPU: {', '.join(f'{x:.1f}' for x in v['all_cpu_ms'])}; child {v['wall_s']:.0f} s)")
        # Its engine's CPU time counts its busy-polling threads too (about 2x its wall on an idle
        # machine), so its wall clock is the fair figure unless the machine is loaded.
        for name, theirs in (("wall", v["wall_ms"]), ("engine CPU time", v["cpu_ms"])):
            print(f"  ours / vLLM target decode (its {name}): packed {q['decode_ms'] / theirs:.2f}x, "
                  f"plain {p['decode_ms'] / theirs:.2f}x")
    for path, steps in r.get("profile", {}).items():
        for name, kinds in steps.items():
            print(f"  profile, {path} {name} step (ms a step, torch.profiler self time):")
            for kind, ms in sorted(kinds.items(), key=lambda kv: -kv[1]):
                print(f"    {kind:<34} {ms:8.2f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", action="append", choices=("0.6b", "4b"), help="default 0.6b; repeatable")
    ap.add_argument("--threads", type=int, action="append", help="default 1 and 2; repeatable")
    ap.add_argument("--rounds", type=int, default=4, help="interleaved plain/packed rounds (default 4)")
    ap.add_argument("--tokens", type=int, default=24, help="target-only tokens a round (DFlash: half + a block)")
    ap.add_argument("--no-vllm", action="store_true")
    ap.add_argument("--vllm-python", type=Path, default=VLLM_PYTHON)
    ap.add_argument("--profile", action="store_true", help="add a torch.profiler breakdown of both paths' steps")
    ap.add_argument("--smoke-run", type=int, default=0, metavar="N",
                    help="also time N whole smoke-runs of each path (3 prompts x 64 tokens, fresh processes)")
    ap.add_argument("--only-smoke-run", action="store_true", help="skip the step measurements")
    ap.add_argument("--smoke-tokens", type=int, default=64, help="-n of each whole smoke-run (default 64)")
    ap.add_argument("--child", nargs=2, metavar=("SHAPE", "THREADS"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print("RESULT " + json.dumps(ours(a.child[0], int(a.child[1]), a.rounds, a.tokens, a.profile)))
        return 0
    import torch

    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; "
          f"{a.rounds} interleaved rounds (medians)")
    for shape in a.shape or ["0.6b"]:
        for threads in [] if a.only_smoke_run else a.threads or [1, 2]:
            cmd = [sys.executable, __file__, "--child", shape, str(threads), "--rounds", str(a.rounds),
                   "--tokens", str(a.tokens)] + (["--profile"] if a.profile else [])
            proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
            lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
            if proc.returncode or not lines:
                print(proc.stderr[-3000:], file=sys.stderr)
                return 1
            r = json.loads(lines[-1].removeprefix("RESULT "))
            v = None if a.no_vllm else vllm(shape, threads, max(2, a.rounds // 2), a.vllm_python)
            report(r, v)
        if a.smoke_run:
            runs = smoke_runs(shape, a.smoke_run, a.smoke_tokens)
            print(f"\nsmoke-run of the {shape} pair, 3 prompts x {a.smoke_tokens} tokens, 1 thread, fresh processes, alternating:")
            for path, xs in runs.items():
                print(f"  {path:<7} wall {', '.join(f'{w:.1f}' for w, _ in xs)} s; CPU {', '.join(f'{c:.1f}' for _, c in xs)} s")
            med = {p: (statistics.median(w for w, _ in xs), statistics.median(c for _, c in xs)) for p, xs in runs.items()}
            print(f"  plain / packed: wall {med['plain'][0] / med['packed'][0]:.2f}x, CPU {med['plain'][1] / med['packed'][1]:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
