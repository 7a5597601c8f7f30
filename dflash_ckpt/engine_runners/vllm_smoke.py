"""smoke-run's vLLM engine: the request from the run's plan, and vLLM's figures as ``PromptRun``s.

The ids are the reference path's (``runtime/plan.encode_prompts``: chat template, thinking switch)
and so are the stop ids and ``-n``; the block is the plan's (``num_speculative_tokens`` =
block - 1, as vLLM takes it), the dtype the target's run dtype (vLLM runs the draft in it too).
What comes back is shaped like the reference runtime's result, so the table, the JSON and the
findings (DF401-DF406) are the same code: each prompt's DFlash tokens and per-step acceptance
lengths and step times, its target-only run, and the lossless verdict of ``runtime/judge.py``
over vLLM's own teacher-forced target rows. vLLM's own counters ride along in ``engine_run``.

Memory: the run must fit vLLM's own budget, not ours: on the CPU build the weights plus the KV
space it reserves (``VLLM_CPU_KVCACHE_SPACE`` GiB, ``DEFAULT_KV_SPACE_GIB`` unless set) against
MemAvailable; on CUDA vLLM sizes its cache from ``gpu_memory_utilization`` itself.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from dflash_ckpt.engine_runners.vllm_facts import VllmFacts
from dflash_ckpt.engine_runners.vllm_run import run_child
from dflash_ckpt.errors import UsageError

#: GiB of KV cache the CPU build reserves when VLLM_CPU_KVCACHE_SPACE is unset here (its own
#: default of 4 GiB is more than a smoke run of batch 1 needs on a small machine).
DEFAULT_KV_SPACE_GIB = 1
#: Top log-probabilities per position: the judge needs the row's best and the chosen token
#: (vLLM always adds the chosen token with its rank); 5 also places near runners-up.
LOGPROBS = 5
GIB = 1 << 30
#: The verification rule vLLM runs when it samples: its V1 rejection sampler, with DFlash's
#: argmax drafts taken as one-hot (``run/sampling_settings.RULES``).
RULE = "rejection"


@dataclass
class EngineOptions:
    """``--engine`` and the options passed through to vLLM."""

    engine: str = "reference"
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    max_model_len: int | None = None
    engine_args: dict[str, Any] = field(default_factory=dict)
    timeout_s: float = 900.0

    def to_json(self) -> dict[str, Any]:
        return {"tensor_parallel_size": self.tensor_parallel_size, "pipeline_parallel_size": self.pipeline_parallel_size,
                "max_model_len": self.max_model_len, "engine_args": dict(self.engine_args), "timeout_s": self.timeout_s}


def build_request(eng: EngineOptions, *, target_dir: Path, draft_dir: Path, dtype: str, block_size: int,
                  encoded: Sequence[list[int]], max_new_tokens: int, stop_ids: Sequence[int],
                  max_positions: int | None, warmup: bool = True, sampling: Any = None) -> dict[str, Any]:
    """The child's request (``vllm_child.py``): both phases, DFlash first (its tokens are then
    scored teacher forced by the target-only engine, greedy only). ``sampling``: the run's
    ``SamplingSettings``; sampled, vLLM gets its temperature, top-p, top-k and seed (and runs its
    own rule, ``rejection``, whatever ``--verify`` says: ``RULE``)."""
    need = max(len(ids) for ids in encoded) + max_new_tokens + block_size
    max_len = eng.max_model_len or min(max_positions or need, max(need, 256))
    if max_len < need:
        raise UsageError(f"--max-model-len {max_len}: the longest prompt, -n {max_new_tokens} and one block need "
                         f"{need} positions", code="DF004", key="--max-model-len")
    return {"target": str(Path(target_dir).resolve()), "draft": str(Path(draft_dir).resolve()), "dtype": dtype, "num_speculative_tokens": block_size - 1,
            "prompts": [list(ids) for ids in encoded], "max_new_tokens": max_new_tokens,
            "stop_token_ids": list(stop_ids), "max_model_len": max_len,
            "tensor_parallel_size": eng.tensor_parallel_size, "pipeline_parallel_size": eng.pipeline_parallel_size,
            "engine_args": dict(eng.engine_args), "logprobs": LOGPROBS, "phases": ["dflash", "target"],
            "warmup": warmup, "sampling": sampling_request(sampling)}


def sampling_request(sampling: Any) -> dict[str, Any] | None:
    """The request's ``sampling``: ``None`` when greedy (or no settings), else the four values."""
    if sampling is None or sampling.greedy:
        return None
    return {"temperature": sampling.temperature, "top_p": sampling.top_p, "top_k": sampling.top_k,
            "seed": sampling.seed}


def require_engine_memory(facts: VllmFacts, weight_bytes: int, where: str) -> int | None:
    """DF407 (exit 2) when the weights and the CPU build's KV space exceed MemAvailable; returns
    the KV space to give the child (``None`` off the CPU build, where vLLM budgets itself)."""
    if not facts.cpu_build:
        return None
    given = os.environ.get("VLLM_CPU_KVCACHE_SPACE")
    kv_gib = int(given) if given and given.isdigit() and int(given) > 0 else DEFAULT_KV_SPACE_GIB
    need = weight_bytes * 2 + kv_gib * GIB  # two engines in turn; each loads the weights once
    room = _mem_available()
    if room is not None and need > room:
        raise UsageError(f"vLLM's CPU build needs about {need / GIB:.2f} GiB (the weights and "
                         f"VLLM_CPU_KVCACHE_SPACE={kv_gib} GiB of KV cache) but {room / GIB:.2f} GiB are available; "
                         "lower VLLM_CPU_KVCACHE_SPACE or free memory", code="DF407", path=where)
    return kv_gib


def _mem_available() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def run_vllm(request: dict[str, Any], *, facts: VllmFacts, eng: EngineOptions, kv_space_gib: int | None,
             where: str) -> dict[str, Any]:
    """The child's result (``vllm_child.py``), or ``EngineFailed`` (DF425)."""
    from dflash_ckpt.engine_runners.tensor_parallel import cpu_env

    return run_child(request, python=facts.python, timeout_s=eng.timeout_s, where=where, kv_space_gib=kv_space_gib,
                     extra_env=cpu_env(eng.tensor_parallel_size, facts.cpu_build))


def to_runs(raw: dict[str, Any], prompts: Sequence[Any], encoded: Sequence[list[int]], encoder: Any, *,
            tie_tolerance: float, sampled: bool = False) -> tuple[list[Any], list[dict[str, Any]], list[list[list[list[float]]]]]:
    """``PromptRun``s from the child's result (DFlash phase, target phase, teacher-forced rows),
    judged by ``runtime/judge.judge_rows``; and per prompt vLLM's own counters, with whether the
    DFlash output equals vLLM's own target-only run; and per prompt the teacher-forced rows' top
    ``[id, logprob]`` pairs (``checks/engine_compare.py`` judges a difference from the reference with them).
    ``sampled``: no rows came back; each output is one draw (``Lossless`` ``sampled``)."""
    from dflash_ckpt.runtime.generate import Generation
    from dflash_ckpt.runtime.judge import judge_rows
    from dflash_ckpt.runtime.measure import Lossless, PromptRun

    spec_runs, target_runs = raw["phases"]["dflash"]["prompts"], raw["phases"]["target"]["prompts"]
    runs, extras, tops = [], [], []
    for prompt, ids, spec, tgt in zip(prompts, encoded, spec_runs, target_runs):
        steps = spec["step_lengths"]
        dflash = Generation(tokens=list(spec["tokens"]), acceptance_lengths=list(steps), target_forwards=1 + len(steps),
                            draft_forwards=len(steps), prefill_s=spec["prefill_s"], decode_s=spec["decode_s"],
                            step_s=list(spec["step_s"]))
        target = Generation(tokens=list(tgt["tokens"]), target_forwards=len(tgt["tokens"]), prefill_s=tgt["prefill_s"],
                            decode_s=tgt["decode_s"], step_s=list(tgt["step_s"]))
        rows = tgt.get("rows") or []
        tops.append([r[3] for r in rows])
        if sampled:
            lossless, target_tokens = Lossless("sampled", 0), []
        else:
            verdict = judge_rows([r[0] for r in rows], dflash.tokens, [r[1] for r in rows], [r[2] for r in rows],
                                 tie_tolerance)
            lossless, target_tokens = Lossless.of(verdict), verdict.target_tokens
        runs.append(PromptRun(prompt, list(ids), target, dflash, lossless, target_tokens=target_tokens,
                              target_text=encoder.decode(target_tokens), dflash_text=encoder.decode(dflash.tokens)))
        m = spec.get("metrics") or {}
        drafts = m.get("drafts", 0)
        extras.append({"name": prompt.name, "vllm_metrics": m,
                       "vllm_tau": 1 + m.get("accepted", 0) / drafts if drafts else None,
                       "target_only_equal": dflash.tokens == target.tokens,
                       "target_only_first_difference": first_difference(dflash.tokens, target.tokens)})
    return runs, extras, tops


def first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    """The first index where two token lists differ (a length difference counts), else ``None``."""
    for j, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return j
    return None if len(a) == len(b) else min(len(a), len(b))


def engine_summary(raw: dict[str, Any], facts: VllmFacts, eng: EngineOptions, extras: list[dict[str, Any]],
                   sampling: dict[str, Any] | None = None) -> dict[str, Any]:
    """``engine_run`` in the JSON: which vLLM ran, its start times, its own counters, and how it
    decoded (``sampling``: ``None`` greedy; ``rule``: the rule it verified with when sampling)."""
    phases = raw["phases"]
    totals: dict[str, Any] = {"drafts": 0, "draft_tokens": 0, "accepted": 0, "accepted_per_pos": []}
    for e in extras:
        m = e["vllm_metrics"]
        for k in ("drafts", "draft_tokens", "accepted"):
            totals[k] += m.get(k, 0)
        per = m.get("accepted_per_pos", [])
        prev = totals["accepted_per_pos"] + [0] * len(per)
        totals["accepted_per_pos"] = [a + b for a, b in zip(per, prev)] if per else totals["accepted_per_pos"]
    return {"name": "vllm", **facts.to_json(), "reported_version": raw.get("vllm_version"),
            "start_s": {"dflash": phases["dflash"]["start_s"], "target_only": phases["target"]["start_s"]},
            "options": eng.to_json(), "sampling": sampling, "rule": RULE if sampling else "greedy",
            "vllm_metrics": totals,
            "vllm_tau": 1 + totals["accepted"] / totals["drafts"] if totals["drafts"] else None,
            "prompts": extras}
