"""``probe-taps``: recover (or check) a draft's tap layers by measuring acceptance.

Steps: resolve both folders; read the draft's config and weight headers; take ``k`` from
``fc.weight [H, k*H]`` and the depth from the target; give the draft a valid tap set in memory
(the user's files are never edited) so inspect's checks and the runtime accept it; refuse what the
checks or the runtime refuse, as ``smoke-run`` does; load both models; record each prompt once
(``runtime.probe.record``); let ``probe_search`` choose the candidates, each measured by
``runtime.probe.measure`` (draft calls only); re-measure the finalists (the best ones and the
configured ids) with ``loops.make_loop``'s DFlash loop, the loop ``smoke-run`` measures with, so the
reported tau of the winner is smoke-run's tau; run the winner in both block layouts
(``runtime.probe_layout``: before the search too, with the configured taps, so that a draft whose
layout key is lost is searched in its own layout); judge; optionally write a normalized copy.
The pair is planned as smoke-run plans it (``runtime/plan.py``), on the backend ``--backend`` picks.

``run_probe_taps`` is the command's work from its options (``run/options.ProbeOptions``): no
printing, no ``sys.exit``; it raises ``DFlashCkptError`` for one-line errors and returns a
``ProbeResult`` (``run/probe_result.py``). The pair is opened as smoke-run opens it (``run/pair.py``);
a narrow lead is measured again in ``run/evidence.py``.

Verdict (exit code): 0 when the best tap set reaches ``--min-acceptance`` and the configured ids
(if any) are the best; 1 when the configured ids measure worse than another set (DF410) or no set
reaches ``--min-acceptance`` (DF411), the other block layout measures better (DF416) or leads
only within noise (DF417), or the pair fails inspect's checks, or it is degenerate (a weight matrix
reads back as one value, DF413; the target's logits tie everywhere, DF414; every continuation is
one token, DF415: then any tap set would "work", so none is ranked); 2 for usage errors. With
``--write``, a copy written with the winner that works turns a DF410 into exit 0: the exit code is
the verdict of what was written (``ProbeResult.wrote_fix``); DRAFT itself is never edited.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Sequence

from dflash_ckpt.checks import run_checks
from dflash_ckpt.checks.degenerate import TieRows, repeated_token_findings, tied_logit_findings
from dflash_ckpt.checks.layout_findings import layout_findings, searched_layout
from dflash_ckpt.checks.run_findings import probe_findings, unclear_findings
from dflash_ckpt.draftspec.specs import DraftSpec, TargetSpec, as_int, fc_taps, with_layer_ids
from dflash_ckpt.errors import DFlashCkptError, InputError, UsageError
from dflash_ckpt.canonical.measured import write_copy
from dflash_ckpt.result import error_json
from dflash_ckpt.rules import Finding, Severity
from dflash_ckpt.run.evidence import Session, candidate_bar, settle
from dflash_ckpt.run.options import ProbeOptions
from dflash_ckpt.run.pair import OpenPair, PairFolders, Prepare, Refused, open_pair, resolve_pair
from dflash_ckpt.run.probe_result import CONFIRM, ProbeResult
from dflash_ckpt.runtime.loading import dtype_name
from dflash_ckpt.runtime.prepack import cpu_linear_path, prepack_pair, slow_path_note
from dflash_ckpt.runtime.device_errors import DeviceFailures
from dflash_ckpt.runtime.loops import make_loop
from dflash_ckpt.runtime.measure import Candidate
from dflash_ckpt.runtime.probe import measure, reading_taps, record
from dflash_ckpt.runtime.probe_layout import loop_layouts, simulate_layouts
from dflash_ckpt.run.probe_search import KEEP_EXACT, Measured, TapSet, configured_problem, search_taps


def run_probe_taps(opts: ProbeOptions, *, log: Callable[[str], None] | None = None, copy_progress: bool = False,
                   progress: Any = None) -> ProbeResult:
    """Everything ``probe-taps`` does short of printing. With ``--write``, a normalized copy with
    the winner is written when the run found one; why it was not lands in ``write_error`` (and the
    exit code). ``copy_progress``: a bar on stderr while weights are copied; ``progress``: a rich
    ``Progress`` for a bar over the candidates; ``log``: where the loading lines go."""
    with DeviceFailures(None, where=str(opts.target)):  # a CUDA failure: one coded line (exit 2)
        res = run_probe(opts, log=log, progress=progress)
    if opts.write is not None and not res.refused and res.best is not None:
        try:
            res.write = write_copy(res, quiet=not copy_progress)
        except DFlashCkptError as err:
            res.write_error = err
            res.write = {"written": False, "error": error_json(err)}
    return res


def run_probe(opts: ProbeOptions, log: Callable[[str], None] | None = None, progress: Any = None) -> ProbeResult:
    """The measurement: the pair checked and opened, the taps searched and judged (no ``--write``)."""
    opts.validate()
    say = log or (lambda _msg: None)
    folders = resolve_pair(opts)
    result = ProbeResult(folders.draft_label, folders.target_label, opts, draft_path=str(folders.draft_dir),
                         target_path=str(folders.target_dir))
    pair = open_probed(opts, folders, result)
    if pair is None:
        return result
    plan, configured = pair.plan, result.configured if result.configured_problem is None else None
    result.device, result.block_size, result.stop_token_ids = str(plan.device), plan.block_size, pair.stops
    result.backend = plan.backend
    result.draft_dtype, result.target_dtype = dtype_name(plan.draft_dtype), dtype_name(plan.target_dtype)
    target, draft = load_probed(pair, result, say)
    tcache = target.new_cache(plan.capacity)
    recs = record_prompts(opts, pair, result, target, tcache)
    result.findings = recording_findings(target, pair.prompts, recs, tcache, folders.target_label)  # DF414, DF415
    if result.findings:
        return result  # every tap set would "work" on a degenerate target: nothing to rank
    dcache = draft.new_cache(plan.capacity)
    declared = plan.draft_args.block_layout
    if configured is not None:
        # The layout first, with the configured taps: a draft whose layout key is lost or wrong is
        # searched (and its finalists run) in the layout it measures best in, when that is clear.
        quick = simulate_layouts(draft, recs, configured, declared, embed_w=target.embed_tokens.weight,
                                 head_w=target.lm_head.weight, draft_cache=dcache, block_size=plan.block_size,
                                 stop_ids=pair.stops)
        result.layout_quick = quick
        draft.args = searched_layout(draft.args, quick)
        say("block layout with the configured taps: " + ", ".join(f"{n} tau {c.tau:.2f}" for n, c in quick.by_layout.items()))
    ranked = search(opts, pair, result, target, draft, recs, dcache, configured, say, progress)
    confirm_finalists(opts, pair, result, target, draft, ranked, configured)
    result.ranked = sorted(ranked, key=lambda c: c.sort_key)  # stable: ties keep the order measured
    result.evidence = settle(result, Session(
        draft, target, pair.prompts, pair.encoder, pair.encoded, opts.max_new_tokens, pair.stops, plan.blocks,
        result.depth, plan.target.max_position_embeddings, pair.target.where, CONFIRM, configured,
        opts.custom_prompts), say)
    if result.best is not None:  # on the evidence the winner was judged on (the last round's prompts and -n)
        t2 = time.perf_counter()
        last = [p["input_ids"] for p in result.prompts]
        n = result.evidence.get("max_new_tokens", opts.max_new_tokens)
        result.layout = loop_layouts(draft, target, last, result.best.target_layer_ids, declared,
                                     capacity=plan.blocks.capacity(last, n, any_layout=True),
                                     block_size=plan.block_size, max_new_tokens=n, stop_ids=pair.stops)
        result.confirm_s += time.perf_counter() - t2
    result.findings = probe_findings(result) + unclear_findings(result) + layout_findings(result)
    return result


def open_probed(opts: ProbeOptions, folders: PairFolders, result: ProbeResult) -> OpenPair | None:
    """The pair opened as every run opens it (``run/pair.open_pair``), with probe-taps' step on
    the draft (``tap_set``) and inspect's checks on the draft as it is probed; ``None`` when
    they refused it (``result.refused``)."""
    pair = open_pair(opts, folders, prepare=tap_set(result), check=_errors, prepacks=True)  # load_probed packs
    if isinstance(pair, Refused):
        result.refused = pair.findings
        return None
    if pair.plan.target.num_layers != result.depth:
        raise UsageError(f"probe-taps taps every decoder layer, but the {pair.plan.backend} backend "
                         f"reads {pair.plan.target.num_layers} layers where num_hidden_layers says {result.depth}; "
                         "use --backend native where it runs the target", path=pair.target.where)
    return pair


def tap_set(result: ProbeResult) -> Prepare:
    """probe-taps' step on the draft: ``k`` taken from its ``fc.weight`` and the depth from the
    target (checked by ``require_target_config`` before), and the draft given a valid tap set in
    memory (``result.configured``: the ids it declares, and why they do not do)."""
    def prepare(draft: DraftSpec, target: TargetSpec) -> DraftSpec:
        assert draft.weights is not None
        k = fc_taps(draft.weights, draft.dims.hidden_size)
        if k is None:
            raise InputError(
                "no fc.weight of shape [hidden_size, k * hidden_size] in the safetensors files, so the number "
                "of tap layers is unknown; probe-taps needs the draft's trained fc", code="DF210", path=result.draft_path)
        depth = as_int(target.num_hidden_layers)
        assert depth is not None and depth >= 1  # require_target_config refused anything else
        if k > depth:
            raise UsageError(f"fc.weight reads {k} taps but the target {target.label} has only {depth} layers",
                             path=result.draft_path)
        result.depth, result.k = depth, k
        result.configured = tuple(draft.target_layer_ids) if draft.target_layer_ids is not None else None
        result.configured_problem = configured_problem(result.configured, k, depth)
        configured = result.configured if result.configured_problem is None else None
        return with_layer_ids(draft, configured or tuple(range(k)))
    return prepare


def _errors(draft: DraftSpec, target: TargetSpec) -> list[Finding]:
    """probe-taps' checks: the errors of inspect's checks on the draft with its probed tap set."""
    return [f for f in run_checks(draft, target) if f.severity == Severity.ERROR]


def load_probed(pair: OpenPair, result: ProbeResult, say: Callable[[str], None]) -> tuple[Any, Any]:
    """Both models loaded as smoke-run loads them (its default threads, and on a CPU its packed
    weights or the AVX2 kernel), so the finalists' figures are smoke-run's."""
    target, draft, _ = pair.load(None, say, f"{result.depth} layers", f"{result.k} taps, ")
    if pair.plan.device.type == "cpu":
        prepack_pair(target, draft)
        result.cpu_linear = cpu_linear_path(target, draft)
        if note := slow_path_note(target, draft):
            say(note)
    return target, draft


def record_prompts(opts: ProbeOptions, pair: OpenPair, result: ProbeResult, target: Any, tcache: Any) -> list[Any]:
    """The target's continuation of every prompt, recorded once with every layer's features
    (``runtime.probe.record``) into ``result.prompts``; refused (exit 2) when the target
    overflows its dtype or stops at once on every prompt."""
    t0 = time.perf_counter()
    recs = [record(target, ids, depth=result.depth, max_new_tokens=opts.max_new_tokens, stop_ids=pair.stops,
                   cache=tcache) for ids in pair.encoded]
    result.record_s = time.perf_counter() - t0
    for p, rec in zip(pair.prompts, recs):
        if rec.overflow:
            raise UsageError(f"prompt {p.name!r}: the target's {rec.overflow} hold inf/NaN in {result.target_dtype}; "
                             "run the target in bfloat16 (--target-dtype bfloat16)")
    if all(len(r.tokens) < 2 for r in recs):
        raise UsageError("the target stops after one token on every prompt, so no draft is ever verified; "
                         "give longer prompts, or --ignore-eos")
    result.prompts = [
        {**p.to_json(), "input_ids": ids, "continuation_ids": rec.tokens, "stopped": rec.stopped}
        for p, ids, rec in zip(pair.prompts, pair.encoded, recs)
    ]
    return recs


def search(opts: ProbeOptions, pair: OpenPair, result: ProbeResult, target: Any, draft: Any, recs: list[Any],
           dcache: Any, configured: TapSet | None, say: Callable[[str], None], progress: Any) -> list[Candidate]:
    """The tap sets ``probe_search`` chooses, each measured on the recordings by draft calls only
    (``runtime.probe.measure``); ranked, the exact ones first."""
    probed: dict[TapSet, list[int]] = {}
    embed_w, head_w = target.embed_tokens.weight, target.lm_head.weight

    def evaluate(ids: TapSet, floor: float | None) -> float | Measured:
        m = measure(draft, recs, ids, floor=floor, embed_w=embed_w, head_w=head_w, draft_cache=dcache,
                    block_size=pair.plan.block_size, stop_ids=pair.stops)
        result.draft_forwards += m.draft_forwards
        bar()
        if m.exact:
            probed[ids] = m.acceptance_lengths
        return Measured(m.tau, m.exact)

    depth, k = result.depth, result.k
    say(f"measuring tap sets: {k} of {depth} layers")
    bar = candidate_bar(progress, depth, k, opts.budget)
    result.search = search_taps(depth, k, evaluate, configured=configured, budget=opts.budget,
                                keep=max(KEEP_EXACT, opts.top))
    ranked = [Candidate(ids, tau, lengths=probed.get(ids, [])) for ids, tau in result.search.ranked()]
    return ranked + [Candidate(ids, None, tau_below=bound) for ids, bound in result.search.ranked_bounds()]


def confirm_finalists(opts: ProbeOptions, pair: OpenPair, result: ProbeResult, target: Any, draft: Any,
                      ranked: list[Candidate], configured: TapSet | None) -> None:
    """The finalists, and the configured ids, through the loop smoke-run measures with (the static
    one where it runs the pair: it fixes the taps when made), so the winner's tau is smoke-run's."""
    t1 = time.perf_counter()
    finalists = ranked[:CONFIRM] + [c for c in ranked[CONFIRM:] if configured is not None and c.target_layer_ids == configured]
    for cand in (c for c in finalists if c.tau_probe is not None):
        lengths = []
        with reading_taps(draft, cand.target_layer_ids):
            loop = make_loop(target, draft, pair.plan.capacity, block_size=pair.plan.block_size)
            for ids in pair.encoded:
                lengths += loop.dflash(ids, max_new_tokens=opts.max_new_tokens, stop_ids=pair.stops).acceptance_lengths
        cand.tau_loop = sum(lengths) / len(lengths) if lengths else 1.0
        cand.lengths = lengths
    result.confirm_s = time.perf_counter() - t1


def recording_findings(target: Any, prompts: Sequence[Any], recs: Sequence[Any], cache: Any, label: str) -> list[Finding]:
    """DF414 (the target's logits tie at every position of a prompt's continuation, from one
    teacher-forced forward per prompt) and DF415 (every continuation is one token repeated)."""
    from dflash_ckpt.runtime.generate import teacher_forced_logits
    from dflash_ckpt.runtime.judge import tie_counts

    rows = [TieRows(p.name, len(rec.tokens), *tie_counts(teacher_forced_logits(target, rec.prompt_ids, rec.tokens, cache=cache)))
            for p, rec in zip(prompts, recs) if rec.tokens]
    return tied_logit_findings(rows, label) + repeated_token_findings([r.tokens for r in recs], "target", label)


__all__ = ["CONFIRM", "Candidate", "ProbeOptions", "ProbeResult", "run_probe", "run_probe_taps", "write_copy"]
