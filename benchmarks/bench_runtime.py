#!/usr/bin/env python3
"""Speed of the reference runtime: per-step ops and milliseconds, and smoke-run's time to verdict.

    python benchmarks/bench_runtime.py                   # CUDA: Qwen3-4B + its b16 draft; CPU: scaled down
    python benchmarks/bench_runtime.py --device cpu --threads 1
    python benchmarks/bench_runtime.py --skip-smoke      # step figures only
    python benchmarks/bench_runtime.py --smoke-only --repeats 7

Prints, measured in one run:
1. per step, for the generic eager path (any target; slices of the caches, blocks cut to the
   budget) and the static path (native targets: whole-cache attention under a mask row, fixed
   widths, device-side state), and on CUDA the static path replayed as CUDA graphs: the aten
   ops one call dispatches / those that compute (kernels when run eagerly; the rest are
   views), and its median milliseconds (min and max beside), for one target
   decode step (1 token), one draft call (fuse the context, draft a block, pick the tokens) and
   one verification (B tokens, taps, argmax, acceptance);
2. on CUDA, the decode step against the memory-bound limit (bytes of weights read per step /
   ``--hbm-gbps``) and ``verify + draft`` against a decode step; everywhere the speedup bound
   ``tau * t_decode / (t_draft + t_verify)``;
3. the whole ``smoke-run`` of fixtures/tiny-pair as a user runs it (a fresh process), against
   ``python -c "import torch"``, interleaved ``--repeats`` times: medians, spread and the ratio
   of medians (the goal is at most 2.5x), plus what smoke-run itself measured (tau, speedup).

Random weights cost nothing to download and have the real shapes, so step timings are those of
the real models; only acceptance is not (hence the bound).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dflash_ckpt.draftspec.draft_settings import DraftSettings  # noqa: E402

from dflash_ckpt.draftspec.target_settings import TargetSettings  # noqa: E402
from dflash_ckpt.runtime.draft import DFlashDraft  # noqa: E402
from dflash_ckpt.runtime.generate import decode  # noqa: E402
from dflash_ckpt.runtime.layers import materialize  # noqa: E402
from dflash_ckpt.runtime.eager_dflash import dflash_decode  # noqa: E402
from dflash_ckpt.runtime.static import StaticRunner  # noqa: E402
from dflash_ckpt.runtime.target import TargetModel  # noqa: E402
from dflash_ckpt.draftspec.specs import build_spec  # noqa: E402

def init_random_(module: nn.Module, seed: int, std: float | None = None) -> nn.Module:
    """Fill every parameter with random values (this benchmark's pairs; real runs load weights).

    Linear weights get ``std`` (default ``1/sqrt(fan_in)``, which keeps activations of order
    one), embeddings and lm_head ``std`` or 1, norms 1 + a little noise.
    """
    gens: dict[torch.device, torch.Generator] = {}
    for name, p in module.named_parameters():
        if p.device not in gens:
            gens[p.device] = torch.Generator(device=p.device).manual_seed(seed)

        def randn(scale: float, shift: float = 0.0) -> torch.Tensor:
            return torch.randn(p.shape, generator=gens[p.device], device=p.device) * scale + shift

        with torch.no_grad():
            if "norm" in name and p.dim() == 1:
                vals = randn(0.05, 1.0)
            elif p.dim() == 1:
                vals = randn(0.02)
            elif "embed" in name or "lm_head" in name:
                vals = randn(std or 1.0)
            else:
                vals = randn(std or p.shape[1] ** -0.5)
            p.copy_(vals.to(p.dtype))
    return module


#: Qwen/Qwen3-4B and z-lab/Qwen3-4B-DFlash-b16 (fixtures/published), the dimensions that matter.
QWEN3_4B = {
    "model_type": "qwen3", "hidden_size": 2560, "num_hidden_layers": 36, "num_attention_heads": 32,
    "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 9728, "vocab_size": 151936,
    "rms_norm_eps": 1e-6, "rope_theta": 1000000, "max_position_embeddings": 40960, "tie_word_embeddings": True,
}
QWEN3_4B_DRAFT = {
    "architectures": ["DFlashDraftModel"], "model_type": "qwen3", "block_size": 16, "num_target_layers": 36,
    "dflash_config": {"mask_token_id": 151669, "target_layer_ids": [1, 9, 17, 25, 33]},
    "hidden_size": 2560, "num_hidden_layers": 5, "num_attention_heads": 32, "num_key_value_heads": 8,
    "head_dim": 128, "intermediate_size": 9728, "vocab_size": 151936, "rms_norm_eps": 1e-6,
    "rope_theta": 1000000, "max_position_embeddings": 40960, "layer_types": ["full_attention"] * 5,
}
#: A scaled-down pair with the same structure, for CPUs.
SMALL = {**QWEN3_4B, "hidden_size": 512, "num_hidden_layers": 12, "num_attention_heads": 8, "num_key_value_heads": 2,
         "head_dim": 64, "intermediate_size": 1536, "vocab_size": 32000}
SMALL_DRAFT = {**QWEN3_4B_DRAFT, "num_target_layers": 12, "block_size": 16, "hidden_size": 512, "num_hidden_layers": 2,
               "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 64, "intermediate_size": 1536,
               "vocab_size": 32000, "layer_types": ["full_attention"] * 2,
               "dflash_config": {"mask_token_id": 31999, "target_layer_ids": [1, 4, 7, 10]}}
#: Qwen/Qwen3-0.6B's dimensions, with a 5-layer draft in the published 4B draft's layout.
QWEN3_06B = {**QWEN3_4B, "hidden_size": 1024, "num_hidden_layers": 28, "num_attention_heads": 16,
             "intermediate_size": 3072}
QWEN3_06B_DRAFT = {**QWEN3_4B_DRAFT, "num_target_layers": 28, "hidden_size": 1024, "num_attention_heads": 16,
                   "intermediate_size": 3072, "dflash_config": {"mask_token_id": 151669, "target_layer_ids": [1, 7, 13, 19, 25]}}
PRESETS = {"qwen3-4b": (QWEN3_4B, QWEN3_4B_DRAFT), "qwen3-0.6b": (QWEN3_06B, QWEN3_06B_DRAFT), "small": (SMALL, SMALL_DRAFT)}
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
TINY = ROOT / "fixtures" / "tiny-pair"


def load_tiny_pair(dtype: torch.dtype, device: torch.device, block: int | None) -> tuple[TargetModel, DFlashDraft]:
    """fixtures/tiny-pair's trained weights, loaded as smoke-run loads them."""
    from dflash_ckpt.runtime.loading import load_draft, load_target
    from dflash_ckpt.sources.local import LocalSource
    from dflash_ckpt.draftspec.specs import read_draft_spec as read_draft, read_target_spec as read_target

    spec, tspec = read_draft(LocalSource(TINY / "draft")), read_target(LocalSource(TINY / "target"))
    dargs = DraftSettings.from_spec(spec)
    if block:
        dargs = dataclasses.replace(dargs, block_size=block)
    target = load_target(TINY / "target", TargetSettings.from_config(tspec.config, tspec.where), dtype=dtype, device=device)
    return target, load_draft(TINY / "draft", dargs, dtype=dtype, device=device)


def build(preset: str, dtype: torch.dtype, device: torch.device, block: int | None) -> tuple[TargetModel, DFlashDraft]:
    """Both models with random weights, fused as loading fuses them (or the tiny trained pair)."""
    if preset == "tiny-pair":
        return load_tiny_pair(dtype, device, block)
    tcfg, dcfg = PRESETS[preset]
    dcfg = dict(dcfg)
    if block:
        dcfg["block_size"] = block
    targs = TargetSettings.from_config(tcfg, f"{preset} target")
    dargs = DraftSettings.from_spec(build_spec(dcfg, label=f"{preset} draft"))
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device("meta"):
            target, draft = TargetModel(targs), DFlashDraft(dargs)
    finally:
        torch.set_default_dtype(default)
    # Storage as loading gives it: q/k/v, k/v and gate/up fused (``layers.materialize``).
    target = materialize(target, dtype=dtype, device=device)
    if targs.tie_word_embeddings:
        target.tie_weights()
    draft = materialize(draft, dtype=dtype, device=device)
    init_random_(target, seed=0)
    init_random_(draft, seed=1)
    target.rotary.to(device)
    for table in draft.rotary:
        table.to(device)
    target, draft = target.eval().requires_grad_(False), draft.eval().requires_grad_(False)
    return target.derive_tables(), draft


def count_ops(fn: Callable[[], Any]) -> tuple[int, int]:
    """aten operations one call of ``fn`` dispatches, and how many of them compute (write
    memory: at least one kernel launch each when run eagerly) rather than return a view."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    counts = [0, 0]

    def storages(tree: Any) -> list[int]:
        return [t.untyped_storage().data_ptr() for t in tree_leaves(tree) if isinstance(t, torch.Tensor)]

    class Counter(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            out = func(*args, **(kwargs or {}))
            ins, outs = set(storages((args, kwargs))), storages(out)
            counts[0] += 1
            if func._schema.is_mutable or not outs or not all(o in ins for o in outs):
                counts[1] += 1
            return out

    with Counter():
        fn()
    return counts[0], counts[1]


def timed(device: torch.device, reps: int, fn: Callable[[], Any]) -> dict[str, float]:
    """Median, min and max milliseconds of ``fn`` over ``reps`` synchronised runs, after two warm-ups."""
    for _ in range(2):
        fn()
    times = []
    for _ in range(reps):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append((time.perf_counter() - t0) * 1e3)
    return {"median": statistics.median(times), "min": min(times), "max": max(times)}


@torch.inference_mode()
def step_figures(target: TargetModel, draft: DFlashDraft, context: int, reps: int, graphs: bool) -> dict[str, dict[str, Any]]:
    """Ops and ms of decode, draft and verify on each path, at a ``context``-token prompt."""
    device = target.device
    block = draft.args.block_size
    taps = list(draft.args.target_layer_ids)
    vocab = target.args.dims.vocab_size
    gen = torch.Generator(device="cpu").manual_seed(0)
    prompt = torch.randint(0, vocab, (1, context), generator=gen).to(device)
    blk = torch.randint(0, vocab, (1, block), generator=gen).to(device)
    head_w, embed_w = target.lm_head.weight, target.embed_tokens.weight
    out: dict[str, dict[str, Any]] = {}

    # Generic: caches appended to and cropped back, as generate.dflash_decode runs them.
    tcache, dcache = target.new_cache(context + 4 * block), draft.new_cache(context + 4 * block)
    features = target(prompt, cache=tcache, taps=taps, logits="last").features
    one = prompt[:, -1:]
    draft.forward_fused(draft.fuse(features[:, : context - block]), draft.embed(blk, embed_w), cache=dcache)
    ctx = features[:, context - block:]

    def g_decode() -> None:
        target(one, cache=tcache, logits="last").logits.argmax(-1).tolist()
        tcache.crop(context)

    def g_draft() -> None:
        hidden = draft.forward_fused(draft.fuse(ctx), draft.embed(blk, embed_w), cache=dcache)
        draft.pick_tokens(hidden[:, 1:], head_w, blk[:, :1])
        dcache.crop(context - block)

    def g_verify() -> None:
        o = target(blk, cache=tcache, taps=taps, logits="all")
        o.logits.argmax(-1).tolist()
        tcache.crop(context)

    out["generic"] = {name: {"ops": "%d/%d" % count_ops(fn), **timed(device, reps, fn)}
                      for name, fn in (("decode", g_decode), ("draft", g_draft), ("verify", g_verify))}

    # Static: the runner's own step functions at fixed positions (state reset between calls).
    def static_steps(runner: StaticRunner) -> dict[str, Callable[[], None]]:
        runner.tcache.k.zero_()
        runner._prefill(prompt[0].tolist(), taps)
        runner.ctx.copy_(features[:, context - block:])

        def at(name: str) -> Callable[[], None]:
            def run() -> None:
                runner.t_pos.fill_(context)
                runner.d_len.fill_(context - block)
                runner.pos.fill_(context)
                runner.limit.fill_(block - 1)
                runner._run(name, context + (1 if name == "decode" else block))
                (runner.dpack if name == "decode" else runner.packed).tolist()  # the step's one host read
            return run

        return {name: at(name) for name in ("decode", "draft", "verify")}

    eager = StaticRunner(target, draft, context + 4 * block, block_size=draft.args.block_size)
    steps = static_steps(eager)
    out["static"] = {name: {"ops": "%d/%d" % count_ops(fn), **timed(device, reps, fn)} for name, fn in steps.items()}
    if graphs:
        graphed = StaticRunner(target, draft, context + 4 * block, graphs=True, block_size=draft.args.block_size)
        steps = static_steps(graphed)
        out["static + CUDA graphs"] = {name: {"ops": "1 graph", **timed(device, reps, fn)} for name, fn in steps.items()}
        out["static + CUDA graphs"]["capture_s"] = graphed.capture_s  # type: ignore[assignment]
    return out


@torch.inference_mode()
def check_lossless(target: TargetModel, draft: DFlashDraft, context: int, new_tokens: int, graphs: bool) -> str:
    """The static (and graphed) DFlash output equals generic target-only decoding here too."""
    vocab = target.args.dims.vocab_size
    prompt = torch.randint(0, vocab, (context,), generator=torch.Generator().manual_seed(1)).tolist()
    cap = context + new_tokens + draft.args.block_size + 1
    ref = decode(target, prompt, max_new_tokens=new_tokens, cache=target.new_cache(cap))
    runner = StaticRunner(target, draft, cap, graphs=graphs, block_size=draft.args.block_size)
    got = runner.dflash(prompt, max_new_tokens=new_tokens)
    same = sum(1 for a, b in zip(ref.tokens, got.tokens) if a == b)
    first = next((i for i, (a, b) in enumerate(zip(ref.tokens, got.tokens)) if a != b), None)
    return f"{same}/{len(ref.tokens)} tokens equal" + ("" if first is None else f" (first difference at {first})")


def smoke_wall(repeats: int, threads: int | None) -> dict[str, Any]:
    """``smoke-run`` of the tiny pair in a fresh process against ``python -c "import torch"``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    smoke = [sys.executable, "-m", "dflash_ckpt", "smoke-run", str(TINY / "draft"), "--target", str(TINY / "target"), "--json"]
    if threads:
        smoke += ["--threads", str(threads)]
    floor = [sys.executable, "-c", "import torch"]
    times: dict[str, list[float]] = {"import torch": [], "smoke-run": []}
    cpu: dict[str, list[float]] = {"import torch": [], "smoke-run": []}
    doc: dict[str, Any] = {}
    subprocess.run(floor, env=env, check=True)  # warm the page cache
    for _ in range(repeats):
        for name, cmd in (("import torch", floor), ("smoke-run", smoke)):
            r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
            times[name].append(time.perf_counter() - t0)
            r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu[name].append(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime)
            if name == "smoke-run":
                if proc.returncode != 0:
                    raise SystemExit(f"smoke-run failed ({proc.returncode}): {proc.stderr.strip()}")
                doc = json.loads(proc.stdout)
    return {"times": times, "cpu": cpu, "last": doc}


def print_steps(figs: dict[str, dict[str, Any]], block: int) -> None:
    print(f"{'path':<22} {'step':<14} {'ops/kernels':>11} {'median ms':>10} {'min ms':>8} {'max ms':>8}")
    for path, steps in figs.items():
        for name in ("decode", "draft", "verify"):
            f = steps[name]
            label = {"decode": "decode (1)", "draft": f"draft (B={block})", "verify": f"verify (B={block})"}[name]
            print(f"{path:<22} {label:<14} {f['ops']!s:>11} {f['median']:>10.2f} {f['min']:>8.2f} {f['max']:>8.2f}")
        if "capture_s" in steps:
            print(f"{path:<22} capture (compile) time {steps['capture_s']:.2f} s, once per run")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda, cuda:N")
    ap.add_argument("--preset", choices=sorted([*PRESETS, "tiny-pair"]),
                    help="default: qwen3-4b on CUDA, tiny-pair (fixtures/tiny-pair, trained) on CPU; small: a "
                         "50M-parameter random Qwen3")
    ap.add_argument("--dtype", default="bfloat16", choices=sorted(DTYPES))
    ap.add_argument("--block-size", type=int, default=None, help="override the draft's block size (16)")
    ap.add_argument("--context", type=int, default=None, help="prompt length (default 512 CUDA, 128 CPU)")
    ap.add_argument("--reps", type=int, default=None, help="repetitions per step timing (default 50 CUDA, 15 CPU)")
    ap.add_argument("--tau", default="3,4.2,6.5", help="tau values for the speedup bound")
    ap.add_argument("--hbm-gbps", type=float, default=4800.0, help="GPU memory bandwidth, GB/s (H200: 4800)")
    ap.add_argument("--no-graphs", action="store_true", help="CUDA: skip the CUDA-graph path")
    ap.add_argument("--threads", type=int, default=None, help="CPU threads (torch.set_num_threads; also passed "
                    "to smoke-run); 1 avoids OpenMP spin-waits on a busy shared machine")
    ap.add_argument("--repeats", type=int, default=5, help="smoke-run / import torch pairs (interleaved)")
    ap.add_argument("--skip-smoke", action="store_true", help="no smoke-run wall-time comparison")
    ap.add_argument("--smoke-only", action="store_true", help="only the smoke-run wall-time comparison")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                          "cpu" if args.device == "auto" else args.device)
    cuda = device.type == "cuda"
    name = torch.cuda.get_device_name(device) if cuda else f"CPU, {torch.get_num_threads()} threads"
    print(f"device {device} ({name}), torch {torch.__version__}, load average {os.getloadavg()[0]:.1f} "
          f"on {os.cpu_count()} logical CPUs")

    if not args.smoke_only:
        preset = args.preset or ("qwen3-4b" if cuda else "tiny-pair")
        context = args.context or (512 if cuda else 128)
        reps = args.reps or (50 if cuda else 15)
        t0 = time.perf_counter()
        target, draft = build(preset, DTYPES[args.dtype], device, args.block_size)
        block = draft.args.block_size
        n_target = sum(p.numel() for p in target.parameters())
        print(f"preset {preset}, {args.dtype}, context {context}, block {block}: target {n_target / 1e6:.1f} M params, "
              f"draft {sum(p.numel() for p in draft.parameters()) / 1e6:.1f} M params (built in {time.perf_counter() - t0:.1f} s)")
        graphs = cuda and not args.no_graphs
        figs = step_figures(target, draft, context, reps, graphs)
        print_steps(figs, block)
        best = figs["static + CUDA graphs" if graphs else "static"]
        t_dec, t_draft, t_ver = (best[k]["median"] for k in ("decode", "draft", "verify"))
        if cuda:
            weight_bytes = n_target * target.embed_tokens.weight.element_size()
            limit = weight_bytes / (args.hbm_gbps * 1e9) * 1e3
            print(f"decode step {t_dec:.2f} ms against the memory-bound limit {limit:.2f} ms "
                  f"({weight_bytes / 2**30:.2f} GiB / {args.hbm_gbps:g} GB/s): {t_dec / limit:.2f}x (goal <= 1.5x)")
            print(f"verify + draft {t_ver + t_draft:.2f} ms = {(t_ver + t_draft) / t_dec:.2f}x a decode step (goal <= 1.3x)")
        for tau in (float(x) for x in args.tau.split(",")):
            print(f"speedup bound at tau {tau:<4g} = {tau:g} * {t_dec:.2f} / ({t_draft:.2f} + {t_ver:.2f}) = "
                  f"{tau * t_dec / (t_draft + t_ver):.2f}x")
        print(f"static path{' + graphs' if graphs else ''} against generic target-only decoding, random prompt: "
              f"{check_lossless(target, draft, context, 48, graphs)}")

    if not args.skip_smoke:
        w = smoke_wall(args.repeats, args.threads)
        print(f"\nwhole smoke-run of {TINY.relative_to(ROOT)} (default prompts, -n 128) in a fresh process, "
              f"{args.repeats} interleaved repeats:")
        med = {}
        for key, ts in w["times"].items():
            med[key] = statistics.median(ts)
            print(f"  {key:<14} median {med[key]:6.2f} s   min {min(ts):6.2f} s   max {max(ts):6.2f} s")
        print(f"  ratio of medians smoke-run / import torch: {med['smoke-run'] / med['import torch']:.2f}x (goal <= 2.5x); "
              f"of minima: {min(w['times']['smoke-run']) / min(w['times']['import torch']):.2f}x")
        cpu = {k: statistics.median(v) for k, v in w["cpu"].items()}
        print(f"  CPU time (user + sys, what a busy machine does not inflate): import torch {cpu['import torch']:.2f} s, "
              f"smoke-run {cpu['smoke-run']:.2f} s, ratio {cpu['smoke-run'] / cpu['import torch']:.2f}x")
        o, s = w["last"]["overall"], w["last"]["settings"]
        speed = f"{o['speedup']:.2f}x" if o["speedup"] is not None else f"withheld (DF406, measured {o['speedup_measured']:.2f}x)"
        print(f"  smoke-run's own figures (last run, {s['threads']} thread(s)): tau {o['tau']:.2f}, "
              f"T {o['target_tok_s']:.0f} tok/s, D {o['dflash_tok_s']:.0f} tok/s, speedup {speed}, "
              f"verdict {'PASS' if w['last']['ok'] else 'FAIL'}")


if __name__ == "__main__":
    main()
