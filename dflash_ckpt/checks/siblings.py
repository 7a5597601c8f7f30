"""Checks of the sibling families' own keys (DF165-DF167) and of what users hit serving a pair
(DF168, DF315-DF317): shared/DESIGN.md section 12, vLLM 0.32.0 ``qwen3_dspark.py``,
``laguna_dflash.py``, ``lilicorr.py`` and ``config/speculative.py``.

Pure functions of the specs, like every check: the config keys, the header inventory and the
target's configs (and the largest token id its tokenizer config names).
"""

from __future__ import annotations

from typing import Any

from dflash_ckpt.checks.config import show_value
from dflash_ckpt.checks.pitfalls import special_ids
from dflash_ckpt.draftspec.siblings import DSPARK, LAGUNA, LILICORR
from dflash_ckpt.draftspec.specs import DraftSpec, TargetSpec, as_int
from dflash_ckpt.rules import Finding, finding

#: DSpark keys and the JSON type each must have: "int0" a non-negative integer, "int" positive.
DSPARK_KEY_TYPES = {"markov_rank": "int0", "markov_head_type": "str", "enable_confidence_head": "bool",
                    "use_confidence_head": "bool", "confidence_head_with_markov": "bool", "dspark_block_size": "int",
                    "dspark_noise_token_id": "int0", "dspark_draft_topk": "int", "num_anchors": "int"}


def _type_ok(value: Any, kind: str) -> bool:
    if kind == "str":
        return isinstance(value, str)
    if kind == "bool":
        return isinstance(value, bool)
    v = as_int(value)
    return v is not None and v >= (0 if kind == "int0" else 1)


_KIND_TEXT = {"int0": "a non-negative integer", "int": "a positive integer", "str": "a string", "bool": "true or false"}


def check_sibling_config(spec: DraftSpec) -> list[Finding]:
    """DF165 (a DSpark key of the wrong type), DF166 (a Laguna draft's layer_types not uniform),
    DF167 (a LiLiCorr draft: who serves it), DF168 (a declared num_speculative_tokens beyond what a
    block drafts)."""
    w = spec.where
    out: list[Finding] = []
    if spec.family == DSPARK:
        for key, kind in DSPARK_KEY_TYPES.items():
            value = spec.dspark(key)
            if value is not None and not _type_ok(value, kind):
                out.append(finding("DF165", f"key '{key}' is {show_value(value)}; it must be {_KIND_TEXT[kind]} "
                                            "(vLLM's qwen3_dspark.py builds the heads from it)", path=w, key=key))
        ids = spec.dspark("dspark_target_layer_ids")
        if ids is not None and (not isinstance(ids, list) or not ids or any(as_int(i) is None for i in ids)):
            out.append(finding("DF165", f"key 'dspark_target_layer_ids' is {show_value(ids)}; it must be a "
                                        "non-empty list of layer ids", path=w, key="dspark_target_layer_ids"))
    if spec.family == LAGUNA:
        lt = spec.layer_type_list
        if isinstance(lt, list) and len(set(map(str, lt))) > 1:
            out.append(finding("DF166", f"key 'layer_types' mixes {show_value(sorted(set(map(str, lt))))}; a Laguna "
                                        "draft's layers must all be one kind (laguna_dflash.py raises)",
                                        path=w, key="layer_types"))
    if spec.family == LILICORR:
        out.append(finding("DF167", "a LiLiCorr draft (DFlash backbone + candidate-lattice head, lilicorr_* keys): "
                                    "vLLM's models/lilicorr.py serves it on the V2 runner only; no other modelled "
                                    "engine, vLLM's V1 runner (the CPU build) and smoke-run refuse it", path=w))
    out += _speculative_tokens(spec)
    return out


def _speculative_tokens(spec: DraftSpec) -> list[Finding]:
    """DF168: K above the drafts one block holds (B-1 for 1+N, B anchor-first; ``dspark_block_size``
    for DSpark). vllm#50708: 16 on a b16 draft gave "max_num_scheduled_tokens is set to -1792"."""
    block = spec.block_size
    if block is None or block < 2:
        return []
    most = spec.block_layout.drafts_per_block(block)
    dspark_block = as_int(spec.dspark("dspark_block_size")) if spec.family == DSPARK else None
    if dspark_block is not None and dspark_block > 0:
        most = min(most, dspark_block)
    out: list[Finding] = []
    for key, value in spec.declared_k:
        k = as_int(value)
        if k is not None and k > most:
            out.append(finding("DF168", f"key '{key}' is {k}, but a block of {block} "
                                        f"({spec.block_layout.layout}) drafts at most {most}; serve it with "
                                        f"num_speculative_tokens {most}", key=key, path=spec.where))
    return out


def check_serving_limits(spec: DraftSpec, target: TargetSpec) -> list[Finding]:
    """DF315 (the draft's context below the target's), DF316 (token ids the embedding has no row
    for), DF317 (a Laguna draft_vocab_size that is not the target's vocabulary)."""
    out: list[Finding] = []
    w = spec.where
    draft_ctx = spec.max_position_embeddings
    full = target.served_context
    if draft_ctx is not None and full is not None and 0 < draft_ctx < full:
        out.append(finding("DF315", f"key 'max_position_embeddings' is {draft_ctx}, below the {full} tokens the "
                                    f"target serves; vLLM's V2 runner crashes at the first longer request (vllm#57941): "
                                    f"serve with --max-model-len {draft_ctx} (the vLLM line below does)",
                                    path=w, key="max_position_embeddings"))
    rows = as_int(target.vocab_size)
    if rows is not None and rows > 0:
        tw = target.where
        beyond = sorted({i for i, _ in special_ids(target).values() if i >= rows})
        if beyond:
            out.append(finding("DF316", f"token id(s) {show_value(beyond)} (eos/bos/pad) are not below the "
                                        f"embedding's {rows} rows (vocab_size); the first such token crashes or is "
                                        "an out-of-bounds gather (llama.cpp#28158): use the target's own configs",
                                        path=tw))
        tok = target.tokenizer_max_id
        if tok is not None and tok >= rows:
            out.append(finding("DF316", f"the tokenizer names token id {tok}, not below the embedding's {rows} "
                                        "rows (vocab_size): the first such token crashes (llama.cpp#28158 'invalid "
                                        "token'); the tokenizer and the weights are from different models", path=tw))
        dvs = spec.draft_vocab_size
        if spec.family == LAGUNA and dvs is not None and dvs != rows:
            out.append(finding("DF317", f"key 'draft_vocab_size' is {dvs}, but the target's vocabulary is {rows}; "
                                        "vLLM's laguna_dflash.py requires them equal", path=w, key="draft_vocab_size"))
        elif spec.family not in (DSPARK, LAGUNA) and dvs is not None and dvs > rows:
            out.append(finding("DF316", f"key 'draft_vocab_size' is {dvs}, above the target's {rows} embedding "
                                        "rows: draft ids past the target vocabulary map to no token",
                                        path=w, key="draft_vocab_size"))
    return out
