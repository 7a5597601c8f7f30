"""Keys that change acceptance but not loading (DF150), and smoke-run's refusal of those our
runtime does not implement (DF151).

An engine that does not read one of these keys loads the draft without a word and runs it as
if the key were absent, so the draft accepts far less than it was trained to. Which engine
reads which key, and where, comes from the engines' sources as shared/DESIGN.md section 10
lists them (vLLM ``models/qwen3_dflash.py``/``qwen3_dflash2.py``, SGLang
``speculative/dflash_utils.py``, TensorRT-LLM ``_torch/models/modeling_dflash.py`` at
009d8fa431bd, z-lab ``dflash/model_mlx.py`` at 0a7587c04af4, exllamav3 ``architecture/dflash.py``:
each engine's file in ``checks/engines/`` cites it); a key counts only when it is set
to something other than its neutral value, since an engine that ignores ``use_swa: false``
does what the draft asks.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from dflash_ckpt.checks.config import show_value
from dflash_ckpt.checks.engines.registry import SERVING, TITLES
from dflash_ckpt.errors import UsageError
from dflash_ckpt.rules import Finding, finding
from dflash_ckpt.draftspec.specs import ABSENT, NESTED, TOP_LEVEL, DraftSpec

BOTH = (NESTED, TOP_LEVEL)


class Reads(NamedTuple):
    """One engine applying a key: the places it reads it from, and for which draft generation
    (``None``: both)."""

    reader: str
    places: tuple[str, ...]
    generation: str | None = None


class AcceptanceKey(NamedTuple):
    name: str
    #: Values that ask for nothing beyond what an engine ignoring the key does.
    neutral: tuple[Any, ...]
    readers: tuple[Reads, ...]
    #: Whether the reference runtime (``draftspec/draft_settings.py``, ``runtime/draft.py``) implements it.
    runtime: bool


ACCEPTANCE_KEYS: tuple[AcceptanceKey, ...] = (
    AcceptanceKey("attention_sink_bias", (None, False, 0), (Reads("vllm", (NESTED,)), Reads("sglang", (NESTED,)),
                                                            Reads("exllamav3", BOTH)), False),
    AcceptanceKey("use_swa", (None, False), (Reads("vllm", (NESTED,)), Reads("tensorrt-llm", (NESTED,))), False),
    AcceptanceKey("attention_value_scale", (None, 1), (Reads("sglang", (NESTED,)), Reads("exllamav3", BOTH)), False),
    AcceptanceKey("partial_rotary_factor", (None, 1), (Reads("zlab", BOTH), Reads("zlab-legacy", (TOP_LEVEL,))), False),
    AcceptanceKey("output_multiplier", (None, 1), (
        Reads("zlab", BOTH), Reads("sglang", (NESTED,)), Reads("zlab-mlx", (NESTED,), "DFlash2"),
        Reads("vllm", (NESTED,), "DFlash2")), True),
    AcceptanceKey("final_logit_softcapping", (None, 0), (
        Reads("zlab", BOTH), Reads("sglang", (NESTED,)), Reads("zlab-mlx", BOTH, "DFlash2"),
        Reads("vllm", (NESTED,), "DFlash2")), True),
    AcceptanceKey("is_causal", (None, False), (Reads("vllm", (TOP_LEVEL,)), Reads("zlab", (TOP_LEVEL,)),
                                               Reads("zlab-mlx", (TOP_LEVEL,), "DFlash2"), Reads("exllamav3", (TOP_LEVEL,))), True),
    AcceptanceKey("causal", (None, False), (Reads("vllm", (NESTED,)),), False),
)


def _neutral(value: Any, neutral: tuple[Any, ...]) -> bool:
    return any(value is n or (type(value) is type(n) and value == n) or
               (isinstance(value, float) and isinstance(n, int) and not isinstance(n, bool) and value == n)
               for n in neutral)


def set_keys(spec: DraftSpec) -> list[tuple[AcceptanceKey, str, Any]]:
    """The acceptance keys the draft sets to a non-neutral value: (key, where it sits, value),
    once per place it sits in."""
    out = []
    for key in ACCEPTANCE_KEYS:
        rk = spec.declared(key.name)
        for place in BOTH:
            value = rk.at(place)
            if value is not ABSENT and not _neutral(value, key.neutral):
                out.append((key, place, value))
    return out


def applies(key: AcceptanceKey, reader: str, place: str, generation: str) -> bool:
    return any(r.reader == reader and place in r.places and r.generation in (None, generation) for r in key.readers)


#: A learned mask embedding shipped as a tensor of the draft, and the engines that use it in place
#: of the target's embedding row for ``mask_token_id`` (exllamav3 1.6.5 ``architecture/dflash.py:97-99``).
MASK_EMBEDDING_TENSOR = "mask_embedding"
MASK_EMBEDDING_READERS = ("exllamav3",)


def has_mask_embedding(spec: DraftSpec) -> bool:
    return spec.weights is not None and MASK_EMBEDDING_TENSOR in (spec.weights.tensors or {})


def ignored_by(spec: DraftSpec, reader: str) -> list[str]:
    """The keys (dotted where nested) ``reader`` would load this draft without applying, and the
    learned ``mask_embedding`` tensor where it does not use it."""
    if reader not in SERVING:
        return []
    out: list[str] = []
    if has_mask_embedding(spec) and reader not in MASK_EMBEDDING_READERS:
        out.append("the mask_embedding tensor")
    for key, place, _ in set_keys(spec):
        name = _path(key.name, place)
        if not applies(key, reader, place, spec.generation) and name not in out:
            out.append(name)
    return out


def _path(name: str, place: str) -> str:
    return f"dflash_config.{name}" if place == NESTED else name


def check_acceptance_keys(spec: DraftSpec) -> list[Finding]:
    """DF150: a key that changes acceptance is set (or a learned ``mask_embedding`` tensor is
    shipped), and some engines load the draft without it."""
    out: list[Finding] = []
    if has_mask_embedding(spec):
        ignoring = [TITLES[r] for r in SERVING if r not in MASK_EMBEDDING_READERS]
        out.append(finding(
            "DF150", "tensor 'mask_embedding' is a learned embedding for mask_token_id: it changes what the draft "
            f"accepts, and {', '.join(ignoring)} load the draft without it (they embed the mask with the target's "
            "row); applied by exllamav3 (1.6.5); serve it with an engine that applies it", path=spec.where))
    for key, place, value in set_keys(spec):
        ignoring = [r for r in SERVING if not applies(key, r, place, spec.generation)]
        applying = [r for r in SERVING if r not in ignoring]
        if not ignoring:
            continue
        by = ", ".join(TITLES[r] for r in applying) or "no engine modelled here"
        out.append(finding(
            "DF150",
            f"key '{_path(key.name, place)}' is {show_value(value)}: it changes what the draft accepts, "
            f"and {', '.join(TITLES[r] for r in ignoring)} load the draft without applying it "
            f"(applied by {by}); serve it with an engine that applies it", path=spec.where, key=_path(key.name, place),
        ))
    return out


def runtime_gaps(spec: DraftSpec) -> list[str]:
    """What in this draft the reference runtime would silently run without: acceptance keys it
    does not implement, and a reduced draft vocabulary (``draft_vocab_size`` with d2t/t2d)."""
    gaps = [f"'{_path(k.name, p)}' ({show_value(v)})" for k, p, v in set_keys(spec) if not k.runtime]
    dvs = spec.top("draft_vocab_size")
    if dvs is not None and dvs != spec.dims.vocab_size:
        gaps.append(f"'draft_vocab_size' ({show_value(dvs)}: a reduced draft vocabulary mapped through d2t)")
    return gaps + family_gaps(spec)


def family_gaps(spec: DraftSpec) -> list[str]:
    """A sibling family's head the reference runtime has no module for: DSpark's Markov head
    (``markov_rank`` > 0; rank 0 is plain anchor-first DFlash, which it runs), LiLiCorr's
    candidate-lattice head, Laguna's draft layers (fused qkv_proj, output gate)."""
    from dflash_ckpt.draftspec.siblings import DSPARK, LAGUNA, LILICORR, markov_rank  # noqa: PLC0415

    rank = spec.markov_rank
    if spec.family == DSPARK and rank:
        return [f"DSpark's Markov head ('markov_rank' {rank})"]
    if spec.family == LILICORR:
        return ["LiLiCorr's candidate-lattice head (lilicorr_* keys)"]
    if spec.family == LAGUNA:
        return ["Laguna's draft layers (fused qkv_proj, per-head norms, output gate)"]
    return []


def refuse_unimplemented(spec: DraftSpec) -> None:
    """A run's gate (DF151, exit 2; smoke-run's and probe-taps' opening): never measure a draft
    without keys that change its acceptance, which would report a low tau that says nothing about
    the checkpoint (and rank tap sets of another model)."""
    gaps = runtime_gaps(spec)
    if gaps:
        raise UsageError(
            f"not run: the reference runtime does not implement {', '.join(gaps)}, which "
            "change what the draft accepts; running without them would measure another model. Measure it "
            "in an engine that applies them (see `dflash-ckpt inspect` readers and DF150)",
            code="DF151", path=spec.where,
        )
