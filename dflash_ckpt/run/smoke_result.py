"""smoke-run's result: what the run measured and decided, and its JSON result (``--json``).

Plain data filled by ``run/smoke.run_smoke_run``; the figures are ``runtime/measure.py``'s, the
verdicts ``checks/run_findings.py``'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from dflash_ckpt.inspection import InspectResult
from dflash_ckpt.result import ResultShape
from dflash_ckpt.rules import Finding, Severity
from dflash_ckpt.run.options import SmokeOptions
from dflash_ckpt.run.smoke_evidence import Evidence, gather_evidence
from dflash_ckpt.stats.confidence import TOO_LITTLE
from dflash_ckpt.runtime.measure import TIMING_TOKENS, PromptRun, overall_figures
from dflash_ckpt.run.sampling_settings import SamplingSettings


@dataclass
class SmokeResult(ResultShape):
    command: ClassVar[str] = "smoke-run"
    draft_label: str
    target_label: str
    options: SmokeOptions
    precheck: InspectResult | None = None
    findings: list[Finding] = field(default_factory=list)
    runs: list[PromptRun] = field(default_factory=list)
    device: str | None = None
    draft_dtype: str | None = None
    target_dtype: str | None = None
    block_size: int | None = None
    tie_tolerance: float | None = None
    chat_template: bool | None = None
    stop_token_ids: list[int] = field(default_factory=list)
    refused: bool = False
    trained_block_size: int | None = None
    prompt_format: list[str] = field(default_factory=list)
    #: The runtime that ran the target: ``native`` or ``transformers``.
    backend: str | None = None
    threads: int | None = None
    static_path: bool = False
    cuda_graphs: bool = False
    #: Seconds spent capturing CUDA graphs (the "compile time"), apart from every other figure.
    capture_s: float = 0.0
    #: Which executor ran and why, with the self-check's outcome (``runtime/loops.LoopChoice``);
    #: None where the reference runtime did not run (refused, ``--engine vllm``).
    loop_choice: Any = None
    #: Weights prepared once for the CPU's fast path (CPU, bf16; ``runtime/prepack.py``: reordered
    #: into oneDNN's layout, or marked for the AVX2 kernel), and the seconds that took (apart from
    #: every other figure).
    prepacked_weights: int = 0
    prepack_s: float = 0.0
    #: How the bf16 linears ran on a CPU: ``onednn-packed`` (``runtime/prepack.py``),
    #: ``avx2-kernel`` (``runtime/cpu_kernel.py``, where oneDNN has no bf16 path) or ``torch``
    #: (``--no-compile``, another dtype); None off the CPU or before loading.
    cpu_linear: str | None = None
    #: What times the steps: ``thread`` (the decoding thread's CPU time) or ``wall``.
    step_clock: str = "wall"
    #: ``--engine vllm|both``: which vLLM ran, its own counters, and (``both``) the comparison.
    engine_run: dict[str, Any] | None = None
    #: ``--engine both``: vLLM's runs and their comparison with ``runs`` (in ``engine_run`` as JSON).
    engine_runs: list[PromptRun] = field(default_factory=list)
    comparisons: list[Any] = field(default_factory=list)
    #: A quantized target's format and what was dequantized (``draftspec.quant.summarize``), else None.
    quantization: dict[str, Any] | None = None
    #: The block layout that ran (``1+N`` or ``anchor-first``), what decided it (a config key,
    #: ``architectures``, ``default`` or ``--layout``) and the verify width it gives.
    layout: str | None = None
    layout_source: str | None = None
    verify_width: int | None = None
    #: The dtype most of each model's parameters are stored in (safetensors headers), beside
    #: the dtype it ran in (``draft_dtype``, ``target_dtype``).
    draft_dtype_stored: str | None = None
    target_dtype_stored: str | None = None
    #: What the run sampled with (greedy by default: ``run/sampling_settings.py``).
    sampling: SamplingSettings = field(default_factory=SamplingSettings)

    @property
    def sampled(self) -> bool:
        return not self.sampling.greedy
    #: The published draft this one was recognised as (repo id, or the fingerprint of a local
    #: copy: ``checks/published.py``), whose figures the report sets beside the suites' taus.
    published_draft: str | None = None

    @property
    def exit_code(self) -> int:
        errors = any(f.severity == Severity.ERROR for f in self.findings)
        return 1 if self.refused or errors else 0

    @property
    def serve(self) -> dict[str, list[str]]:
        """engine -> argv that serves the pair (inspect's ``serve``), for a run that passed with a
        verdict; empty otherwise (a refused or failed run, or DF408's no verdict, has no pass to serve on)."""
        no_verdict = any(f.code == "DF408" for f in self.findings)
        if self.exit_code != 0 or no_verdict or self.precheck is None:
            return {}
        return dict(self.precheck.serve)

    def headline(self) -> str:
        """tau with its interval, the outputs matched, and ``no verdict`` where the evidence is too
        little for one (DF408: a tau from a few steps or prompts says nothing)."""
        if not self.runs:
            return "nothing ran"
        o = self.overall()
        ci = o.get("tau_ci95")
        tau = f"tau {o['tau']:.2f}" + (f" (95% {ci[0]:.2f}-{ci[1]:.2f})" if ci else "") if o.get("tau") is not None else "tau -"
        same = sum(1 for r in self.runs if r.lossless.status in ("identical", "tie"))
        verdict = "no verdict (DF408: too little evidence)" if any(f.code == "DF408" for f in self.findings) else (
            "pass" if self.exit_code == 0 else "fail")
        outputs = "outputs sampled" if self.sampled else f"outputs match on {same}/{len(self.runs)}"
        return f"{verdict}, {tau}, {outputs}"

    def _figures(self) -> tuple[dict[str, Any], Evidence]:
        base = overall_figures(self.runs, self.verify_width or self.block_size or 1)
        return base, gather_evidence(self.runs, base, published_draft=self.published_draft,
                                     temperature=float(getattr(self.options, "temperature", 0.0) or 0.0))

    def evidence(self) -> Evidence:
        """tau's interval overall and per suite, the speedup's, the published figures beside them
        (``run/smoke_evidence.py``)."""
        return self._figures()[1]

    def overall(self) -> dict[str, Any]:
        """The figures over every prompt (``runtime/measure.overall_figures``) with tau's interval
        and the evidence they rest on; the speedup is None when withheld (too little evidence,
        DF406), ``speedup_withheld`` says why."""
        base, ev = self._figures()
        out = {**base, **ev.overall_json()}
        if ev.speedup.withheld is not None:
            out["speedup"] = None
        return out

    def _prompt_json(self, run: PromptRun, enough: bool) -> dict[str, Any]:
        """A prompt's JSON; its speedup is withheld, as the overall one, below the minimum of evidence."""
        doc = run.to_json(self.verify_width or self.block_size or 1)
        doc["speedup_withheld"] = None if enough or doc["speedup"] is None else TOO_LITTLE
        if not enough:
            doc["speedup"] = None
        return doc

    def to_json(self) -> dict[str, Any]:
        o = self.options
        enough = self.evidence().enough if self.runs else False
        doc = {
            "draft": self.draft_label,
            "target": self.target_label,
            "refused": self.refused,
            "precheck": [f.to_json() for f in self.precheck.findings] if self.precheck else [],
            "findings": [f.to_json() for f in self.findings],
            "settings": {
                "device": self.device,
                "backend": self.backend,
                "draft_dtype": self.draft_dtype,
                "target_dtype": self.target_dtype,
                "draft_dtype_stored": self.draft_dtype_stored,
                "target_dtype_stored": self.target_dtype_stored,
                "block_size": self.block_size,
                "layout": self.layout,
                "layout_source": self.layout_source,
                "verify_width": self.verify_width,
                "max_new_tokens": o.max_new_tokens,
                "min_acceptance": o.min_acceptance,
                "tie_tolerance": self.tie_tolerance,
                "chat_template": self.chat_template,
                "thinking": o.thinking,
                "trained_block_size": self.trained_block_size,
                "custom_prompts": o.custom_prompts,
                "stop_token_ids": self.stop_token_ids,
                "threads": self.threads,
                "static_path": self.static_path,
                "cuda_graphs": self.cuda_graphs,
                "capture_s": self.capture_s,
                **(self.loop_choice.to_json() if self.loop_choice is not None else {}),
                "prepacked_weights": self.prepacked_weights,
                "prepack_s": self.prepack_s,
                "cpu_linear": self.cpu_linear,
                "step_clock": self.step_clock,
                "timing_tokens": min(TIMING_TOKENS, o.max_new_tokens),
                "engine": o.engine,
                "sampling": self.sampling.to_json(),
                # How the outputs were judged lossless: one teacher-forced forward (greedy, DF401),
                # or, sampled, as distributions by tests/test_sampling_lossless.py.
                "lossless": "sampled" if self.sampled else "teacher-forced",
                "suite": getattr(o, "suite", None),
                "published_draft": self.published_draft,
            },
            "engine_run": self.engine_run,
            "overall": self.overall() if self.runs else None,
            "prompts": [self._prompt_json(r, enough) for r in self.runs],
            "suites": self.evidence().suites_json() if self.runs else None,
            "quantization": self.quantization,
            "serve": self.serve,
        }
        if o.engine != "reference":  # every option that went to vLLM, whether or not it started
            from dflash_ckpt.engine_runners.smoke_engine import engine_options

            doc["settings"]["engine_options"] = engine_options(o).to_json()
        return doc


__all__ = ["SmokeResult"]
