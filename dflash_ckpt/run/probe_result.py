"""probe-taps' result: what a run was asked, what it measured, and its JSON result.

Plain data over the runtime's candidates (``measure.Candidate``) and search (``probe_search``);
the run that fills it is ``run/probe.run_probe``, the verdict thresholds are
``stats.ranking.verdict``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Sequence

from dflash_ckpt.stats.ranking import verdict
from dflash_ckpt.errors import DFlashCkptError
from dflash_ckpt.result import ResultShape
from dflash_ckpt.rules import Finding, Severity
from dflash_ckpt.run.options import DEFAULT_TOP, ProbeOptions
from dflash_ckpt.runtime.measure import Candidate
from dflash_ckpt.run.probe_search import EXHAUSTIVE_MAX, SearchResult, TapSet

#: Finalists re-measured with the real loop (the best and the runner-up: the gap is between them).
CONFIRM = 2


@dataclass
class ProbeResult(ResultShape):
    command: ClassVar[str] = "probe-taps"
    draft_label: str
    target_label: str
    options: ProbeOptions
    draft_path: str = ""
    target_path: str = ""
    depth: int = 0
    k: int = 0
    configured: TapSet | None = None
    configured_problem: str | None = None
    refused: list[Finding] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    search: SearchResult | None = None
    ranked: list[Candidate] = field(default_factory=list)
    prompts: list[dict[str, Any]] = field(default_factory=list)
    draft_forwards: int = 0
    record_s: float = 0.0
    confirm_s: float = 0.0
    device: str | None = None
    draft_dtype: str | None = None
    target_dtype: str | None = None
    block_size: int | None = None
    stop_token_ids: list[int] = field(default_factory=list)
    write: dict[str, Any] | None = None
    #: Why ``--write`` wrote nothing (the run itself may have passed).
    write_error: DFlashCkptError | None = None
    backend: str | None = None
    #: How a narrow lead was measured again (``run/evidence.settle``).
    evidence: dict[str, Any] | None = None
    #: Both block layouts measured with the configured taps before the search (the probe's
    #: simulation), and with the winner after it (smoke-run's loop): ``probe_layout``.
    layout_quick: Any = None
    layout: Any = None
    #: How this CPU ran the bf16 products (``prepack.cpu_linear_path``), None off the CPU.
    cpu_linear: str | None = None

    @property
    def best(self) -> Candidate | None:
        return self.ranked[0] if self.ranked else None

    @property
    def runner_up(self) -> Candidate | None:
        return self.ranked[1] if len(self.ranked) > 1 else None

    def candidate(self, ids: Sequence[int] | None) -> Candidate | None:
        if ids is None:
            return None
        return next((c for c in self.ranked if c.target_layer_ids == tuple(ids)), None)

    @property
    def wrote_fix(self) -> bool:
        """``--write`` wrote a copy whose ids fix the one error found (DF410: the configured ids
        lose): the exit code is then the copy's verdict, 0, since what was asked for exists and works."""
        errors = {f.code for f in self.findings if f.severity == Severity.ERROR}
        return bool(self.write and self.write.get("written")) and not self.refused and errors <= {"DF410"}

    @property
    def exit_code(self) -> int:
        if self.wrote_fix:
            return 0
        if self.refused or any(f.severity == Severity.ERROR for f in self.findings):
            return 1
        return self.write_error.exit_code if self.write_error is not None else 0

    def run_error(self) -> DFlashCkptError | None:
        return self.write_error

    def confidence(self) -> dict[str, Any]:
        """Best against runner-up: the gap in tau, relative to the best, and in standard errors."""
        best, second = self.best, self.runner_up
        if best is None or second is None or best.tau is None:
            return {"gap": None, "relative_gap": None, "z": None, "verdict": "single candidate"}
        if second.tau is None:  # only bounds behind the best (a search cut short by its budget)
            return {"gap": None, "relative_gap": None, "z": None, "verdict": "unknown"}
        return {
            "gap": best.tau - second.tau,
            "relative_gap": (best.tau - second.tau) / best.tau if best.tau else None,
            "z": best.z_over(second),
            "verdict": verdict(best.z_over(second)),
        }

    def normalize_command(self) -> str | None:
        """The normalize line that writes the winner, where normalize can (no ids configured)."""
        best = self.best
        if best is None or self.configured is not None:
            return None
        ids = ",".join(str(i) for i in best.target_layer_ids)
        return f"dflash-ckpt normalize {self.draft_path or self.draft_label} OUT --target-layer-ids {ids}"

    def simulation_gap(self) -> float | None:
        """The largest difference between a finalist's simulated tau and the tau smoke-run's loop
        measured for it (None before any finalist ran).

        Why it is not always 0: the simulation replays the draft on features the target computed
        in one forward over the whole text, the loop on features from a prefill and then one verify
        of a block at a time. A kernel whose result for a row depends on how many rows share the
        call (oneDNN's packed products pick their blocking by the row count; attention and the
        element-wise kernels differ by CPU) makes the features differ in the last bf16 bit, and a
        near tie in the draft can then go the other way: the tiny pair simulates 5.30 and runs
        5.38 on an AVX-512 Xeon, and the two are equal on an AVX2-only EPYC. The ranking that
        counts is the finalists' loop tau; this gap says how far the simulation that chose them
        was off on this machine.
        """
        gaps = [abs(c.tau_probe - c.tau_loop) for c in self.ranked if c.tau_probe is not None and c.tau_loop is not None]
        return max(gaps) if gaps else None

    def to_json(self) -> dict[str, Any]:
        s, o = self.search, self.options
        conf = self.candidate(self.configured)
        return {
            "draft": self.draft_label,
            "target": self.target_label,
            "refused": bool(self.refused),
            "precheck": [f.to_json() for f in self.refused],
            "findings": [f.to_json() for f in self.findings],
            "settings": {
                "device": self.device, "backend": self.backend, "draft_dtype": self.draft_dtype, "target_dtype": self.target_dtype,
                "block_size": self.block_size, "max_new_tokens": o.max_new_tokens,
                "min_acceptance": o.min_acceptance, "chat_template": o.chat_template, "thinking": o.thinking,
                "custom_prompts": o.custom_prompts, "stop_token_ids": self.stop_token_ids,
            },
            "depth": self.depth,
            "taps": self.k,
            "configured": None if self.configured is None and self.configured_problem is None else {
                "target_layer_ids": list(self.configured) if self.configured is not None else None,
                "problem": self.configured_problem,
                "tau": conf.tau if conf else None,
                "rank": self.ranked.index(conf) + 1 if conf else None,
                "is_best": conf is not None and conf is self.best,
                "gap_to_best": self.best.tau - conf.tau if conf and self.best and conf.tau is not None else None,
                "z_to_best": self.best.z_over(conf) if conf and self.best and conf is not self.best else None,
            },
            "best": self.best.to_json() if self.best else None,
            "runner_up": self.runner_up.to_json() if self.runner_up else None,
            "confidence": self.confidence(),
            "search": None if s is None else {
                "method": s.method,
                "space": s.space,
                "exhaustive_max": EXHAUSTIVE_MAX,
                "evaluated": s.evaluated,
                "budget": o.budget,
                "budget_exhausted": s.budget_exhausted,
                "stopped_early": len(s.bounds),
                "finalists": sum(1 for c in self.ranked if c.tau_loop is not None),
                "starts": [list(x) for x in s.starts],
                "draft_forwards": self.draft_forwards,
                "record_s": self.record_s,
                "search_s": s.seconds,
                "confirm_s": self.confirm_s,
                "simulation_gap": self.simulation_gap(),
                "cpu_linear": self.cpu_linear,
            },
            "prompts": self.prompts,
            "ranked": [c.to_json() for c in self.ranked],
            "normalize_command": self.normalize_command(),
            "write": self.write,
            "evidence": self.evidence,
            "layout": None if self.layout is None else {
                **self.layout.to_json(),
                "before_search": self.layout_quick.to_json() if self.layout_quick is not None else None,
            },
        }


__all__ = ["CONFIRM", "DEFAULT_TOP", "ProbeOptions", "ProbeResult"]
