#!/usr/bin/env python3
"""DFlash v1 against DFlash2 on the tiny pair, side by side in one run.

    python benchmarks/bench_dflash2_tiny.py [--max-new-tokens 128]

Decodes smoke-run's default prompts (chat template, thinking off, greedy) with the target alone
and with each draft, in the reference runtime on the CPU, and prints tau (tokens per step, bonus
included) per prompt and overall, the decode speed of each, and whether every output equals the
target's. Rows:
- ``v1 draft/``: the DFlash v1 tiny draft;
- ``DFlash2 draft2/``: the DFlash2 tiny draft, trained on the same data with the same recipe;
- ``DFlash2, argmax picks``: the same DFlash2 weights with the candidate selector bypassed (the
  logits' argmax, as a v1 draft picks): what the conv layers give alone, and so what the selector
  adds.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from dflash_ckpt.draftspec.draft_settings import DraftSettings  # noqa: E402

from dflash_ckpt.draftspec.target_settings import TargetSettings  # noqa: E402
from dflash_ckpt.runtime.draft import DFlashDraft  # noqa: E402
from dflash_ckpt.runtime.generate import decode  # noqa: E402
from dflash_ckpt.runtime.eager_dflash import dflash_decode  # noqa: E402
from dflash_ckpt.runtime.loading import load_draft, load_target  # noqa: E402
from dflash_ckpt.sources.local import LocalSource  # noqa: E402
from dflash_ckpt.sources.prompts import BUILTIN_PROMPTS, PromptEncoder, stop_token_ids  # noqa: E402
from dflash_ckpt.draftspec.specs import read_draft_spec as read_draft  # noqa: E402
from dflash_ckpt.draftspec.specs import target_from_config  # noqa: E402

PAIR = ROOT / "fixtures" / "tiny-pair"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--max-new-tokens", "-n", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cpu = torch.device("cpu")
    tdir = PAIR / "target"
    tcfg = json.loads((tdir / "config.json").read_text())
    target = load_target(tdir, TargetSettings.from_config(tcfg, str(tdir / "config.json")), dtype=torch.bfloat16, device=cpu)
    enc = PromptEncoder(tdir, chat_template=True, thinking=False)
    stops = stop_token_ids(tdir, target_from_config(tcfg, label="t", where="t").eos_values, enc.eos_token_id)
    prompts = [(p.name, enc.encode(p)) for p in BUILTIN_PROMPTS]
    drafts = {}
    for name in ("draft", "draft2"):
        folder = PAIR / name
        drafts[name] = load_draft(folder, DraftSettings.from_spec(read_draft(LocalSource(folder))), dtype=torch.bfloat16, device=cpu)
    capacity = max(len(ids) for _, ids in prompts) + args.max_new_tokens + 16
    tcache = target.new_cache(capacity)
    rows = [("v1 draft/", "draft", False), ("DFlash2 draft2/", "draft2", False), ("DFlash2, argmax picks", "draft2", True)]
    print(f"tiny pair, smoke-run's default prompts, -n {args.max_new_tokens}, bf16, CPU, {args.threads} threads")
    print(f"{'draft':24s} " + " ".join(f"{n:>7s}" for n, _ in prompts) + f" {'overall':>8s} {'tok/s':>7s}  lossless")
    refs = {n: decode(target, ids, max_new_tokens=args.max_new_tokens, stop_ids=stops, cache=tcache) for n, ids in prompts}
    t_tok = sum(r.decode_tokens for r in refs.values()) / sum(r.decode_s for r in refs.values())
    for label, name, argmax in rows:
        draft = drafts[name]
        dcache = draft.new_cache(capacity)
        if argmax:
            draft.pick_tokens = DFlashDraft.pick_tokens.__get__(draft)  # type: ignore[method-assign]
        lengths, per, same, toks, secs = [], [], True, 0, 0.0
        for n, ids in prompts:
            gen = dflash_decode(target, draft, ids, max_new_tokens=args.max_new_tokens, stop_ids=stops,
                                target_cache=tcache, draft_cache=dcache, block_size=draft.args.block_size)
            secs += gen.decode_s
            toks += gen.decode_tokens
            same &= gen.tokens == refs[n].tokens
            lengths += gen.acceptance_lengths
            per.append(sum(gen.acceptance_lengths) / len(gen.acceptance_lengths))
        if argmax:
            del draft.pick_tokens
        tau = sum(lengths) / len(lengths)
        print(f"{label:24s} " + " ".join(f"{v:7.2f}" for v in per) + f" {tau:8.2f} {toks / secs:7.1f}  {same}")
    print(f"{'target alone':24s} " + " ".join(f"{'':>7s}" for _ in prompts) + f" {'':>8s} {t_tok:7.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
