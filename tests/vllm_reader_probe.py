"""Run by the vLLM python (tests/test_engine_vllm_readers.py): ``python vllm_reader_probe.py JOB RESULT``.

For each draft in JOB, start vLLM on the tiny target with the draft as its ``dflash`` method
(one engine at a time, in this process: ``VLLM_ENABLE_V1_MULTIPROCESSING=0``), generate two
tokens, and record what vLLM itself made of the draft: whether it loaded and ran, the target
layers whose outputs it feeds the draft (``aux_hidden_state_layers``: tap + 1 in vLLM's
convention), and the mask id it drafts with. A failure records its error line. Standard library
and vLLM only."""

from __future__ import annotations

import gc
import json
import os
import sys
import traceback


def probe(target: str, draft: str, spec_tokens: int) -> dict:
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    try:
        llm = LLM(model=target, dtype="bfloat16", enforce_eager=True, max_model_len=256, max_num_seqs=1, seed=0,
                  speculative_config={"method": "dflash", "model": draft, "num_speculative_tokens": spec_tokens})
    except Exception as exc:  # what vLLM refuses is the measurement
        traceback.print_exc()
        return {"loads": False, "error": " ".join(f"{type(exc).__name__}: {exc}".split())[:600]}
    try:
        runner = llm.llm_engine.engine_core.engine_core.model_executor.driver_worker.worker.model_runner
        out = llm.generate([TokensPrompt(prompt_token_ids=[720, 30, 31, 32])],
                           SamplingParams(temperature=0.0, max_tokens=2), use_tqdm=False)[0]
        drafter = runner.drafter
        inner = getattr(drafter.model, "model", drafter.model)
        return {"loads": True, "generated": len(out.outputs[0].token_ids),
                "aux_layers": list(getattr(runner.model.model, "aux_hidden_state_layers", ()) or ()),
                "mask_token_id": getattr(inner, "mask_token_id", None),
                "parallel_drafting_token_id": getattr(drafter, "parallel_drafting_token_id", None)}
    except Exception as exc:
        traceback.print_exc()
        return {"loads": False, "error": f"{type(exc).__name__}: {exc}".splitlines()[0]}
    finally:
        core = llm.llm_engine.engine_core
        core.shutdown()
        del llm
        gc.collect()


def main() -> int:
    job = json.load(open(sys.argv[1], encoding="utf-8"))
    results = {name: probe(job["target"], draft, spec) for name, (draft, spec) in job["drafts"].items()}
    with open(sys.argv[2], "w", encoding="utf-8") as fh:
        json.dump(results, fh)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    sys.exit(main())
