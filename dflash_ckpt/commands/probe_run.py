"""``probe-taps``: recover (or check) a draft's tap layers by measuring acceptance.

Steps: resolve both folders; read the draft's config and weight headers; take ``k`` from
``fc.weight [H, k*H]`` and the depth from the target; give the draft a valid tap set in memory
(the user's files are never edited) so inspect's checks and the runtime accept it; refuse what the
checks or the runtime refuse, as ``smoke-run`` does; load both models; record each prompt once
(``runtime.probe.record``); let ``probe_search`` choose the candidates, each measured by
``runtime.probe.simulate`` (draft calls only); re-measure the finalists (the best ones and the
configured ids) with ``generate.dflash_decode``, the loop ``smoke-run`` measures with, so the
reported tau of the winner is smoke-run's tau; judge; optionally write a normalized copy.

Verdict (exit code): 0 when the best tap set reaches ``--min-acceptance`` and the configured ids
(if any) are the best; 1 when the configured ids measure worse than another set (DF410) or no set
reaches ``--min-acceptance`` (DF411), or the pair fails inspect's checks; 2 for usage errors.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from dflash_ckpt.checks import run_checks
from dflash_ckpt.commands.json_out import SCHEMA_VERSION
from dflash_ckpt.commands.normalize_run import fc_taps
from dflash_ckpt.commands.probe_evidence import Session, candidate_bar, refuse_unclear_write, settle, unclear_findings
from dflash_ckpt.commands.probe_search import EXHAUSTIVE_MAX, KEEP_EXACT, Measured, SearchResult, TapSet, search_taps, valid
from dflash_ckpt.commands.smoke_advice import check_positions
from dflash_ckpt.commands.run_setup import RunOptions, encode_prompts, resolve_dtypes, resolve_folders, set_threads
from dflash_ckpt.errors import CheckFailed, InputError, UsageError
from dflash_ckpt.rules import Finding, Severity, finding
from dflash_ckpt.runtime.args import DraftArgs, TargetArgs, ensure_supported
from dflash_ckpt.runtime.generate import dflash_decode
from dflash_ckpt.runtime.static import StaticRunner, supports_static
from dflash_ckpt.runtime.loading import dtype_name, load_draft, load_target
from dflash_ckpt.runtime.probe import measure, reading_taps, record
from dflash_ckpt.sources.local import LocalSource
from dflash_ckpt.sources.prompts import stop_token_ids
from dflash_ckpt.spec.resolve import DraftSpec, TargetSpec, build_spec, read_config
from dflash_ckpt.spec.resolve import load_draft as read_draft
from dflash_ckpt.spec.resolve import load_target as read_target

#: Finalists re-measured with the real loop (the best and the runner-up: the gap is between them).
CONFIRM = 2
#: How sure the ranking is: the gap between two taus in standard errors of their difference
#: (each tau is a mean over steps). At least ``CLEAR_Z`` is called clear, at least ``LIKELY_Z``
#: likely, below that narrow. Neighbouring layers carry similar features, so a set one layer
#: off the trained one can come close; on the tiny pair in fp32 with 64 tokens the trained
#: [1, 3, 5] trails [2, 3, 5] by 0.2 (z about 0.5), while the shifted twin's ids trail by 4
#: (z above 10). DF410 needs the configured ids to lose by at least ``LIKELY_Z``.
CLEAR_Z = 2.0
LIKELY_Z = 1.0
DEFAULT_TOP = 5


@dataclass
class ProbeOptions(RunOptions):
    """``RunOptions`` and probe-taps' own."""

    budget: int | None = None
    top: int = DEFAULT_TOP
    write: Path | None = None
    force: bool = False

    def validate_own(self) -> None:
        if self.budget is not None and self.budget < 1:
            raise UsageError(f"--budget {self.budget}: must be at least 1 candidate")
        if self.top < 1:
            raise UsageError(f"--top {self.top}: must be at least 1")


@dataclass
class Candidate:
    """One tap set: tau as the probe simulated it and, for finalists, as the real loop measured it;
    or, for a candidate given up once it was sure to lose, a bound its tau stays below."""

    target_layer_ids: TapSet
    tau_probe: float | None
    tau_loop: float | None = None
    tau_below: float | None = None
    #: Acceptance lengths behind ``tau`` (the loop's for finalists), for the standard error.
    lengths: list[int] = field(default_factory=list, repr=False)

    @property
    def tau(self) -> float | None:
        return self.tau_loop if self.tau_loop is not None else self.tau_probe

    @property
    def sort_key(self) -> tuple[int, float]:
        """Exact taus first, best first; then bounds, highest first."""
        return (0, -self.tau) if self.tau is not None else (1, -(self.tau_below or 0.0))

    @property
    def stderr(self) -> float | None:
        """Standard error of ``tau`` as a mean of per-step acceptance lengths."""
        n = len(self.lengths)
        if n < 2:
            return None
        mean = sum(self.lengths) / n
        var = sum((x - mean) ** 2 for x in self.lengths) / (n - 1)
        return (var / n) ** 0.5

    def z_over(self, other: Candidate) -> float | None:
        """How many standard errors of the difference ``self`` leads ``other`` by."""
        a, b = self.stderr, other.stderr
        if a is None or b is None:
            return None
        se = (a * a + b * b) ** 0.5
        if self.tau is None or other.tau is None:
            return None
        gap = self.tau - other.tau
        return gap / se if se > 0 else (float("inf") if gap > 0 else 0.0)

    def to_json(self) -> dict[str, Any]:
        return {
            "target_layer_ids": list(self.target_layer_ids),
            "tau": self.tau,
            "tau_probe": self.tau_probe,
            "tau_loop": self.tau_loop,
            "tau_below": self.tau_below,
            "measured_by": "loop" if self.tau_loop is not None else "probe" if self.tau_probe is not None else "stopped early",
            "steps": len(self.lengths),
            "stderr": self.stderr,
        }


@dataclass
class ProbeResult:
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
    #: How a narrow lead was measured again (``probe_evidence.settle``).
    evidence: dict[str, Any] | None = None

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
    def exit_code(self) -> int:
        return 1 if self.refused or any(f.severity == Severity.ERROR for f in self.findings) else 0

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

    def to_json(self) -> dict[str, Any]:
        s, o = self.search, self.options
        conf = self.candidate(self.configured)
        return {
            "schema_version": SCHEMA_VERSION,
            "command": "probe-taps",
            "ok": self.exit_code == 0,
            "exit_code": self.exit_code,
            "draft": self.draft_label,
            "target": self.target_label,
            "refused": bool(self.refused),
            "precheck": [f.to_json() for f in self.refused],
            "findings": [f.to_json() for f in self.findings],
            "settings": {
                "device": self.device, "draft_dtype": self.draft_dtype, "target_dtype": self.target_dtype,
                "block_size": self.block_size, "max_new_tokens": o.max_new_tokens,
                "min_acceptance": o.min_acceptance, "chat_template": o.chat_template, "thinking": o.thinking,
                "custom_prompts": bool(o.prompts or o.prompts_file), "stop_token_ids": self.stop_token_ids,
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
            },
            "prompts": self.prompts,
            "ranked": [c.to_json() for c in self.ranked],
            "normalize_command": self.normalize_command(),
            "write": self.write,
            "evidence": self.evidence,
        }


# -- the draft with tap layers given in memory -------------------------------------------------


def with_layer_ids(spec: DraftSpec, ids: Sequence[int]) -> DraftSpec:
    """``spec`` as if its config held ``ids``: a copy of the parsed config, never the file.

    The ids go where engines read them first (``dflash_config``, or the top level of a config
    without one), and a second copy that would conflict is dropped, so ``DraftArgs.from_spec``
    and inspect's checks can run on a draft whose config lost (or got wrong) its ids.
    """
    cfg = copy.deepcopy(spec.config)
    nested = cfg.get("dflash_config")
    if isinstance(nested, dict):
        nested["target_layer_ids"] = list(ids)
        cfg.pop("target_layer_ids", None)
    else:
        cfg["target_layer_ids"] = list(ids)
    return build_spec(cfg, label=spec.label, where=spec.where, weights=spec.weights)


def configured_problem(ids: Sequence[int] | None, k: int, depth: int) -> str | None:
    """Why the configured ids cannot be a candidate (``None``: they can, or there are none)."""
    if ids is None:
        return None
    if len(ids) != k:
        return f"{len(ids)} ids but fc.weight reads {k} taps"
    if not valid(ids, depth):
        return f"not strictly increasing layers in 0..{depth - 1}"
    return None


# -- the run -----------------------------------------------------------------------------------


def run_probe(opts: ProbeOptions, log: Callable[[str], None] | None = None, progress: Any = None) -> ProbeResult:
    """Everything ``probe-taps`` does short of printing (and of ``--write``, see ``write_copy``)."""
    opts.validate()
    say = log or (lambda _msg: None)
    draft_dir, draft_label, target_dir, target_label = resolve_folders(opts)
    result = ProbeResult(draft_label, target_label, opts, draft_path=str(draft_dir), target_path=str(target_dir))

    spec0 = read_draft(LocalSource(Path(draft_dir), label=draft_label))
    tspec: TargetSpec = read_target(LocalSource(Path(target_dir), label=target_label))
    assert spec0.weights is not None
    k = fc_taps(spec0.weights, spec0.dims.hidden_size)
    if k is None:
        raise InputError(
            f"{draft_dir}: no fc.weight of shape [hidden_size, k * hidden_size] in the safetensors files, so the "
            "number of tap layers is unknown; probe-taps needs the draft's trained fc", code="DF210")
    target_config = read_config(LocalSource(Path(target_dir), label=target_label))[0]
    target_args = TargetArgs.from_config(target_config, tspec.where)
    depth = target_args.dims.num_layers
    if k > depth:
        raise UsageError(f"{draft_dir}: fc.weight reads {k} taps but the target {target_label} has only {depth} layers")
    result.depth, result.k = depth, k
    result.configured = tuple(spec0.target_layer_ids) if spec0.target_layer_ids is not None else None
    result.configured_problem = configured_problem(result.configured, k, depth)
    configured = result.configured if result.configured_problem is None else None
    spec = with_layer_ids(spec0, configured or tuple(range(k)))

    ensure_supported(spec, target_config, tspec.where)
    errors = [f for f in run_checks(spec, tspec) if f.severity == Severity.ERROR]
    if errors:
        result.refused = errors
        return result
    draft_args = DraftArgs.from_spec(spec)

    prompts, encoder, encoded = encode_prompts(opts, target_dir)
    block = opts.block_size or draft_args.block_size
    check_positions(prompts, encoded, opts.max_new_tokens, block, target_args.rope.max_position_embeddings, tspec.where)
    stops = [] if opts.ignore_eos else stop_token_ids(Path(target_dir), target_config, encoder.eos_token_id)

    device, draft_dtype, target_dtype, target_inv = resolve_dtypes(opts, target_dir, target_label, target_args.dtype)
    result.device, result.block_size, result.stop_token_ids = str(device), block, stops
    result.draft_dtype, result.target_dtype = dtype_name(draft_dtype), dtype_name(target_dtype)

    say(f"loading target {target_label} ({depth} layers, {result.target_dtype}) and draft {draft_label} "
        f"({k} taps, {result.draft_dtype}) on {device}")
    set_threads(None, device)  # smoke-run's default, so the finalists' figures are smoke-run's
    target = load_target(Path(target_dir), target_args, dtype=target_dtype, device=device, label=target_label, inv=target_inv)
    draft = load_draft(Path(draft_dir), draft_args, dtype=draft_dtype, device=device, label=draft_label)
    capacity = max(len(ids) for ids in encoded) + opts.max_new_tokens + block + 1
    tcache, dcache = target.new_cache(capacity), draft.new_cache(capacity)

    t0 = time.perf_counter()
    recs = [record(target, ids, depth=depth, max_new_tokens=opts.max_new_tokens, stop_ids=stops, cache=tcache)
            for ids in encoded]
    result.record_s = time.perf_counter() - t0
    for p, rec in zip(prompts, recs):
        if rec.overflow:
            raise UsageError(f"prompt {p.name!r}: the target's {rec.overflow} hold inf/NaN in {result.target_dtype}; "
                             "run the target in bfloat16 (--target-dtype bfloat16)")
    if all(len(r.tokens) < 2 for r in recs):
        raise UsageError("the target stops after one token on every prompt, so no draft is ever verified; "
                         "give longer prompts, or --ignore-eos")

    embed_w, head_w = target.embed_tokens.weight, target.lm_head.weight

    probed: dict[TapSet, list[int]] = {}

    def evaluate(ids: TapSet, floor: float | None) -> float | Measured:
        m = measure(draft, recs, ids, floor=floor, embed_w=embed_w, head_w=head_w, draft_cache=dcache,
                    block_size=block, stop_ids=stops)
        result.draft_forwards += m.draft_forwards
        bar()
        if m.exact:
            probed[ids] = m.acceptance_lengths
        return Measured(m.tau, m.exact)

    say(f"measuring tap sets: {k} of {depth} layers")
    bar = candidate_bar(progress, depth, k, opts.budget)
    search = search_taps(depth, k, evaluate, configured=configured, budget=opts.budget, keep=max(KEEP_EXACT, opts.top))
    result.search = search
    ranked = [Candidate(ids, tau, lengths=probed.get(ids, [])) for ids, tau in search.ranked()]
    ranked += [Candidate(ids, None, tau_below=bound) for ids, bound in search.ranked_bounds()]

    # The finalists, and the configured ids, through the loop smoke-run measures with.
    t1 = time.perf_counter()
    finalists = ranked[:CONFIRM] + [c for c in ranked[CONFIRM:] if configured is not None and c.target_layer_ids == configured]
    finalists = [c for c in finalists if c.tau_probe is not None]
    for cand in finalists:
        lengths = []
        with reading_taps(draft, cand.target_layer_ids):
            # smoke-run's own path: the static loop where it runs the pair (its runner fixes the taps).
            runner = StaticRunner(target, draft, capacity, block_size=block) if supports_static(target, draft) else None
            for ids in encoded:
                gen = dflash_decode(target, draft, ids, max_new_tokens=opts.max_new_tokens, stop_ids=stops,
                                    target_cache=tcache, draft_cache=dcache, block_size=block, runner=runner)
                lengths += gen.acceptance_lengths
        cand.tau_loop = sum(lengths) / len(lengths) if lengths else 1.0
        cand.lengths = lengths
    result.confirm_s = time.perf_counter() - t1
    result.ranked = sorted(ranked, key=lambda c: c.sort_key)  # stable: ties keep the order measured
    result.prompts = [
        {**p.to_json(), "input_ids": ids, "continuation_ids": rec.tokens, "stopped": rec.stopped}
        for p, ids, rec in zip(prompts, encoded, recs)
    ]
    result.evidence = settle(result, Session(
        draft, target, prompts, encoder, encoded, opts.max_new_tokens, stops, block, depth, target_args.rope.max_position_embeddings,
        tspec.where, CONFIRM, configured, bool(opts.prompts or opts.prompts_file)), say)
    result.findings = judge(result) + unclear_findings(result)
    return result


def verdict(z: float | None) -> str:
    if z is None:
        return "unknown"
    return "clear" if z >= CLEAR_Z else "likely" if z >= LIKELY_Z else "narrow"


def judge(result: ProbeResult) -> list[Finding]:
    """DF410 when the configured ids are not the best measured; DF411 when nothing works."""
    out: list[Finding] = []
    best = result.best
    if best is None:
        return out
    ids = list(best.target_layer_ids)
    mina = result.options.min_acceptance
    if best.tau < mina:
        out.append(finding(
            "DF411",
            f"no tap set measured reaches tau {mina:g}: the best, {ids}, reaches {best.tau:.2f} over "
            f"{result.search.evaluated if result.search else 0} candidates; the draft may not belong to this "
            "target, or the prompt format may differ from training (rerun without -p/--prompts and "
            "--no-chat-template), or a search needs a larger --budget",
        ))
    if result.configured is not None:
        conf = result.candidate(result.configured)
        shown = list(result.configured)
        if result.configured_problem is not None:
            out.append(finding("DF410", f"{result.draft_path}/config.json: target_layer_ids {shown} cannot be "
                                        f"right ({result.configured_problem}); the best measured tap set is {ids} "
                                        f"at tau {best.tau:.2f}"))
        elif conf is not None and conf is not best and (best.z_over(conf) or 0.0) >= LIKELY_Z:
            out.append(finding(
                "DF410",
                f"{result.draft_path}/config.json: target_layer_ids {shown} reach tau {conf.tau:.2f} but {ids} reach "
                f"{best.tau:.2f} ({best.z_over(conf):.1f} standard errors apart); the configured tap layers are "
                "probably not the ones this draft was trained on; check the model card, then write the measured ones",
            ))
    return out


# -- --write -----------------------------------------------------------------------------------


def write_copy(result: ProbeResult, *, quiet: bool) -> dict[str, Any]:
    """A normalized copy of the draft in ``--write OUT`` with the winner's ids (the normalize run)."""
    # normalize's run without its printing: the outcome lands in probe-taps' own report and JSON.
    from dflash_ckpt.commands.normalize_run import Outcome, Request
    from dflash_ckpt.commands.normalize_run import _run as normalize_into
    from dflash_ckpt.normalize.plan import Overrides

    opts = result.options
    best = result.best
    assert opts.write is not None and best is not None
    if best.tau < opts.min_acceptance:
        raise UsageError(f"--write {opts.write}: nothing written, no tap set reaches tau {opts.min_acceptance:g} "
                         f"(best {list(best.target_layer_ids)} at {best.tau:.2f})")
    refuse_unclear_write(result)
    replace: tuple[tuple[str, str], ...] = ()
    if result.configured is not None and result.configured != best.target_layer_ids:
        if not any(f.code == "DF410" for f in result.findings):
            raise CheckFailed(
                f"--write {opts.write}: nothing written; the configured target_layer_ids {list(result.configured)} "
                f"trail {list(best.target_layer_ids)} only within measurement noise, so they stay; more prompts "
                "(--prompts) or tokens (-n) separate the two")
        # normalize supplies only missing keys; a measured winner may replace the configured ids.
        replace = (("target_layer_ids", f"measured by probe-taps (tau {best.tau:.2f})"),)
    req = Request(
        draft=result.draft_path, out=opts.write.expanduser(), in_place=False, backup=True, check=False,
        dry_run=False, force=opts.force, copy=False, prefer=None, mirrors=True,
        overrides=Overrides(target_layer_ids=list(best.target_layer_ids), replace=replace), target=result.target_path or None, revision=None,
        token=opts.token, json_out=True, quiet=quiet,
    )
    oc = Outcome(req=req, label=req.draft)
    normalize_into(req, oc)
    return oc.to_json()


__all__ = ["ProbeOptions", "ProbeResult", "Candidate", "run_probe", "write_copy", "with_layer_ids"]
