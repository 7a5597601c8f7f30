#!/usr/bin/env python3
"""Speed of the reference runtime on real shapes with random weights.

    python benchmarks/bench_runtime.py                 # CUDA: Qwen3-4B + its b16 draft; CPU: scaled down
    python benchmarks/bench_runtime.py --device cpu --preset small
    python benchmarks/bench_runtime.py --preset qwen3-4b --context 1024 --new-tokens 256

Prints, measured in one run on one pair:
1. per-step times: one target decode step (1 token), one draft call (fuse the context, draft a
   block, draft logits and argmax), one verification of a block (B tokens, taps, logits, argmax);
   and the speedup bound ``tau * t_decode / (t_draft + t_verify)`` for several tau values (tau =
   tokens per step, bonus included; the paper measures 4.2-7.9 on Qwen3-8B at block 16);
2. end to end, decode tokens/s of target-only decoding and of DFlash decoding, and their ratio,
   twice: with the random draft (tau ~ 1, the overhead floor) and with the draft's output steered
   to the target's own continuation (tau = B, the ceiling). The draft forward runs in both.

Random weights cost nothing to download and have the real shapes, so the timings are those of
the real models; only the acceptance is not (hence the bound and the two end-to-end cases).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dflash_ckpt.runtime.args import DraftArgs, TargetArgs  # noqa: E402
from dflash_ckpt.runtime.draft import DFlashDraft  # noqa: E402
from dflash_ckpt.runtime.generate import decode, dflash_decode  # noqa: E402
from dflash_ckpt.runtime.layers import init_random_  # noqa: E402
from dflash_ckpt.runtime.target import TargetModel  # noqa: E402
from dflash_ckpt.spec.resolve import build_spec  # noqa: E402

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
PRESETS = {"qwen3-4b": (QWEN3_4B, QWEN3_4B_DRAFT), "small": (SMALL, SMALL_DRAFT)}
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def build(preset: str, dtype: torch.dtype, device: torch.device, block: int | None) -> tuple[TargetModel, DFlashDraft]:
    tcfg, dcfg = PRESETS[preset]
    dcfg = dict(dcfg)
    if block:
        dcfg["block_size"] = block
    targs = TargetArgs.from_config(tcfg, f"{preset} target")
    dargs = DraftArgs.from_spec(build_spec(dcfg, label=f"{preset} draft"))
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device("meta"):
            target, draft = TargetModel(targs), DFlashDraft(dargs)
    finally:
        torch.set_default_dtype(default)
    target = target.to_empty(device=device)
    if targs.tie_word_embeddings:
        target.tie_weights()
    draft = draft.to_empty(device=device)
    init_random_(target, seed=0)
    init_random_(draft, seed=1)
    target.rotary.to(device)
    for table in draft.rotary:
        table.to(device)
    return target.eval().requires_grad_(False), draft.eval().requires_grad_(False)


def timed(device: torch.device, reps: int, fn: Callable[[], Any]) -> float:
    """Mean seconds of ``fn`` over ``reps`` runs after two warm-up runs, synchronised."""
    for _ in range(2):
        fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return (time.perf_counter() - t0) / reps


@torch.inference_mode()
def step_times(target: TargetModel, draft: DFlashDraft, context: int, reps: int) -> dict[str, float]:
    device = target.device
    block = draft.args.block_size
    taps = list(draft.args.target_layer_ids)
    vocab = target.args.dims.vocab_size
    gen = torch.Generator(device="cpu").manual_seed(0)
    prompt = torch.randint(0, vocab, (1, context), generator=gen).to(device)
    tcache, dcache = target.new_cache(context + 4 * block), draft.new_cache(context + 4 * block)
    out = target(prompt, cache=tcache, taps=taps, logits="last")
    features = out.features
    one = prompt[:, -1:]
    blk = torch.randint(0, vocab, (1, block), generator=gen).to(device)
    head_w, embed_w = target.lm_head.weight, target.embed_tokens.weight

    def decode_step() -> None:
        target(one, cache=tcache, logits="last").logits.argmax(-1)
        tcache.crop(context)

    def verify() -> None:
        o = target(blk, cache=tcache, taps=taps, logits="all")
        o.logits.argmax(-1)
        tcache.crop(context)

    # The draft call as decoding makes it: context = the features of one step's accepted tokens.
    dcache.length = 0
    draft.forward_fused(draft.fuse(features[:, : context - block]), draft.embed(blk, embed_w), cache=dcache)
    ctx = features[:, context - block:]

    def draft_call() -> None:
        hidden = draft.forward_fused(draft.fuse(ctx), draft.embed(blk, embed_w), cache=dcache)
        draft.logits(hidden[:, 1:], head_w).argmax(-1)
        dcache.crop(context - block)

    return {"decode": timed(device, reps, decode_step), "draft": timed(device, reps, draft_call),
            "verify": timed(device, reps, verify)}


@torch.inference_mode()
def end_to_end(target: TargetModel, draft: DFlashDraft, context: int, new_tokens: int) -> dict[str, Any]:
    device = target.device
    vocab = target.args.dims.vocab_size
    gen = torch.Generator(device="cpu").manual_seed(1)
    prompt = torch.randint(0, vocab, (context,), generator=gen).tolist()
    cap = context + new_tokens + draft.args.block_size + 1
    tcache, dcache = target.new_cache(cap), draft.new_cache(cap)
    decode(target, prompt, max_new_tokens=8, cache=tcache)  # warm-up
    ref = decode(target, prompt, max_new_tokens=new_tokens, cache=tcache)
    rand = dflash_decode(target, draft, prompt, max_new_tokens=new_tokens, target_cache=tcache, draft_cache=dcache)
    full = prompt + ref.tokens
    real_logits = draft.logits

    def steered(hidden: torch.Tensor, head: torch.Tensor) -> torch.Tensor:
        """The draft's real head runs; its choice is replaced by the target's continuation."""
        logits = real_logits(hidden, head)
        start = dcache.length
        want = [full[min(start + 1 + j, len(full) - 1)] for j in range(hidden.shape[1])]
        steer = torch.zeros_like(logits)
        steer[0, torch.arange(len(want), device=logits.device), torch.tensor(want, device=logits.device)] = 1e4
        return logits + steer

    draft.logits = steered  # type: ignore[method-assign]
    try:
        best = dflash_decode(target, draft, prompt, max_new_tokens=new_tokens, target_cache=tcache, draft_cache=dcache)
    finally:
        del draft.logits
    out: dict[str, Any] = {"target_tok_s": ref.decode_tok_s}
    for name, g in (("random", rand), ("steered", best)):
        assert g.tokens == ref.tokens, f"{name}: DFlash output differs from target-only output"
        tau = sum(g.acceptance_lengths) / max(len(g.acceptance_lengths), 1)
        out[name] = {"tau": tau, "tok_s": g.decode_tok_s, "speedup": (g.decode_tok_s or 0) / (ref.decode_tok_s or 1)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda, cuda:N")
    ap.add_argument("--preset", choices=sorted(PRESETS), help="default: qwen3-4b on CUDA, small on CPU")
    ap.add_argument("--dtype", default="bfloat16", choices=sorted(DTYPES))
    ap.add_argument("--block-size", type=int, default=None, help="override the draft's block size (16)")
    ap.add_argument("--context", type=int, default=None, help="prompt length (default 512 CUDA, 128 CPU)")
    ap.add_argument("--new-tokens", type=int, default=None, help="end-to-end tokens (default 256 CUDA, 48 CPU)")
    ap.add_argument("--reps", type=int, default=None, help="repetitions per step timing (default 50 CUDA, 5 CPU)")
    ap.add_argument("--tau", default="3,4.2,6.5", help="tau values for the speedup bound")
    ap.add_argument("--threads", type=int, default=None, help="CPU threads (torch.set_num_threads); 1 avoids "
                    "OpenMP spin-waits on a busy shared machine")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                          "cpu" if args.device == "auto" else args.device)
    cuda = device.type == "cuda"
    preset = args.preset or ("qwen3-4b" if cuda else "small")
    context = args.context or (512 if cuda else 128)
    new_tokens = args.new_tokens or (256 if cuda else 48)
    reps = args.reps or (50 if cuda else 5)
    dtype = DTYPES[args.dtype]
    name = torch.cuda.get_device_name(device) if cuda else f"CPU, {torch.get_num_threads()} threads"
    print(f"device {device} ({name}), torch {torch.__version__}, preset {preset}, {args.dtype}, context {context}")

    t0 = time.perf_counter()
    target, draft = build(preset, dtype, device, args.block_size)
    block = draft.args.block_size
    n_target = sum(p.numel() for p in target.parameters())
    n_draft = sum(p.numel() for p in draft.parameters())
    print(f"target {n_target / 1e9:.2f} B params, draft {n_draft / 1e9:.2f} B params, block {block} "
          f"(built in {time.perf_counter() - t0:.1f} s)")

    t = step_times(target, draft, context, reps)
    weight_bytes = n_target * target.embed_tokens.weight.element_size()
    print(f"target decode step  {t['decode'] * 1e3:8.2f} ms   ({weight_bytes / t['decode'] / 2**30:.0f} GiB/s of weights)")
    print(f"draft call (B={block:<2})    {t['draft'] * 1e3:8.2f} ms")
    print(f"verify block (B={block:<2})  {t['verify'] * 1e3:8.2f} ms")
    for tau in (float(x) for x in args.tau.split(",")):
        bound = tau * t["decode"] / (t["draft"] + t["verify"])
        print(f"speedup bound at tau {tau:<4g} = {tau:g} * {t['decode'] * 1e3:.2f} / "
              f"({t['draft'] * 1e3:.2f} + {t['verify'] * 1e3:.2f}) = {bound:.2f}x")

    e = end_to_end(target, draft, context, new_tokens)
    print(f"end to end, {new_tokens} new tokens after a {context}-token prompt (decode phase):")
    print(f"  target only               {e['target_tok_s']:8.1f} tok/s")
    for key, label in (("random", "DFlash, random draft"), ("steered", "DFlash, steered draft")):
        r = e[key]
        print(f"  {label:<25} {r['tok_s']:8.1f} tok/s   tau {r['tau']:5.2f}   speedup {r['speedup']:.2f}x")


if __name__ == "__main__":
    main()
