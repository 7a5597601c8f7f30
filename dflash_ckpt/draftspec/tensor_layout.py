"""The tensor names and shapes a DFlash draft config implies (docs/DESIGN.md section 1).

Shared by the header checks and by the reference runtime's loader, so that both agree on what a
draft is. A shape is ``None`` where the config key it depends on is missing or invalid.
"""

from __future__ import annotations

from typing import Iterable

from dflash_ckpt.draftspec.siblings import DSPARK, LAGUNA, confidence_head, dspark_value, markov_rank
from dflash_ckpt.draftspec.specs import DraftSpec
from dflash_ckpt.draftspec.values import KEY_BOUNDS, as_int

Shape = tuple[int, ...] | None

#: Prefix of the DFlash2-only tensors, to tell the generations apart from names alone.
DFLASH2_MARKERS = ("attention_conv.", "mlp_conv.", "candidate_selector.")


def _shape(*dims: int | None) -> Shape:
    return None if any(d is None for d in dims) else tuple(dims)  # type: ignore[arg-type]


def _mul(a: int | None, b: int | None) -> int | None:
    return None if a is None or b is None else a * b


def _extra(spec: DraftSpec, key: str) -> int | None:
    """A DFlash2 size key, when it is a positive integer within ``KEY_BOUNDS`` (else DF146 or DF145 reports it, and the
    shapes it fixes are not checked)."""
    v = as_int(spec.extra_keys[key].value)
    return v if v is not None and 0 < v <= KEY_BOUNDS[key] else None


def layer_tensors(spec: DraftSpec, i: int) -> dict[str, Shape]:
    """The DFlash v1 tensors of draft layer ``i`` (11, or 15 with attention biases)."""
    d = spec.dims
    h, hd, inter = d.hidden_size, d.head_dim, d.intermediate_size
    q_out, kv_out = _mul(d.num_attention_heads, hd), _mul(d.num_key_value_heads, hd)
    p = f"layers.{i}."
    out: dict[str, Shape] = {
        p + "input_layernorm.weight": _shape(h),
        p + "post_attention_layernorm.weight": _shape(h),
        p + "self_attn.q_proj.weight": _shape(q_out, h),
        p + "self_attn.k_proj.weight": _shape(kv_out, h),
        p + "self_attn.v_proj.weight": _shape(kv_out, h),
        p + "self_attn.o_proj.weight": _shape(h, q_out),
        p + "self_attn.q_norm.weight": _shape(hd),
        p + "self_attn.k_norm.weight": _shape(hd),
        p + "mlp.gate_proj.weight": _shape(inter, h),
        p + "mlp.up_proj.weight": _shape(inter, h),
        p + "mlp.down_proj.weight": _shape(h, inter),
    }
    if d.attention_bias:
        out[p + "self_attn.q_proj.bias"] = _shape(q_out)
        out[p + "self_attn.k_proj.bias"] = _shape(kv_out)
        out[p + "self_attn.v_proj.bias"] = _shape(kv_out)
        out[p + "self_attn.o_proj.bias"] = _shape(h)
    return out


def dflash2_layer_tensors(spec: DraftSpec, i: int) -> dict[str, Shape]:
    """DFlash2's per-layer convolution tensors: ``base_kernel [2, ks, H]`` (side 0 before the
    sublayer, side 1 after it) and ``kernel_projection.weight [2*ks*(H/g), H]``."""
    h = spec.dims.hidden_size
    ks = _extra(spec, "conv_kernel_size")
    g = _extra(spec, "conv_group_size")
    proj_out = 2 * ks * (h // g) if h and ks and g and h % g == 0 else None
    p = f"layers.{i}."
    return {
        p + "attention_conv.base_kernel": _shape(2, ks, h),
        p + "mlp_conv.base_kernel": _shape(2, ks, h),
        p + "attention_conv.kernel_projection.weight": _shape(proj_out, h),
        p + "mlp_conv.kernel_projection.weight": _shape(proj_out, h),
    }


def dflash2_model_tensors(spec: DraftSpec) -> dict[str, Shape]:
    """DFlash2's candidate selector (the codebooks have no ``.weight`` suffix in the files)."""
    h, vocab = spec.dims.hidden_size, spec.dims.vocab_size
    r = _extra(spec, "selector_rank")
    return {
        "candidate_selector.hidden_projection.weight": _shape(r, h),
        "candidate_selector.predecessor_codebook": _shape(vocab, r),
        "candidate_selector.successor_codebook": _shape(vocab, r),
    }


def expected_tensors(spec: DraftSpec, *, dflash2: bool | None = None, names: Iterable[str] = ()) -> dict[str, Shape]:
    """Every tensor the config implies, ``fc.weight`` first; ``names`` (the tensors the weights hold)
    picks between the spellings of a sibling family's heads and the optional own embeddings."""
    if spec.family == LAGUNA:
        return laguna_tensors(spec)
    h = spec.dims.hidden_size
    ids = spec.target_layer_ids
    k = len(ids) if ids else None
    out: dict[str, Shape] = {
        "fc.weight": _shape(h, _mul(k, h)),
        "hidden_norm.weight": _shape(h),
        "norm.weight": _shape(h),
    }
    v2 = spec.generation == "DFlash2" if dflash2 is None else dflash2
    for i in range(spec.dims.num_hidden_layers or 0):
        out.update(layer_tensors(spec, i))
        if v2:
            out.update(dflash2_layer_tensors(spec, i))
    if v2:
        out.update(dflash2_model_tensors(spec))
    if spec.family == DSPARK:
        out.update(dspark_tensors(spec, names))
    return out


def _named(names: Iterable[str], *choices: str) -> str:
    """The first of ``choices`` the weights hold, else the first (the name engines load)."""
    have = set(names)
    return next((c for c in choices if c in have), choices[0])


def dspark_tensors(spec: DraftSpec, names: Iterable[str]) -> dict[str, Shape]:
    """DSpark's heads (vLLM 0.32.0 ``qwen3_dspark.py``): ``markov_w1 [vocab, r]`` (an embedding of
    the previous token), ``markov_w2 [draft_vocab, r]`` (its bias over the draft vocabulary), and,
    with ``enable_confidence_head``, ``confidence_head.proj`` ``[1, H (+ r with
    confidence_head_with_markov)]`` with a ``[1]`` bias. DeepSpec spells them without the
    ``markov_head.`` prefix and the confidence projection ``confidence_proj``; either is accepted.
    Its own ``embed_tokens [vocab, H]`` and ``lm_head [draft_vocab, H]`` are optional (DeepSpec
    ships both; without them the target's are shared) and shape-checked when present."""
    names = list(names)
    d = spec.dims
    h, vocab = d.hidden_size, d.vocab_size
    dvs = as_int(spec.config.get("draft_vocab_size")) or vocab
    r = markov_rank(spec.config)
    out: dict[str, Shape] = {}
    if r:
        out[_named(names, "markov_head.markov_w1.weight", "markov_w1.weight")] = _shape(vocab, r)
        out[_named(names, "markov_head.markov_w2.weight", "markov_w2.weight")] = _shape(dvs, r)
    if confidence_head(spec.config):
        width = _mul(1, h) if dspark_value(spec.config, "confidence_head_with_markov") is not True else (
            h + r if h is not None and r is not None else None)
        proj = _named(names, "confidence_head.proj.weight", "confidence_proj.weight").removesuffix(".weight")
        out[proj + ".weight"] = _shape(1, width)
        out[proj + ".bias"] = (1,)
    out.update(own_embeddings(spec, names))
    return out


def own_embeddings(spec: DraftSpec, names: Iterable[str]) -> dict[str, Shape]:
    """``embed_tokens.weight [vocab, H]`` and ``lm_head.weight [draft_vocab or vocab, H]`` where the
    draft ships them (DeepSpec, Nemotron NVFP4-DFlash): expected only when present."""
    have = set(names)
    h, vocab = spec.dims.hidden_size, spec.dims.vocab_size
    dvs = as_int(spec.config.get("draft_vocab_size")) or vocab
    out: dict[str, Shape] = {}
    for name, rows in (("embed_tokens.weight", vocab), ("lm_head.weight", dvs)):
        if name in have:
            out[name] = _shape(rows, h)
    return out


def laguna_tensors(spec: DraftSpec) -> dict[str, Shape]:
    """What a Laguna draft holds beside its layers (vLLM 0.32.0 ``laguna_dflash.py``): ``fc``, one
    RMSNorm per tap (``aux_hidden_norms.{i}.weight [H]``) and the final norm; its layers (fused
    ``qkv_proj``, per-head norms, a gate) are the target's own kind and are not modelled here."""
    h = spec.dims.hidden_size
    ids = spec.target_layer_ids or []
    out: dict[str, Shape] = {"fc.weight": _shape(h, _mul(len(ids) or None, h)), "norm.weight": _shape(h)}
    for i in range(len(ids)):
        out[f"aux_hidden_norms.{i}.weight"] = _shape(h)
    return out
