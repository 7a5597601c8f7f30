"""Reader models for TensorRT-LLM, z-lab's MLX port, mlx-vlm and exllamav3, and what each engine
does with DFlash2 content (``generation_problems``).

Sources, re-read for this module (late 2026):
- TensorRT-LLM ``tensorrt_llm/_torch/models/modeling_dflash.py`` at 009d8fa431bd3de92245aab80f8b57dc70da1ac4:
  ``mask_token_id`` from ``dflash_config``, else the top level, else ``vocab_size``;
  ``target_layer_ids`` from ``dflash_config`` only; ``block_size`` by ``getattr`` on the top level;
  ``dflash_config.use_swa`` with ``swa_window_size < 1`` raises; one uniform
  ``num_key_value_heads``. ``_torch/speculative/dflash.py`` (not reachable here: shared/DESIGN.md
  section 10) raises when ``max_draft_len + 1`` exceeds the trained block.
- z-lab ``dflash/model_mlx.py``: DFlash v1 drafts as ``load_draft`` at
  c2489aa8e9446ffb4f6591060b3d696305754f8e reads them (``cfg[...]`` on the top level for
  ``rope_theta``, ``max_position_embeddings``, ``block_size``, ``num_target_layers``, ``head_dim``;
  ``dflash_config`` for the taps and mask id); DFlash2 drafts as main at
  0a7587c04af47b56024ef80f44c0926e795a540b reads them (an adapter per ``architectures[0]``,
  ``block_size`` nested then top, default 16). Main dropped the v1 adapter; pin the older commit
  for v1 drafts.
- exllamav3 ``exllamav3/architecture/dflash.py``: before PR #276 as at
  001c952b71be2277e3fd8b762e72d9ef5d05f861 (``read_cfg(int, "block_size")``: top level only;
  ``dflash_config->mask_token_id`` and ``->target_layer_ids``). After it, as the newest stored
  version of that file reads them (the index gave no commit for it): ``["block_size",
  "dflash_config->block_size"]`` (top level first, then nested), mask id and taps nested first,
  then top; it also applies ``attention_sink_bias``, ``attention_value_scale`` and ``is_causal``
  (``checks.acceptance``). shared/DESIGN.md section 10 says "dflash_config only" after #276; the
  source reads both places, and the source wins.
- mlx-vlm 0.7.10 ``DFlashConfig.from_dict`` (read in its wheel, shared/DESIGN.md section 10
  corrections): a nested ``block_size`` is still ignored and missing keys are filled with
  Qwen3.5-9B's values (block 16, mask 248070, taps [1, 8, 15, 22, 29], rope_theta 1e7); its
  DFlash2 config reads ``block_size`` nested (Rapid-MLX#2195, omlx#827, omlx#2557).
- TensorRT-LLM's serve options (section 10 corrections): ``speculative_model`` (alias
  ``speculative_model_dir``) and ``max_draft_len`` at most block_size - 1 on the DFlash path.
- SGLang ``python/sglang/srt/speculative/dflash_utils.py`` ``parse_dflash_draft_config`` at
  00731f0bc9fa81c39802754fb4b62e9cce967582: ``conv_kernel_size``/``conv_group_size`` and
  ``selector_rank``/``selector_top_k`` from ``dflash_config`` only, each pair together or a
  ValueError, absent pair = feature off; ``output_multiplier``, ``final_logit_softcapping``,
  ``attention_sink_bias``, ``attention_value_scale`` from ``dflash_config`` only.
- vLLM ``vllm/model_executor/models/qwen3_dflash.py`` at 036a00d1f5d00d449d02dce9babdd15a5b4d06c9:
  top-level ``is_causal``, ``dflash_config.causal``, ``dflash_config.use_swa``/``swa_window_size``,
  ``dflash_config.attention_sink_bias``; mixed sliding/full layers raise unless
  ``VLLM_USE_V2_MODEL_RUNNER=1``. ``qwen3_dflash2.py`` (PR #52816): shared/DESIGN.md section 10.
"""

from __future__ import annotations

from typing import Any

from dflash_ckpt.checks.config import show_value
from dflash_ckpt.checks.pitfalls import runs_as_v1, target_lm_head_quantized
from dflash_ckpt.checks.reading import NESTED_ONLY, NESTED_THEN_TOP, TOP_ONLY, TOP_THEN_NESTED, Reading, Verdict
from dflash_ckpt.draftspec.specs import ABSENT, DraftSpec, TargetSpec, as_int, resolve_key

#: The block size MLX ports run when they do not find one.
MLX_DEFAULT_BLOCK = 16


def _top_required(r: Reading, keys: tuple[str, ...]) -> None:
    missing = [k for k in keys if k not in r.spec.config]
    if missing:
        r.problems.append(f"needs top-level {', '.join(missing)} (read as cfg[key])")


def _rope_theta(spec: DraftSpec) -> bool:
    params = spec.config.get("rope_parameters")
    return "rope_theta" in spec.config or (isinstance(params, dict) and "rope_theta" in params)


def tensorrt_llm(spec: DraftSpec, target: TargetSpec | None) -> Verdict:
    """TensorRT-LLM ``_torch/models/modeling_dflash.py`` at 009d8fa431bd3de92245aab80f8b57dc70da1ac4
    (module docstring); ``decoding_type: DFlash`` is 1+N, ``DSpark`` resolves ``shift_label``."""
    r = Reading(spec)
    block = r.read("block_size", TOP_ONLY)
    mask = r.read("mask_token_id", NESTED_THEN_TOP, required=False)
    if mask is None and not spec.keys["mask_token_id"].present:
        r.problems.append(f"mask_token_id is in neither place, so it falls back to vocab_size ({spec.dims.vocab_size}), "
                          "a row that is no mask: it would run and accept nothing")
    r.read("target_layer_ids", NESTED_ONLY, kind="list")
    dc = spec.dflash_config or {}
    if dc.get("use_swa"):
        window = as_int(dc.get("swa_window_size"))
        if window is None or window < 1:
            r.problems.append("dflash_config.use_swa needs a positive dflash_config.swa_window_size")
    per_layer = spec.config.get("num_key_value_heads_per_layer")
    if isinstance(per_layer, list) and len(set(map(str, per_layer))) > 1:
        r.problems.append("needs one uniform num_key_value_heads across draft layers")
    hint = f"max_draft_len at most {block - 1}" if isinstance(block, int) and block >= 2 else "max_draft_len at most block_size - 1"
    return r.verdict(f"loads as is ({hint})")


def zlab_mlx(spec: DraftSpec, target: TargetSpec | None) -> Verdict:
    """z-lab ``dflash/model_mlx.py``: v1 at c2489aa8e9446ffb4f6591060b3d696305754f8e, DFlash2 at
    0a7587c04af47b56024ef80f44c0926e795a540b (module docstring); 1+N only."""
    r = Reading(spec)
    # The shape keys every config has (hidden_size, ...) are DF142's; here, what the loader reads
    # with cfg[key] that drafts differ on.
    shapes = ("head_dim",)
    r.read("mask_token_id", NESTED_ONLY)
    r.read("target_layer_ids", NESTED_ONLY, kind="list")
    if spec.generation == "DFlash2":
        archs = spec.architectures
        if not archs or archs[0] != "DFlash2DraftModel":
            r.problems.append(f"picks its loader by architectures[0] and has none for {show_value(archs[0]) if archs else 'nothing'}")
        _top_required(r, shapes)
        if r.read("block_size", NESTED_THEN_TOP, required=False) is None and not spec.keys["block_size"].present:
            r.problems.append(f"block_size is absent, so it runs at its default {MLX_DEFAULT_BLOCK}")
        return r.verdict()
    _top_required(r, (*shapes, "rope_theta"))
    r.read("block_size", TOP_ONLY)
    r.read("num_target_layers", TOP_ONLY)
    lt = spec.config.get("layer_types")
    if isinstance(lt, list) and "sliding_attention" in lt:
        r.notes.append("its v1 loader runs every layer with full attention (sliding_window is not applied)")
    return r.verdict()


#: What mlx-vlm 0.7.10's ``DFlashConfig.from_dict`` silently fills a missing key with (Qwen3.5-9B's values).
MLX_VLM_DEFAULTS: dict[str, Any] = {"block_size": 16, "mask_token_id": 248070, "target_layer_ids": [1, 8, 15, 22, 29],
                                    "rope_theta": 10_000_000}


def mlx_vlm(spec: DraftSpec, target: TargetSpec | None) -> Verdict:
    """mlx-vlm 0.7.10 (shared/DESIGN.md section 10, read in its wheel): the mask id and taps from
    ``dflash_config``, ``block_size`` from the top level only (its DFlash2 config reads it nested),
    and every key it does not find silently filled with Qwen3.5-9B's value: the draft then runs
    with another model's mask, taps or block and accepts little, with no error."""
    r = Reading(spec)
    for key in ("mask_token_id", "target_layer_ids"):
        if r.read(key, NESTED_ONLY, required=False, kind="list" if key == "target_layer_ids" else "int") is None:
            if resolve_key(spec.config, key).nested is ABSENT:
                r.problems.append(f"{key} is not in dflash_config, so it runs with its default {MLX_VLM_DEFAULTS[key]} "
                                  "(Qwen3.5-9B's) without a word")
    rk = spec.keys["block_size"]
    order = NESTED_THEN_TOP if spec.generation == "DFlash2" else TOP_ONLY
    found = r.read("block_size", order, required=False)
    if found is None and not any(p.startswith("block_size") for p in r.problems):
        nested = as_int(rk.nested) if rk.nested is not ABSENT and order == TOP_ONLY else None
        if nested != MLX_DEFAULT_BLOCK:
            where = f"the block of {nested} in dflash_config" if nested is not None else "a draft with no block_size"
            r.problems.append(f"reads block_size only from the top level, so it runs {where} at its default "
                              f"{MLX_DEFAULT_BLOCK} (Rapid-MLX#2195)" if order == TOP_ONLY else
                              f"block_size is absent, so it runs at its default {MLX_DEFAULT_BLOCK}")
    if not _rope_theta(spec):
        r.problems.append(f"rope_theta is absent, so it runs with its default {MLX_VLM_DEFAULTS['rope_theta']:g} (omlx#2557)")
    names = spec.weights.tensors if spec.weights is not None else {}
    extra = sorted(n for n in names if "embed_tokens" in n or "lm_head" in n)
    if extra:
        r.problems.append(f"stops on {extra[0]} in the draft weights (omlx#827)")
    return r.verdict()


def vllm_aux_ids(spec: DraftSpec, ids: list[int] | None) -> list[str]:
    """vLLM 0.32.0 ``v1/worker/gpu_model_runner.py``: a top-level
    ``eagle_aux_hidden_state_layer_ids`` is used verbatim, as hidden-state indices (tap + 1); else
    the taps + 1, which an ``eagle_config`` dict in the draft config replaces by its own
    ``eagle_aux_hidden_state_layer_ids``, ``None`` when it has none. Either that is not
    ``target_layer_ids`` + 1 taps other layers than the draft was trained on."""
    expected = [i + 1 for i in ids] if ids is not None else None
    top = spec.config.get("eagle_aux_hidden_state_layer_ids")
    eagle = spec.config.get("eagle_config")
    if top:
        name, value = "eagle_aux_hidden_state_layer_ids", top
    elif isinstance(eagle, dict) and eagle:
        name, value = "eagle_config.eagle_aux_hidden_state_layer_ids", eagle.get("eagle_aux_hidden_state_layer_ids")
        if value is None:
            return ["an eagle_config dict without eagle_aux_hidden_state_layer_ids replaces the taps by none"]
    else:
        return []
    if expected is not None and value != expected:
        return [f"{name} {show_value(value)} overrides the taps (it takes hidden-state indices, "
                f"target_layer_ids + 1 = {show_value(expected)})"]
    return []


def exllamav3_legacy(spec: DraftSpec, target: TargetSpec | None) -> Verdict:
    """exllamav3 ``architecture/dflash.py`` at 001c952b71be2277e3fd8b762e72d9ef5d05f861 (before PR #276)."""
    r = Reading(spec)
    r.read("block_size", TOP_ONLY)
    r.read("mask_token_id", NESTED_ONLY)
    r.read("target_layer_ids", NESTED_ONLY, kind="list")
    return r.verdict()


def exllamav3(spec: DraftSpec, target: TargetSpec | None) -> Verdict:
    """exllamav3 ``architecture/dflash.py``, the newest stored version (after PR #276; the index
    gave no commit). Neither version reads a layout key: 1+N only."""
    r = Reading(spec)
    r.read("block_size", TOP_THEN_NESTED)
    r.read("mask_token_id", NESTED_THEN_TOP)
    r.read("target_layer_ids", NESTED_THEN_TOP, kind="list")
    return r.verdict()


#: SGLang turns the DFlash2 features on per pair of nested keys.
SGLANG_PAIRS = (("conv_kernel_size", "conv_group_size", "conv layers"), ("selector_rank", "selector_top_k", "candidate selector"))


def generation_problems(reader: str, spec: DraftSpec, target: TargetSpec | None) -> list[str]:
    """Why ``reader`` cannot run this draft's generation, beyond where it finds the DFlash keys."""
    if runs_as_v1(spec):
        return ["architectures says DFlashDraftModel over the DFlash2 keys, so it runs the draft as "
                "DFlash v1 without its conv layers and selector, and accepts almost nothing (DF152)"]
    if spec.generation != "DFlash2":
        return []
    nested = {k: resolve_key(spec.config, k).nested for pair in SGLANG_PAIRS for k in pair[:2]}
    out: list[str] = []
    if reader == "vllm":
        missing = [k for k, v in nested.items() if as_int(v) is None or v < 1]
        if missing:
            out.append(f"qwen3_dflash2.py needs all four DFlash2 keys in dflash_config; {', '.join(missing)} "
                       "missing or not a positive integer")
        g, h = as_int(nested["conv_group_size"]), spec.dims.hidden_size
        if g and g > 0 and h and h % g:
            out.append(f"conv_group_size {g} does not divide hidden_size {h}")
        if target is not None and target_lm_head_quantized(target):
            out.append("needs an unquantized target lm_head (the target's quantization_config covers it)")
    elif reader == "sglang":
        for a, b, what in SGLANG_PAIRS:
            has_a, has_b = nested[a] is not ABSENT, nested[b] is not ABSENT
            if has_a != has_b:
                out.append(f"switches the {what} on by the pair dflash_config.{a} + {b}; only "
                           f"{a if has_a else b} is there")
            elif not has_a:
                out.append(f"would run without the {what} (dflash_config.{a} and {b} are absent)")
    return out
