#!/usr/bin/env python3
"""What ``probe-taps`` saves, on the tiny trained pair (smoke-run's prompts, 128 tokens each).

    python benchmarks/bench_probe.py [--repeat 3]

Prints, measured side by side in one run:
1. one candidate measured by the probe (draft calls on recorded features) against the same
   candidate measured by ``dflash_decode`` (draft calls and a target verification per step), for
   a few tap sets, with both taus (equal where rounding flips no draft token);
2. the full enumeration of C(8, 3) = 56 candidates with and without giving up on candidates sure
   to lose: candidates, draft calls, seconds, and whether the exact head of the ranking is the same.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dflash_ckpt.run.probe_search import Measured, search_taps  # noqa: E402
from dflash_ckpt.draftspec.draft_settings import DraftSettings  # noqa: E402
from dflash_ckpt.draftspec.target_settings import TargetSettings  # noqa: E402
from dflash_ckpt.runtime.eager_dflash import dflash_decode  # noqa: E402
from dflash_ckpt.runtime.loading import load_draft, load_target  # noqa: E402
from dflash_ckpt.runtime.probe import measure, reading_taps, record  # noqa: E402
from dflash_ckpt.sources.local import LocalSource  # noqa: E402
from dflash_ckpt.sources.prompts import PromptEncoder, gather_prompts, stop_token_ids  # noqa: E402
from dflash_ckpt.draftspec.specs import read_draft_spec as read_draft  # noqa: E402
from dflash_ckpt.draftspec.specs import read_target_spec as read_target  # noqa: E402

PAIR = ROOT / "fixtures" / "tiny-pair"
N = 128


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)
    tspec = read_target(LocalSource(PAIR / "target"))
    spec = read_draft(LocalSource(PAIR / "draft"))
    targs = TargetSettings.from_config(tspec.config, tspec.where)
    dev = torch.device("cpu")
    target = load_target(PAIR / "target", targs, dtype=torch.bfloat16, device=dev)
    draft = load_draft(PAIR / "draft", DraftSettings.from_spec(spec), dtype=torch.bfloat16, device=dev)
    enc = PromptEncoder(PAIR / "target")
    prompts = [enc.encode(p) for p in gather_prompts([], None)]
    stops = stop_token_ids(PAIR / "target", tspec.eos_values, enc.eos_token_id)
    depth, block = targs.dims.num_layers, draft.args.block_size
    tcache, dcache = target.new_cache(512), draft.new_cache(512)
    t0 = time.perf_counter()
    recs = [record(target, p, depth=depth, max_new_tokens=N, stop_ids=stops, cache=tcache) for p in prompts]
    record_s = time.perf_counter() - t0
    kw = dict(embed_w=target.embed_tokens.weight, head_w=target.lm_head.weight, draft_cache=dcache,
              block_size=block, stop_ids=stops)
    print(f"tiny pair: {depth} target layers, {len(prompts)} prompts, {N} tokens; recording every layer once "
          f"took {record_s:.2f} s")

    print(f"\n{'tap set':<12} {'probe ms':>9} {'loop ms':>9} {'loop/probe':>10} {'tau probe':>10} {'tau loop':>9}")
    for ids in ((1, 3, 5), (2, 3, 5), (2, 4, 6), (0, 1, 2)):
        probe_t, loop_t = [], []
        for _ in range(args.repeat):  # interleaved, so both see the same machine load
            t = time.perf_counter()
            m = measure(draft, recs, ids, **kw)
            probe_t.append(time.perf_counter() - t)
            t = time.perf_counter()
            lengths = []
            with reading_taps(draft, ids):
                for p in prompts:
                    lengths += dflash_decode(target, draft, p, max_new_tokens=N, stop_ids=stops, target_cache=tcache,
                                             draft_cache=dcache, block_size=block).acceptance_lengths
            loop_t.append(time.perf_counter() - t)
        pm, lm = statistics.median(probe_t) * 1e3, statistics.median(loop_t) * 1e3
        print(f"{str(list(ids)):<12} {pm:>9.0f} {lm:>9.0f} {lm / pm:>9.2f}x {m.tau:>10.3f} {sum(lengths) / len(lengths):>9.3f}")

    print(f"\n{'enumeration':<22} {'candidates':>10} {'given up':>9} {'draft calls':>12} {'seconds':>8}")
    heads = {}
    for label, floors in (("give up below floor", True), ("measure every one", False)):
        calls = {"n": 0}

        def evaluate(ids: tuple[int, ...], floor: float | None) -> Measured:
            m = measure(draft, recs, ids, floor=floor if floors else None, **kw)
            calls["n"] += m.draft_forwards
            return Measured(m.tau, m.exact)

        res = search_taps(depth, 3, evaluate)
        heads[label] = res.ranked()[:10]
        print(f"{label:<22} {res.evaluated:>10} {len(res.bounds):>9} {calls['n']:>12,} {res.seconds:>8.1f}")
    same = heads["give up below floor"] == heads["measure every one"]
    print(f"best 10 identical: {'yes' if same else 'NO'}; best {list(heads['measure every one'][0][0])} "
          f"at tau {heads['measure every one'][0][1]:.3f}")


if __name__ == "__main__":
    main()
