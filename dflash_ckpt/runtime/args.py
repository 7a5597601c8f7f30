"""Model settings for the reference runtime, read from config dicts.

Nothing here imports torch: the settings are plain dataclasses, so ``smoke-run`` can refuse an
unsupported pair (exit 2, one line) before paying for torch. Values are validated with messages
that name the file and the key, because a config that the checks of ``inspect`` accept can still
carry a rope setting or an activation this runtime does not implement.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from dflash_ckpt.errors import InputError, UsageError
from dflash_ckpt.runtime.families import SUPPORTED_TEXT, family_of
from dflash_ckpt.draftspec.layout import BlockLayout, resolve_layout
from dflash_ckpt.draftspec.layer_kinds import FULL, LAYER_KINDS, SLIDING, derive_layer_kinds, explicit_layer_kinds
from dflash_ckpt.draftspec.specs import ABSENT, DFLASH2_KEYS, DraftSpec, as_int, decoder_config, lookup, target_model_type

#: Rope types implemented in ``rope.py`` (``default`` also covers a null ``rope_scaling``).
ROPE_TYPES = ("default", "linear", "llama3", "yarn")


class Unsupported(UsageError):
    """A pair the reference runtime cannot run (exit 2): names what is supported."""

    def __init__(self, what: str) -> None:
        super().__init__(f"not supported by the reference runtime: {what}; {SUPPORTED_TEXT}")


# -- typed reads with messages that name file and key ------------------------------------------


def _bad(where: str, key: str, value: Any, want: str) -> InputError:
    return InputError(f"key '{key}' must be {want}, found {value!r}", code="DF142", path=where)


def get_int(cfg: dict[str, Any], key: str, where: str, *, default: Any = ..., minimum: int = 1, path: str | None = None) -> int:
    """A required (or defaulted) integer key of at least ``minimum``."""
    raw = cfg.get(key)
    if raw is None:
        if default is ...:
            raise _bad(where, path or key, raw, f"an integer >= {minimum}")
        return default
    val = as_int(raw)
    if val is None or val < minimum:
        raise _bad(where, path or key, raw, f"an integer >= {minimum}")
    return val


def get_float(cfg: dict[str, Any], key: str, where: str, *, default: Any = ..., positive: bool = True, path: str | None = None) -> float:
    """A number key (JSON int or float, not bool); ``positive`` requires > 0."""
    raw = cfg.get(key)
    if raw is None:
        if default is ...:
            raise _bad(where, path or key, raw, "a number")
        return default
    if isinstance(raw, bool) or not isinstance(raw, (int, float)) or not math.isfinite(raw) or (positive and raw <= 0):
        raise _bad(where, path or key, raw, "a positive number" if positive else "a number")
    return float(raw)


def get_bool(cfg: dict[str, Any], key: str, where: str, default: bool) -> bool:
    raw = cfg.get(key)
    if raw is None:
        return default
    if not isinstance(raw, bool):
        raise _bad(where, key, raw, "true or false")
    return raw


# -- rope --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RopeSpec:
    """One rotary embedding, in the terms Hugging Face configs use.

    ``rope_type`` is ``default``, ``linear``, ``llama3`` or ``yarn``. ``original_max_position_embeddings``
    is the pre-extension context (llama3: required; yarn: defaults to ``max_position_embeddings``).
    """

    rope_type: str
    theta: float
    max_position_embeddings: int
    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int | None = None
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    attention_factor: float | None = None
    mscale: float | None = None
    mscale_all_dim: float | None = None
    truncate: bool = True


def _rope_from_params(params: dict[str, Any], theta: float, max_pos: int, where: str, key: str) -> RopeSpec:
    """A ``RopeSpec`` from a ``rope_scaling``/``rope_parameters`` dict (``theta`` as resolved)."""
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type is None:
        rope_type = "default"
    if rope_type not in ROPE_TYPES:
        raise Unsupported(f"{where}: {key}.rope_type {rope_type!r} (implemented: {', '.join(ROPE_TYPES)})")
    if rope_type == "default":
        return RopeSpec("default", theta, max_pos)
    factor = get_float(params, "factor", where, path=f"{key}.factor")
    if rope_type == "linear":
        return RopeSpec("linear", theta, max_pos, factor=factor)
    if rope_type == "llama3":
        return RopeSpec(
            "llama3", theta, max_pos, factor=factor,
            low_freq_factor=get_float(params, "low_freq_factor", where, path=f"{key}.low_freq_factor"),
            high_freq_factor=get_float(params, "high_freq_factor", where, path=f"{key}.high_freq_factor"),
            original_max_position_embeddings=get_int(
                params, "original_max_position_embeddings", where, path=f"{key}.original_max_position_embeddings"),
        )
    # yarn
    truncate = params.get("truncate", True)
    return RopeSpec(
        "yarn", theta, max_pos, factor=factor,
        original_max_position_embeddings=get_int(
            params, "original_max_position_embeddings", where, default=None,
            path=f"{key}.original_max_position_embeddings"),
        beta_fast=get_float(params, "beta_fast", where, default=32.0, path=f"{key}.beta_fast"),
        beta_slow=get_float(params, "beta_slow", where, default=1.0, path=f"{key}.beta_slow"),
        attention_factor=get_float(params, "attention_factor", where, default=None, path=f"{key}.attention_factor"),
        mscale=get_float(params, "mscale", where, default=None, positive=False, path=f"{key}.mscale"),
        mscale_all_dim=get_float(params, "mscale_all_dim", where, default=None, positive=False, path=f"{key}.mscale_all_dim"),
        truncate=truncate is not False,
    )


def rope_specs(cfg: dict[str, Any], where: str) -> dict[str, RopeSpec]:
    """The rope of each layer type (``full_attention``/``sliding_attention``).

    Two spellings exist: ``rope_theta`` + ``rope_scaling`` (older configs; ``rope_scaling`` may be
    null) and ``rope_parameters`` holding ``rope_theta`` and the scaling keys (newer configs),
    which may also be a dict per layer type. One spec serves both types unless the config
    gives one per type.
    """
    max_pos = get_int(cfg, "max_position_embeddings", where, default=32768)
    params = cfg.get("rope_parameters")
    if isinstance(params, dict) and params and all(k in LAYER_KINDS for k in params):
        out = {}
        for layer_type, sub in params.items():
            if not isinstance(sub, dict):
                raise _bad(where, f"rope_parameters.{layer_type}", sub, "an object")
            theta = get_float(sub, "rope_theta", where, default=get_float(cfg, "rope_theta", where, default=10000.0),
                              path=f"rope_parameters.{layer_type}.rope_theta")
            out[layer_type] = _rope_from_params(sub, theta, max_pos, where, f"rope_parameters.{layer_type}")
        for layer_type in LAYER_KINDS:
            out.setdefault(layer_type, next(iter(out.values())))
        return out
    if isinstance(params, dict):
        theta = get_float(params, "rope_theta", where, default=get_float(cfg, "rope_theta", where, default=10000.0),
                          path="rope_parameters.rope_theta")
        spec = _rope_from_params(params, theta, max_pos, where, "rope_parameters")
    elif params is not None:
        raise _bad(where, "rope_parameters", params, "an object")
    else:
        theta = get_float(cfg, "rope_theta", where, default=10000.0)
        scaling = cfg.get("rope_scaling")
        if scaling is None:
            spec = RopeSpec("default", theta, max_pos)
        elif isinstance(scaling, dict):
            spec = _rope_from_params(scaling, theta, max_pos, where, "rope_scaling")
        else:
            raise _bad(where, "rope_scaling", scaling, "an object or null")
    prf = cfg.get("partial_rotary_factor")
    if prf is not None and prf != 1 and prf != 1.0:
        raise Unsupported(f"{where}: partial_rotary_factor {prf!r} (only full-width rotary embeddings)")
    return {t: spec for t in LAYER_KINDS}


# -- shared transformer dimensions -------------------------------------------------------------


@dataclass(frozen=True)
class Dims:
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    rms_norm_eps: float
    attention_bias: bool


def read_dims(cfg: dict[str, Any], where: str) -> Dims:
    hidden = get_int(cfg, "hidden_size", where)
    heads = get_int(cfg, "num_attention_heads", where)
    kv = get_int(cfg, "num_key_value_heads", where, default=heads)
    if heads % kv:
        raise _bad(where, "num_key_value_heads", kv, f"a divisor of num_attention_heads ({heads})")
    default_hd = hidden // heads if hidden % heads == 0 else None
    head_dim = get_int(cfg, "head_dim", where, default=default_hd)
    if head_dim is None:
        raise _bad(where, "head_dim", None, f"given (hidden_size {hidden} is not divisible by {heads} heads)")
    if head_dim % 2:
        raise _bad(where, "head_dim", head_dim, "even (rotary embeddings rotate pairs)")
    act = cfg.get("hidden_act", "silu")
    if act != "silu":
        raise Unsupported(f"{where}: hidden_act {act!r} (only 'silu')")
    return Dims(
        hidden_size=hidden,
        num_layers=get_int(cfg, "num_hidden_layers", where),
        num_heads=heads,
        num_kv_heads=kv,
        head_dim=head_dim,
        intermediate_size=get_int(cfg, "intermediate_size", where),
        vocab_size=get_int(cfg, "vocab_size", where),
        rms_norm_eps=get_float(cfg, "rms_norm_eps", where, default=1e-6),
        attention_bias=get_bool(cfg, "attention_bias", where, False),
    )


def config_dtype(cfg: dict[str, Any]) -> str | None:
    """The dtype a config declares (``torch_dtype`` in older files, ``dtype`` in newer), if any."""
    for key in ("dtype", "torch_dtype"):
        val = cfg.get(key)
        if isinstance(val, str) and val in ("float32", "float16", "bfloat16"):
            return val
    return None


def ensure_supported(spec: DraftSpec, target_config: dict[str, Any], target_where: str) -> None:
    """Refuse (exit 2) a target architecture the runtime does not implement.

    Only the kind of model is judged here, so that a supported pair with bad values is reported
    by the checks (exit 1) rather than refused as unsupported. Both draft generations (DFlash
    and DFlash2) are implemented.
    """
    inner = decoder_config(target_config)
    raw_archs = target_config.get("architectures")
    archs = [a for a in raw_archs if isinstance(a, str)] if isinstance(raw_archs, list) else []
    if family_of(target_config) is None:
        arch = f" ({', '.join(archs)})" if archs else ""
        raise Unsupported(f"target model_type {target_model_type(target_config)!r}{arch} in {target_where}")
    if any("Moe" in a for a in archs) or inner.get("num_experts"):
        raise Unsupported(f"a mixture-of-experts target in {target_where}")


# -- target ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TargetArgs:
    """A dense Qwen3 or Llama 3.x decoder."""

    model_type: str
    dims: Dims
    rope: RopeSpec
    qk_norm: bool
    mlp_bias: bool
    tie_word_embeddings: bool
    dtype: str | None
    text_config: bool

    @classmethod
    def from_config(cls, config: dict[str, Any], where: str) -> TargetArgs:
        """Settings of a target config; multimodal wrappers keep them in ``text_config``."""
        inner = decoder_config(config)
        label = f"{where} (text_config)" if inner is not config else where
        family = family_of(config)
        if family is None:
            raise Unsupported(f"target model_type {target_model_type(config)!r} in {where}")
        if family.sliding_flag and inner.get(family.sliding_flag) is True:
            raise Unsupported(f"{label}: a {family.name} target with {family.sliding_flag} true (full attention only)")
        layer_types = inner.get("layer_types")
        if isinstance(layer_types, list) and any(t != FULL for t in layer_types):
            raise Unsupported(f"{label}: target layer_types other than full_attention")
        dims = read_dims(inner, label)
        # A missing lm_head with untied embeddings is reported at load time, naming the file.
        tie = inner.get("tie_word_embeddings", config.get("tie_word_embeddings", family.tie_default))
        return cls(
            model_type=family.model_type,
            dims=dims,
            rope=rope_specs(inner, label)[FULL],
            qk_norm=family.qk_norm,
            mlp_bias=get_bool(inner, "mlp_bias", label, False),
            tie_word_embeddings=tie is True,
            dtype=config_dtype(inner) or config_dtype(config),
            text_config=inner is not config,
        )


# -- draft -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DraftArgs:
    """A DFlash draft (v1, or DFlash2 with ``dflash2`` set): the keys of ``config.json`` the
    forward pass needs, resolved.

    DFlash keys resolve ``dflash_config`` first, then the top level (docs/DESIGN.md section 2), through
    ``DraftSpec``; the optional output scalings do the same, as the z-lab reference reads them.
    """

    dims: Dims
    block_size: int
    mask_token_id: int
    target_layer_ids: tuple[int, ...]
    num_target_layers: int | None
    layer_types: tuple[str, ...]
    sliding_window: int | None
    is_causal: bool | None
    input_embedding_scale: float
    output_multiplier: float
    final_logit_softcapping: float | None
    ropes: dict[str, RopeSpec] = field(default_factory=dict)
    dtype: str | None = None
    #: DFlash2 only (``None`` for a v1 draft): see ``Dflash2Args``.
    dflash2: Dflash2Args | None = None
    #: Which block slots are drafts (1+N: 1..B-1; anchor-first: 0..B-1), as the config declares
    #: it (``draftspec.layout``) or ``--layout`` overrides it: the loops' one switch.
    block_layout: BlockLayout = field(default_factory=lambda: resolve_layout({}))

    @property
    def generation(self) -> str:
        """``DFlash2`` or ``DFlash``: which draft module runs this config."""
        return "DFlash2" if self.dflash2 is not None else "DFlash"

    def layer_causal(self, i: int) -> bool:
        """Sliding layers are causal, full layers bidirectional, unless ``is_causal`` says otherwise."""
        if self.is_causal is not None:
            return self.is_causal
        return self.layer_types[i] == SLIDING

    def layer_window(self, i: int) -> int | None:
        return self.sliding_window if self.layer_types[i] == SLIDING else None

    @classmethod
    def from_spec(cls, spec: DraftSpec) -> DraftArgs:
        """Settings of a draft that passed ``inspect``'s checks (so the DFlash keys are valid)."""
        where = spec.where
        cfg = spec.config
        dims = read_dims(cfg, where)
        ids = spec.target_layer_ids
        block = spec.block_size
        mask = spec.mask_token_id
        if ids is None or block is None or mask is None:
            raise InputError("block_size, mask_token_id and target_layer_ids must be set", code="DF101", path=where)
        layer_types = draft_layer_types(cfg, dims.num_layers, where)
        window = as_int(cfg.get("sliding_window"))
        if SLIDING in layer_types and (window is None or window <= 0):
            raise InputError("a sliding_attention layer needs a positive 'sliding_window'", code="DF132", path=where)

        def scaling(name: str, default: float | None) -> float | None:
            rk = spec.extra_keys[name]
            if not rk.present or rk.value is None:
                return default
            val = rk.value
            if isinstance(val, bool) or not isinstance(val, (int, float)):
                raise _bad(where, name, val, "a number")
            return float(val)

        is_causal = lookup(cfg, "is_causal")
        if is_causal is not None and not isinstance(is_causal, bool):
            raise _bad(where, "is_causal", is_causal, "true, false or null")
        softcap = scaling("final_logit_softcapping", None)
        return cls(
            dims=dims,
            block_size=block,
            mask_token_id=mask,
            target_layer_ids=tuple(ids),
            num_target_layers=spec.num_target_layers,
            layer_types=layer_types,
            sliding_window=window if SLIDING in layer_types else None,
            is_causal=is_causal,
            input_embedding_scale=scaling("input_embedding_scale", 1.0) or 1.0,
            output_multiplier=scaling("output_multiplier", 1.0) or 1.0,
            final_logit_softcapping=softcap if softcap and softcap > 0 else None,
            ropes=rope_specs(cfg, where),
            dtype=config_dtype(cfg),
            dflash2=Dflash2Args.from_spec(spec, dims) if spec.generation == "DFlash2" else None,
            block_layout=resolve_layout(cfg),
        )


@dataclass(frozen=True)
class Dflash2Args:
    """DFlash2's keys (``dflash_config`` first, then the top level, like every DFlash key).

    ``conv_kernel_size`` taps of the grouped dynamic causal conv around each sublayer, with one
    dynamic coefficient per ``conv_group_size`` channels; the candidate selector re-ranks the
    ``selector_top_k`` best draft logits per position with codebooks of rank ``selector_rank``.
    """

    conv_kernel_size: int
    conv_group_size: int
    selector_rank: int
    selector_top_k: int

    def groups(self, hidden_size: int) -> int:
        """Channel groups of the conv (``hidden_size / conv_group_size``)."""
        return hidden_size // self.conv_group_size

    @classmethod
    def from_spec(cls, spec: DraftSpec, dims: Dims) -> Dflash2Args:
        """The keys of a draft that passed the checks; the guards left here are the ones without
        which the conv and selector shapes would be garbage (the checks report the same as DF146)."""
        where = spec.where
        vals: dict[str, int] = {}
        for key in DFLASH2_KEYS:
            rk = spec.extra_keys[key]  # a nested/top conflict is inspect's DF103; the nested value is read
            val = as_int(rk.value) if rk.present else None
            if val is None or val < 1:
                raise InputError(
                    f"key 'dflash_config.{key}' must be an integer >= 1 in a DFlash2 draft, found "
                    f"{rk.value if rk.present else 'nothing'}; restore it from the published config",
                    code="DF146", path=where)
            vals[key] = val
        if dims.hidden_size % vals["conv_group_size"]:
            raise InputError(
                f"key 'dflash_config.conv_group_size' ({vals['conv_group_size']}) must divide "
                f"hidden_size ({dims.hidden_size})", code="DF146", path=where)
        return cls(**vals)


def draft_layer_types(cfg: dict[str, Any], n: int, where: str) -> tuple[str, ...]:
    """The kind of each draft layer: the explicit ``layer_types``, else what
    ``draftspec.layer_kinds`` derives (the rule ``normalize`` writes); anything it leaves open is
    refused (exit 2) rather than guessed."""
    lt = explicit_layer_kinds(cfg)
    if lt is not ABSENT:
        if not isinstance(lt, list) or len(lt) != n or any(t not in LAYER_KINDS for t in lt):
            raise InputError(f"key 'layer_types' must list {n} entries of {LAYER_KINDS}", code="DF130", path=where)
        return tuple(lt)
    derived, why = derive_layer_kinds(cfg)
    if derived is None:
        raise InputError(
            f"layer_types is missing and cannot be derived ({why}); write the trained list "
            f"with `dflash-ckpt normalize DRAFT OUT --layer-types ...` (one kind per draft layer)",
            code="DF133", path=where,
        )
    return tuple(derived)
