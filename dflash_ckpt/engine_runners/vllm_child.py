"""The child process that runs vLLM for ``smoke-run --engine vllm|both``: ``python vllm_child.py REQUEST RESULT``.

Why a child of its own: vLLM spawns workers, binds OpenMP threads to cores, installs signal
handlers and keeps global state (its metrics registry, the torch thread count); none of that may
leak into our process or outlive the run. The parent (``engine_runners/vllm_run.py``) writes the request
as JSON, runs this file by its path with the engine's python (so nothing of ``dflash_ckpt`` is
imported here: the standard library and vLLM only, and the file runs in an env that has only
vLLM), reads the result JSON and kills the child's whole process group afterwards.

What it measures, per phase (``dflash``: the target with the draft as vLLM's ``dflash`` method;
``target``: the target alone), on the token ids the parent built (the reference path's chat
template, thinking switch and stop ids), one prompt at a time, greedy or (the request's
``sampling``) with the run's temperature, top-p, top-k and seed, which vLLM's V1 rejection
sampler verifies (DFlash's drafts are argmax: the ``rejection`` rule):

- Each prompt goes through ``LLMEngine.add_request`` and is stepped by hand with
  ``output_kind=DELTA`` and vLLM's engine core in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``),
  so one ``step()`` is one scheduler step: its new tokens are one DFlash step's acceptance length
  (the first step is the prefill), and its wall time, taken by us around the call, is the step time.
- vLLM's own speculative counters (``LLM.get_metrics()``: drafts, draft tokens, accepted tokens,
  accepted per position), read before and after each prompt and differenced.
- ``target`` also scores each greedy DFlash output teacher forced: one prefill of prompt + DFlash tokens
  with ``prompt_logprobs``, whose raw log-probabilities differ from the logits by one constant per
  row, so a row's argmax, the DFlash token's margin below it and its rank are what the reference
  judge (``runtime/judge.py``) reads from logits.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time
import traceback
from typing import Any

SPEC_COUNTERS = {
    "vllm:spec_decode_num_drafts": "drafts",
    "vllm:spec_decode_num_draft_tokens": "draft_tokens",
    "vllm:spec_decode_num_accepted_tokens": "accepted",
}
PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"


def spec_metrics(llm: Any) -> dict[str, Any]:
    """vLLM's speculative counters now (zeros before the first draft)."""
    out: dict[str, Any] = {name: 0 for name in SPEC_COUNTERS.values()}
    out["accepted_per_pos"] = []
    for metric in llm.get_metrics():
        if metric.name in SPEC_COUNTERS:
            out[SPEC_COUNTERS[metric.name]] += int(metric.value)
        elif metric.name == PER_POS:
            values = [int(v) for v in metric.values]
            prev = out["accepted_per_pos"]
            out["accepted_per_pos"] = [a + b for a, b in zip(values, prev + [0] * len(values))] if prev else values
    return out


def metrics_delta(after: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    out = {k: after[k] - before[k] for k in SPEC_COUNTERS.values()}
    prev = before["accepted_per_pos"] + [0] * len(after["accepted_per_pos"])
    out["accepted_per_pos"] = [a - b for a, b in zip(after["accepted_per_pos"], prev)]
    return out


def build_llm(req: dict[str, Any], dflash: bool) -> Any:
    from vllm import LLM

    kwargs: dict[str, Any] = dict(
        model=req["target"], dtype=req["dtype"], enforce_eager=True, max_model_len=req["max_model_len"],
        max_num_seqs=1, disable_log_stats=False, seed=0,
        tensor_parallel_size=req["tensor_parallel_size"], pipeline_parallel_size=req["pipeline_parallel_size"],
        max_logprobs=max(20, req["logprobs"]),
    )
    if dflash:
        kwargs["speculative_config"] = {"method": "dflash", "model": req["draft"],
                                        "num_speculative_tokens": req["num_speculative_tokens"]}
    kwargs.update(req.get("engine_args") or {})
    return LLM(**kwargs)


def shut_down(llm: Any) -> None:
    """Stop the engine core and its workers before the next engine starts (one at a time)."""
    core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
    if core is not None and hasattr(core, "shutdown"):
        core.shutdown()
    del llm
    gc.collect()


def sampling_kwargs(req: dict[str, Any], max_tokens: int) -> dict[str, Any]:
    """``SamplingParams``' keywords for one decode: greedy (temperature 0), or the request's
    ``sampling`` (temperature, top-p, top-k with 0 as off, as vLLM spells it, and the seed, so a
    rerun draws the same tokens)."""
    kwargs: dict[str, Any] = dict(temperature=0.0, max_tokens=max_tokens, stop_token_ids=req["stop_token_ids"] or None,
                                  ignore_eos=True, detokenize=False)
    sampling = req.get("sampling")
    if sampling:
        kwargs.update(temperature=float(sampling["temperature"]), top_p=float(sampling["top_p"]),
                      top_k=int(sampling["top_k"]), seed=int(sampling["seed"]))
    return kwargs


def decode(llm: Any, ids: list[int], req: dict[str, Any], max_tokens: int, rid: str) -> dict[str, Any]:
    """Decoding of ``ids`` (``sampling_kwargs``), stepped by hand: tokens, new tokens per step, step times."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt
    from vllm.sampling_params import RequestOutputKind

    params = SamplingParams(**sampling_kwargs(req, max_tokens), output_kind=RequestOutputKind.DELTA)
    engine = llm.llm_engine
    engine.add_request(rid, TokensPrompt(prompt_token_ids=ids), params)
    tokens: list[int] = []
    per_step: list[int] = []
    step_s: list[float] = []
    while engine.has_unfinished_requests():
        t0 = time.perf_counter()
        outs = engine.step()
        dt = time.perf_counter() - t0
        new = [tok for out in outs if out.request_id == rid for comp in out.outputs for tok in comp.token_ids]
        if new:
            tokens += new
            per_step.append(len(new))
            step_s.append(dt)
    return {"tokens": tokens, "step_lengths": per_step[1:], "prefill_s": step_s[0] if step_s else 0.0,
            "step_s": step_s[1:], "decode_s": sum(step_s[1:])}


def teacher_forced(llm: Any, ids: list[int], tokens: list[int], k: int, rid: str) -> list[list[float]]:
    """Per new token ``j``: ``[argmax id, margin of tokens[j] below the row's max, rank of tokens[j],
    [[id, logprob], ...] best first]`` from the target's raw log-probabilities over prompt +
    ``tokens`` (one prefill)."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    if not tokens:
        return []
    params = SamplingParams(temperature=0.0, max_tokens=1, prompt_logprobs=k, detokenize=False)
    out = llm.generate([TokensPrompt(prompt_token_ids=ids + tokens)], params, use_tqdm=False)[0]
    rows = []
    for j, tok in enumerate(tokens):
        row = out.prompt_logprobs[len(ids) + j]
        best = min(row.items(), key=lambda kv: kv[1].rank if kv[1].rank is not None else 1 << 30)
        mine = row.get(tok)
        margin = best[1].logprob - mine.logprob if mine is not None else float("inf")
        top = sorted(((int(t), float(lp.logprob)) for t, lp in row.items()), key=lambda tl: -tl[1])[:k + 1]
        rows.append([int(best[0]), float(margin), int(mine.rank) if mine is not None and mine.rank else k + 1, top])
    return rows


def run_phase(req: dict[str, Any], name: str, dflash_tokens: list[list[int]] | None) -> dict[str, Any]:
    t0 = time.perf_counter()
    llm = build_llm(req, dflash=name == "dflash")
    phase: dict[str, Any] = {"start_s": time.perf_counter() - t0, "prompts": []}
    try:
        if req.get("warmup", True):
            decode(llm, req["prompts"][0], req, min(4, req["max_new_tokens"]), f"{name}-warmup")
        for i, ids in enumerate(req["prompts"]):
            before = spec_metrics(llm)
            run = decode(llm, ids, req, req["max_new_tokens"], f"{name}-{i}")
            if name == "dflash":
                run["metrics"] = metrics_delta(spec_metrics(llm), before)
            elif dflash_tokens is not None and not req.get("sampling"):  # a sampled output: no argmax to judge
                run["rows"] = teacher_forced(llm, ids, dflash_tokens[i], req["logprobs"], f"tf-{i}")
            phase["prompts"].append(run)
    finally:
        shut_down(llm)
    return phase


def main(argv: list[str]) -> int:
    request_path, result_path = argv[1], argv[2]
    with open(request_path, encoding="utf-8") as fh:
        req = json.load(fh)
    result: dict[str, Any] = {"phases": {}}
    try:
        import vllm

        result["vllm_version"] = getattr(vllm, "__version__", None)
        phases = result["phases"]
        for name in req["phases"]:
            spec = [p["tokens"] for p in phases["dflash"]["prompts"]] if "dflash" in phases else None
            phases[name] = run_phase(req, name, spec)
    except BaseException as exc:  # reported to the parent as one line; the log keeps the traceback
        traceback.print_exc()
        result["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0] if str(exc) else type(exc).__name__
        _write(result_path, result)
        return 1
    _write(result_path, result)
    return 0


def _write(path: str, result: dict[str, Any]) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(result, fh)
    os.replace(tmp, path)


if __name__ == "__main__":
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    sys.exit(main(sys.argv))
