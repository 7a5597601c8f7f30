#!/usr/bin/env python3
"""smoke-run's two target backends side by side on the same pair: load time and decode speed.

    python benchmarks/bench_backends.py                      # fixtures/tiny-pair, its trained draft
    python benchmarks/bench_backends.py --pair small         # a 12-layer, hidden-512 Qwen3 (random weights)
    python benchmarks/bench_backends.py --device cuda --pair small --new-tokens 256

Prints, for the native target (``runtime/target.py``) and the transformers one
(``runtime/hf_target.py``) loaded from the same safetensors folder, in one run:
- load time (median of ``--repeats`` loads, the folder in the page cache);
- target-only greedy decode and DFlash decode, tokens/s after the prefill, the backends
  interleaved prompt by prompt, and the ratio transformers / native for each;
- the tokens and acceptance lengths, which must be the same for both (the run says so, and exits
  1 when they are not).

``small``: the checkpoint is written by transformers (``save_pretrained``) from random weights,
and the draft is random too, steered to the target's own continuation half of the time (so
acceptance varies and rollbacks of every size happen); ``tiny``: the bundled trained pair.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dflash_ckpt.draftspec.draft_settings import DraftSettings  # noqa: E402

from dflash_ckpt.draftspec.target_settings import TargetSettings  # noqa: E402
from dflash_ckpt.runtime.generate import decode, now  # noqa: E402
from dflash_ckpt.runtime.dflash_loop import run_dflash  # noqa: E402
from dflash_ckpt.runtime.eager_dflash import EagerExecutor  # noqa: E402
from dflash_ckpt.runtime.hf_target import hf_target_info, load_hf_target  # noqa: E402
from dflash_ckpt.runtime.loading import inventory, load_draft, load_target  # noqa: E402
from dflash_ckpt.sources.local import LocalSource  # noqa: E402
from dflash_ckpt.draftspec.specs import read_draft_spec as read_draft  # noqa: E402
from dflash_ckpt.draftspec.specs import target_from_config  # noqa: E402

SMALL = dict(vocab_size=32000, hidden_size=512, intermediate_size=1536, num_hidden_layers=12, num_attention_heads=8,
             num_key_value_heads=2, head_dim=64, max_position_embeddings=4096, tie_word_embeddings=True,
             rope_theta=1000000.0)


def make_small(root: Path) -> tuple[Path, Path]:
    """A random Qwen3 target written by transformers, and a random 2-layer draft tapping 4 layers."""
    from safetensors.torch import save_file
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    model = Qwen3ForCausalLM(Qwen3Config(**SMALL))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2:
                p.normal_(0, 1 if "embed" in name else p.shape[1] ** -0.5)
    model.save_pretrained(str(root / "target"))
    g = torch.Generator().manual_seed(1)
    h, k = SMALL["hidden_size"], 4

    def lin(o: int, i: int) -> torch.Tensor:
        return torch.randn(o, i, generator=g) / i ** 0.5

    t = {"fc.weight": lin(h, k * h), "hidden_norm.weight": torch.ones(h), "norm.weight": torch.ones(h)}
    for i in range(2):
        p = f"layers.{i}."
        t.update({p + "input_layernorm.weight": torch.ones(h), p + "post_attention_layernorm.weight": torch.ones(h),
                  p + "self_attn.q_proj.weight": lin(512, h), p + "self_attn.k_proj.weight": lin(128, h),
                  p + "self_attn.v_proj.weight": lin(128, h), p + "self_attn.o_proj.weight": lin(h, 512),
                  p + "self_attn.q_norm.weight": torch.ones(64), p + "self_attn.k_norm.weight": torch.ones(64),
                  p + "mlp.gate_proj.weight": lin(1536, h), p + "mlp.up_proj.weight": lin(1536, h),
                  p + "mlp.down_proj.weight": lin(h, 1536)})
    d = root / "draft"
    d.mkdir()
    save_file(t, str(d / "model.safetensors"))
    cfg = {"architectures": ["DFlashDraftModel"], "model_type": "qwen3", "block_size": 16, "num_target_layers": 12,
           "dflash_config": {"mask_token_id": 31999, "target_layer_ids": [1, 4, 7, 10]},
           "hidden_size": h, "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 64,
           "intermediate_size": 1536, "vocab_size": 32000, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
           "max_position_embeddings": 4096, "layer_types": ["full_attention"] * 2, "dtype": "float32"}
    (d / "config.json").write_text(json.dumps(cfg))
    return d, root / "target"


class OracleDrafts(EagerExecutor):
    """The eager executor drafting the known continuation, 80% right (the small pair's random
    draft would accept nothing): the host loop and verification stay the real ones."""

    def __init__(self, *args: Any, full: list[int], prng: random.Random, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.full, self.prng = full, prng

    def draft(self, start: int, last: int, size: int) -> None:
        self.start_block(last)
        full = self.full
        proposal = [full[start + 1 + j] if start + 1 + j < len(full) and self.prng.random() < 0.8 else 0
                    for j in range(size - 1)]
        self.block_ids[0, 1:size] = torch.tensor(proposal, dtype=torch.long, device=self.device)


def timed_load(fn: Callable[[], Any], reps: int) -> tuple[Any, float]:
    times, out = [], None
    for _ in range(reps):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return out, statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pair", choices=("tiny", "small"), default="tiny")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    ap.add_argument("--new-tokens", type=int, default=96)
    ap.add_argument("--prompts", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3, help="loads timed per backend")
    a = ap.parse_args()
    dev, dtype = torch.device(a.device), getattr(torch, a.dtype)
    tmp = tempfile.TemporaryDirectory()
    if a.pair == "tiny":
        draft_dir, target_dir = ROOT / "fixtures/tiny-pair/draft", ROOT / "fixtures/tiny-pair/target"
    else:
        draft_dir, target_dir = make_small(Path(tmp.name))
    cfg = json.loads((target_dir / "config.json").read_text())
    where = str(target_dir / "config.json")
    inv = inventory(target_dir, str(target_dir))
    targs = TargetSettings.from_config(cfg, where)
    info = hf_target_info(target_from_config(cfg, label=where, where=where))
    loaders = {
        "native": lambda: load_target(target_dir, targs, dtype=dtype, device=dev, inv=inv),
        "transformers": lambda: load_hf_target(target_dir, info, dtype=dtype, device=dev, tensor_names=list(inv.tensors)),
    }
    targets, load_s = {}, {}
    for name, fn in loaders.items():
        fn()  # warm: imports, page cache
        targets[name], load_s[name] = timed_load(fn, a.repeats)
    draft = load_draft(draft_dir, DraftSettings.from_spec(read_draft(LocalSource(draft_dir))), dtype=dtype, device=dev)
    vocab = targets["native"].lm_head.weight.shape[0]
    rng = random.Random(0)
    if a.pair == "tiny":  # the built-in math/code/chat prompts, chat template on, as smoke-run feeds them
        from dflash_ckpt.sources.prompts import PromptEncoder, gather_prompts

        enc = PromptEncoder(target_dir, chat_template=True, thinking=False)
        prompts = [enc.encode(p) for p in gather_prompts([], None)][: a.prompts]
    else:
        prompts = [[rng.randrange(10, vocab) for _ in range(24 + 8 * i)] for i in range(a.prompts)]
    print(f"pair {a.pair} ({target_dir.name}: {targs.dims.num_layers} layers, hidden {targs.dims.hidden_size}), "
          f"device {dev}, {a.dtype}, {a.new_tokens} new tokens x {a.prompts} prompts, torch {torch.__version__}")
    tok: dict[str, dict[str, int]] = {b: {"T": 0, "D": 0} for b in targets}
    secs: dict[str, dict[str, float]] = {b: {"T": 0.0, "D": 0.0} for b in targets}
    same = True
    all_lengths: list[int] = []
    for p in prompts:
        results: dict[str, Any] = {}
        for name, tgt in targets.items():
            cap = len(p) + a.new_tokens + 32
            ref = decode(tgt, p, max_new_tokens=a.new_tokens, cache=tgt.new_cache(cap))
            kw = {"target_cache": tgt.new_cache(cap), "draft_cache": draft.new_cache(cap),
                  "block_size": draft.args.block_size}
            ex: EagerExecutor = EagerExecutor(tgt, draft, **kw)
            if a.pair == "small":
                ex = OracleDrafts(tgt, draft, full=p + ref.tokens, prng=random.Random(1), **kw)
            now(dev)
            spec = run_dflash(ex, p, max_new_tokens=a.new_tokens)
            for key, gen in (("T", ref), ("D", spec)):
                tok[name][key] += gen.decode_tokens
                secs[name][key] += gen.decode_s
            results[name] = (ref.tokens, spec.tokens, spec.acceptance_lengths)
        same &= results["native"] == results["transformers"]
        all_lengths.extend(results["native"][2])
    print(f"{'backend':<13}{'load s':>9}{'T tok/s':>10}{'D tok/s':>10}{'D/T':>7}")
    rate = {b: {k: tok[b][k] / secs[b][k] for k in ("T", "D")} for b in targets}
    for b in targets:
        print(f"{b:<13}{load_s[b]:>9.3f}{rate[b]['T']:>10.1f}{rate[b]['D']:>10.1f}{rate[b]['D'] / rate[b]['T']:>7.2f}")
    print(f"transformers / native: load {load_s['transformers'] / load_s['native']:.2f}x, target-only tok/s "
          f"{rate['transformers']['T'] / rate['native']['T']:.2f}x, DFlash tok/s "
          f"{rate['transformers']['D'] / rate['native']['D']:.2f}x")
    print(f"tau {sum(all_lengths) / len(all_lengths):.2f}; tokens and acceptance lengths identical across "
          f"backends: {'yes' if same else 'NO'}")
    tmp.cleanup()
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
