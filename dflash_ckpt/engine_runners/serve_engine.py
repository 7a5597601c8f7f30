"""smoke-run's ``--engine vllm-serve``: the serve line the tool prints, run in vLLM's OpenAI server.

The flow is ``--engine both``'s: the reference runtime runs the prompts first; then the printed
``vllm serve`` argv (``inspect``'s ``serve.vllm`` for the same draft and target) starts as a
server (``vllm_serve.served``: plus host, port, name only), the same ids go to
``/v1/completions`` one at a time, tau and per-position acceptance come from the differences of
``/metrics``, and the tokens are judged against the reference's with the same tie-aware judge
(``checks/engine_compare``: at a first difference, both tokens within the tie tolerance in the
server's own top log-probabilities there). Then the load phase (``serve_load``): ``--concurrency``
requests at once against that server and against one started from the same argv without
``--speculative-config``: tau under load, output tokens/s with and without the draft, the speedup.

What the counters cannot give: the order of the acceptance lengths. The per-position counts fix
their multiset exactly (a step that accepted ``a`` drafts counts at positions ``0..a-1``), so each
prompt's lengths are that multiset, longest first; step times are the request's wall time spread
evenly over its steps.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Sequence

from dflash_ckpt.checks.engine_compare import compare_prompts, engine_findings
from dflash_ckpt.engine_runners.serve_load import DEFAULT_CONCURRENCY, compare_load, load
from dflash_ckpt.engine_runners.smoke_engine import EngineRun
from dflash_ckpt.engine_runners.vllm_serve import (SERVED_NAME, Server, add, local_additions, per_position, run_prompts,
                                            served, summary, tau)
from dflash_ckpt.errors import UsageError
from dflash_ckpt.rules import Finding

#: Top log-probabilities asked per generated token: the tie judge needs both tokens' values.
TOP_LOGPROBS = 5


def lengths_from_counts(drafts: int, per_pos: Sequence[int]) -> list[int]:
    """The acceptance lengths (accepted drafts + 1) whose per-position counts are ``per_pos``
    over ``drafts`` steps, longest first: ``per_pos[i]`` steps accepted more than ``i`` drafts."""
    counts = [int(x) for x in per_pos] + [0]
    out: list[int] = []
    for a in range(len(counts) - 1, -1, -1):
        exactly = (counts[a - 1] if a else drafts) - counts[a]
        out += [a + 1] * max(exactly, 0)
    return out


def without_draft(argv: Sequence[str]) -> list[str]:
    """The same serve argv with ``--speculative-config VALUE`` removed: the plain server."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg == "--speculative-config":
            skip = True
            continue
        if arg.startswith("--speculative-config="):
            continue
        out.append(arg)
    return out


@dataclass
class ServeRun(EngineRun):
    """``EngineRun`` with the served path: the same refusals and request, another ``compare_into``."""

    concurrency: int = DEFAULT_CONCURRENCY

    @classmethod
    def start(cls, opts: Any) -> ServeRun:
        base = EngineRun.start(opts)
        return cls(base.facts, base.options, concurrency=getattr(opts, "concurrency", None) or DEFAULT_CONCURRENCY)

    def compare_into(self, result: Any, prompts: Sequence[Any], encoded: Sequence[list[int]], encoder: Any) -> list[Finding]:
        from dflash_ckpt.runtime.generate import Generation
        from dflash_ckpt.runtime.measure import Lossless, PromptRun

        serve = (result.precheck.serve or {}).get("vllm") if result.precheck is not None else None
        if not serve:
            raise UsageError("--engine vllm-serve: inspect gives no vLLM serve line for this pair (its vLLM verdict "
                             "does not load it); run inspect for why", code="DF004", key="--engine")
        req = self.request
        stops, n = req["stop_token_ids"], req["max_new_tokens"]
        where = result.target_label
        from dflash_ckpt.engine_runners.tensor_parallel import cpu_env

        size = self.options.tensor_parallel_size
        env = {"VLLM_CPU_KVCACHE_SPACE": str(self.kv_space_gib)} if self.kv_space_gib else {}
        env.update(cpu_env(size, self.facts.cpu_build))
        extra = ["--tensor-parallel-size", str(size)] if size > 1 else []
        tol = result.tie_tolerance if result.tie_tolerance is not None else self.tie_tolerance
        block = result.block_size or 1
        with served(serve, python=self.facts.python, where=where, env=env,
                    ready_timeout_s=self.options.timeout_s, cwd=os.getcwd(), extra_args=extra) as server:
            t0 = time.perf_counter()
            one = run_prompts(server, encoded, max_tokens=n, stop_token_ids=stops, where=where,
                              top_logprobs=TOP_LOGPROBS)
            load_draft = load(server, encoded, concurrency=self.concurrency, max_tokens=n, stop_token_ids=stops)
            ran, start_draft, spent = list(server.argv), server.start_s, time.perf_counter() - t0
        plain_argv = without_draft(serve)
        with served(plain_argv, python=self.facts.python, where=where, env=env,
                    ready_timeout_s=self.options.timeout_s, cwd=os.getcwd(), extra_args=extra) as plain:
            one_plain = run_prompts(plain, encoded, max_tokens=n, stop_token_ids=stops, where=where)
            load_plain = load(plain, encoded, concurrency=self.concurrency, max_tokens=n, stop_token_ids=stops)
            start_plain = plain.start_s
        runs, tops = [], []
        for prompt, ids, r, p in zip(prompts, encoded, one, one_plain):
            m = r["metrics"]
            lengths = lengths_from_counts(m["drafts"], m["accepted_per_pos"])
            steps = max(len(lengths), 1)
            dflash = Generation(tokens=r["tokens"], acceptance_lengths=lengths, target_forwards=1 + len(lengths),
                                draft_forwards=len(lengths), decode_s=r["seconds"],
                                step_s=[r["seconds"] / steps] * len(lengths))
            target = Generation(tokens=p["tokens"], target_forwards=len(p["tokens"]), decode_s=p["seconds"],
                                step_s=[p["seconds"] / max(len(p["tokens"]), 1)] * len(p["tokens"]))
            equal = r["tokens"] == p["tokens"]
            runs.append(PromptRun(prompt, list(ids), target, dflash,
                                  Lossless("identical" if equal else "differs", len(r["tokens"])),
                                  target_tokens=p["tokens"], target_text=encoder.decode(p["tokens"]),
                                  dflash_text=encoder.decode(r["tokens"]), input_text=encoder.render(prompt)))
            tops.append(r["tops"])
        comparisons = compare_prompts(result.runs, runs, tops, block=block, tolerance=tol)
        totals = summary(one)
        result.engine_run = {
            "name": "vllm", **self.facts.to_json(), "reported_version": None,
            "start_s": {"dflash": start_draft, "target_only": start_plain},
            "options": self.options.to_json(), "sampling": None, "rule": "greedy",
            "vllm_metrics": totals["metrics"], "vllm_tau": totals["tau"],
            "prompts": [{"name": pr.name, "vllm_metrics": r["metrics"], "vllm_tau": r["tau"],
                         "per_position": r["per_position"], "seconds": r["seconds"],
                         "target_only_equal": r["tokens"] == p["tokens"]}
                        for pr, r, p in zip(prompts, one, one_plain)],
            "served": {"argv": ran, "printed": list(serve), "local_additions": local_additions(ran, serve),
                       "argv_without_draft": list(plain.argv), "per_position": totals["per_position"],
                       "seconds": spent,
                       "load": {"concurrency": self.concurrency,
                                "with_draft": _brief(load_draft), "without_draft": _brief(load_plain),
                                **compare_load(load_draft, load_plain)}},
            "runs": [r.to_json(block) for r in runs],
            "comparison": [c.to_json() for c in comparisons],
        }
        result.engine_runs = runs
        result.comparisons = comparisons
        findings = engine_findings("vLLM's server", comparisons, result.runs, runs, tol)
        return findings


def _brief(phase: dict[str, Any]) -> dict[str, Any]:
    """The load phase without its outputs (they are compared, not kept)."""
    return {k: v for k, v in phase.items() if k != "outputs"}


__all__ = ["ServeRun", "lengths_from_counts", "without_draft", "add", "per_position", "tau", "SERVED_NAME",
           "Server"]
