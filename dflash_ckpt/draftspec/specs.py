"""Resolve a draft's DFlash keys, and a target's dimensions, keeping track of where each came from;
decode every setting once, when a spec is built (``decode_settings``).

Resolution order for every DFlash key is ``dflash_config`` first, then the top level
(docs/DESIGN.md section 2). Both values are kept so that a conflict is reported rather than
silently resolved, and nothing is ever guessed: a key absent from both places resolves to
``missing``.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Callable, Generic, NamedTuple, Sequence, TypeVar

from dflash_ckpt.draftspec.architectures import DFLASH2_ARCHITECTURES, DFLASH_ARCHITECTURES
from dflash_ckpt.draftspec.decoder_dims import Dims, dims_findings, read_dims
from dflash_ckpt.draftspec.families import Unsupported
from dflash_ckpt.draftspec.layer_kinds import (
    derive_layer_kinds, draft_layer_types, explicit_layer_kinds, layer_kind_findings, layer_kind_keys,
)
from dflash_ckpt.draftspec.layout import BlockLayout, resolve_layout
from dflash_ckpt.draftspec.siblings import dspark_value, is_muse_glimmer, markov_rank, sibling_family
from dflash_ckpt.draftspec.rope_spec import RopeSpec, rope_findings, rope_specs
from dflash_ckpt.draftspec.speculators_format import NativeView, is_speculators_native, native_view
from dflash_ckpt.draftspec.values import (
    ABSENT, as_int, as_int_list, bounded_int, config_dtype, decoder_config, same_json, target_model_type,
)
from dflash_ckpt.errors import InputError
from dflash_ckpt.limits import MAX_BLOCK_SIZE, MAX_LAYERS, MAX_LIST_LEN, MAX_VOCAB
from dflash_ckpt.rules import Finding
from dflash_ckpt.sources.jsonfile import decode_json_bytes, require_object
from dflash_ckpt.sources.base import Source
from dflash_ckpt.sources.tokenizer_config import added_token_ids
from dflash_ckpt.sources.weights import WeightInventory, load_inventory

#: The keys every DFlash draft needs, in report order.
DFLASH_KEYS = ("block_size", "mask_token_id", "target_layer_ids", "num_target_layers")
#: Keys only DFlash2 drafts carry (inside dflash_config in the published files).
DFLASH2_KEYS = ("conv_kernel_size", "conv_group_size", "selector_rank", "selector_top_k")
#: Optional scaling keys that SGLang reads only from dflash_config.
SCALING_KEYS = ("output_multiplier", "final_logit_softcapping", "input_embedding_scale")

#: Keys of a decoder that routes tokens to experts.
MOE_KEYS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_intermediate_size")

NESTED, TOP_LEVEL, MISSING = "dflash_config", "top_level", "missing"


class ResolvedKey(NamedTuple):
    """One DFlash key: the value a nested-first reader sees, where it came from, both raw values."""

    name: str
    nested: Any = ABSENT
    top: Any = ABSENT

    @property
    def source(self) -> str:
        if self.nested is not ABSENT:
            return NESTED
        if self.top is not ABSENT:
            return TOP_LEVEL
        return MISSING

    @property
    def value(self) -> Any:
        """The resolved value (nested first); ``None`` when missing."""
        if self.nested is not ABSENT:
            return self.nested
        if self.top is not ABSENT:
            return self.top
        return None

    @property
    def present(self) -> bool:
        return self.source != MISSING

    @property
    def conflict(self) -> bool:
        return self.nested is not ABSENT and self.top is not ABSENT and not same_json(self.nested, self.top)

    def at(self, place: str) -> Any:
        """The raw value at ``NESTED`` or ``TOP_LEVEL`` (``ABSENT`` if not there)."""
        return self.nested if place == NESTED else self.top

    def first(self, order: Sequence[str]) -> tuple[str, Any] | None:
        """``(place, raw value)`` at the first place of ``order`` that writes the key, as a reader
        that looks there in that order finds it; ``None`` when none does."""
        return next(((place, self.at(place)) for place in order if self.at(place) is not ABSENT), None)


def resolve_key(config: dict[str, Any], name: str) -> ResolvedKey:
    nested_cfg = config.get("dflash_config")
    nested = nested_cfg.get(name, ABSENT) if isinstance(nested_cfg, dict) else ABSENT
    return ResolvedKey(name, nested=nested, top=config.get(name, ABSENT))


def lookup(config: dict[str, Any], name: str) -> Any:
    """The value a nested-first reader sees for ``name`` (``None`` when in neither place), for keys
    whose two copies need no conflict report (``resolve_key`` keeps both for the ones that do)."""
    return resolve_key(config, name).value


T = TypeVar("T")


@dataclass(frozen=True)
class Decoded(Generic[T]):
    """One setting decoded when its spec was built: the value a run uses, or the line it stops on
    (a DF142 ``InputError``, or an ``Unsupported`` refusal), kept so no reader decodes it again."""

    value: T | None
    refusal: InputError | Unsupported | None = None

    def require(self) -> T:
        """The value, or the decoder's own error raised (the run's stricter severity)."""
        if self.refusal is not None:
            raise self.refusal
        return self.value  # type: ignore[return-value]  # set whenever refusal is None


def decode(reader: Callable[..., T], *args: Any) -> Decoded[T]:
    """``reader(*args)`` run once, its error kept for the run that needs the value."""
    try:
        return Decoded(reader(*args))
    except (InputError, Unsupported) as exc:
        return Decoded(None, exc)


class Settings(NamedTuple):
    """A decoder's settings decoded once, when its spec is built: ``dims`` as ``inspect`` reports
    them, what a run uses (``run_dims``, ``ropes``, a draft's ``layer_kinds``: values or the line
    it stops on), and ``inspect``'s findings on bad values (``problems``: each list spliced into
    the report where its check stands, so none is judged twice)."""

    dims: Dims
    run_dims: Decoded[Dims]
    ropes: Decoded[dict[str, RopeSpec]]
    layer_kinds: Decoded[tuple[str, ...]]
    problems: dict[str, list[Finding]]


def decode_settings(cfg: dict[str, Any], where: str, *, draft: bool) -> Settings:
    """Every setting of the decoder ``cfg`` decoded once; a ``draft`` adds its layer kinds and
    ``inspect``'s findings (a target's values are judged by ``checks.target_config``, naming each
    key's level, and its layers are refused unless all full attention, ``target_settings``)."""
    dims = Dims.from_config(cfg)
    run_dims = decode(read_dims, dims, where)
    problems: dict[str, list[Finding]] = {}
    kinds: Decoded[tuple[str, ...]] = Decoded(None, run_dims.refusal)  # a run stops on the dims first
    if draft:
        problems["dims"], problems["dims_bounds"] = dims_findings(dims, where)
        problems["rope"] = rope_findings(cfg, where)
        problems["layer_types"] = layer_kind_findings(cfg, dims.num_hidden_layers, where)
        if run_dims.value is not None:
            kinds = decode(draft_layer_types, explicit_layer_kinds(cfg), derive_layer_kinds(*layer_kind_keys(cfg)),
                           run_dims.value.num_hidden_layers, where)
    return Settings(dims, run_dims, decode(rope_specs, cfg, where), kinds, problems)


class DraftSpec:
    """Everything known about a draft before any check runs."""

    def __init__(
        self,
        *,
        label: str,
        where: str,
        config: dict[str, Any],
        keys: dict[str, ResolvedKey],
        extra_keys: dict[str, ResolvedKey],
        settings: Settings,
        weights: WeightInventory | None = None,
        raw: bytes | None = None,
        native: NativeView | None = None,
    ) -> None:
        self.label = label
        self.where = where
        self.config = config
        self.keys = keys
        self.extra_keys = extra_keys
        #: The settings decoded when the spec was built (``decode_settings``): read, never re-derived.
        self.settings = settings
        self.dims = settings.dims
        #: ``inspect``'s findings on bad values, by setting: ``dims`` (DF142), ``dims_bounds``
        #: (DF145), ``rope`` (DF147), ``layer_types`` (DF130-DF133).
        self.problems = settings.problems
        self.weights = weights
        self.raw = raw
        #: The speculators-native form this spec was read from (``config`` is then its z-lab view).
        self.native = native
        #: The positions the draft's rope is defined for, ``None`` when absent or not an integer.
        self.max_position_embeddings = as_int(config.get("max_position_embeddings"))
        #: The dtype the config declares (``dtype``, else ``torch_dtype``), if one a run uses.
        self.dtype = config_dtype(config)
        #: Which block slots are drafts, and what decided it (``draftspec.layout``).
        self.block_layout: BlockLayout = resolve_layout(config)
        #: DSpark, Laguna or LiLiCorr (``draftspec.siblings``), ``None`` for a DFlash draft.
        self.family = sibling_family(config)

    def declared(self, key: str) -> ResolvedKey:
        """``key`` as a nested-first reader finds it (``dflash_config``, then the top level), both
        copies kept: the one lookup an engine's reader row makes, in that engine's order."""
        return self.keys.get(key) or self.extra_keys.get(key) or resolve_key(self.config, key)

    def top(self, key: str, default: Any = None) -> Any:
        """``key`` as config.json writes it at its top level, undecoded (``default`` when absent):
        what a finding quotes, or a reader that takes the top level alone sees."""
        return self.config.get(key, default)

    def states(self, key: str) -> bool:
        """Whether config.json writes ``key`` at its top level (whatever its value)."""
        return key in self.config

    @property
    def layer_type_list(self) -> list[Any] | None:
        """``layer_types`` when config.json writes a list (its entries as written: the checks judge
        them), else ``None``."""
        lt = self.config.get("layer_types")
        return lt if isinstance(lt, list) else None

    @property
    def draft_vocab_size(self) -> int | None:
        """A reduced draft vocabulary (``draft_vocab_size``), ``None`` when absent or not an integer."""
        return as_int(self.config.get("draft_vocab_size"))

    @property
    def sliding_window(self) -> int | None:
        """``sliding_window`` when an integer, else ``None`` (DF132 judges it)."""
        return as_int(self.config.get("sliding_window"))

    @property
    def quantization_config(self) -> dict[str, Any] | None:
        """The draft's own ``quantization_config`` object, ``None`` when it has none."""
        q = self.config.get("quantization_config")
        return q if isinstance(q, dict) else None

    @property
    def muse_glimmer(self) -> bool:
        """Whether the draft is a Muse-Glimmer export (``draftspec.siblings``)."""
        return is_muse_glimmer(self.config)

    @property
    def markov_rank(self) -> int | None:
        """The Markov head's rank of a sibling that declares one (``draftspec.siblings``)."""
        return markov_rank(self.config)

    def dspark(self, key: str) -> Any:
        """A DSpark key's value wherever DSpark writes it (``draftspec.siblings``), ``None`` if absent."""
        return dspark_value(self.config, key)

    @property
    def is_causal(self) -> Any:
        """``is_causal`` as a nested-first reader finds it, undecoded (``None`` when absent;
        ``DraftSettings`` refuses anything but a boolean)."""
        return self.declared("is_causal").value

    @property
    def declared_k(self) -> list[tuple[str, Any]]:
        """Where the config declares how many tokens to draft per step: ``(key path, raw value)``."""
        out: list[tuple[str, Any]] = []
        if "num_speculative_tokens" in self.config:
            out.append(("num_speculative_tokens", self.config["num_speculative_tokens"]))
        sc = self.config.get("speculators_config")
        methods = sc.get("proposal_methods") if isinstance(sc, dict) else None
        for i, m in enumerate(methods if isinstance(methods, list) else []):
            if isinstance(m, dict) and "speculative_tokens" in m:
                out.append((f"speculators_config.proposal_methods[{i}].speculative_tokens", m["speculative_tokens"]))
        return out

    @property
    def document(self) -> dict[str, Any]:
        """The parsed config.json as written (the speculators form when the spec reads its z-lab
        view): what ``normalize`` rewrites, key by key."""
        return self.native.raw if self.native is not None else self.config

    @property
    def dflash_config(self) -> dict[str, Any] | None:
        value = self.config.get("dflash_config")
        return value if isinstance(value, dict) else None

    @property
    def block_size(self) -> int | None:
        """The resolved block size; ``None`` when missing, not an integer or beyond bounds (DF145)."""
        return bounded_int(self.keys["block_size"].value, MAX_BLOCK_SIZE)

    @property
    def mask_token_id(self) -> int | None:
        return bounded_int(self.keys["mask_token_id"].value, MAX_VOCAB)

    @property
    def target_layer_ids(self) -> list[int] | None:
        """The tap list; ``None`` when not a list of integers, longer than ``MAX_LIST_LEN`` or
        holding an id beyond ``MAX_LAYERS`` (DF145 says which)."""
        value = self.keys["target_layer_ids"].value
        if not isinstance(value, list) or len(value) > MAX_LIST_LEN:
            return None
        ids = as_int_list(value)
        if ids is None or any(abs(i) > MAX_LAYERS for i in ids):
            return None
        return ids

    @property
    def num_target_layers(self) -> int | None:
        return bounded_int(self.keys["num_target_layers"].value, MAX_LAYERS)

    @property
    def layout(self) -> str:
        """``nested``, ``top-level`` (older drafts: block_size at the top), ``mixed``, ``none``, or
        ``speculators`` (the speculators-native form, read through its z-lab view).

        Only the three keys engines read from ``dflash_config`` decide it; ``num_target_layers``
        sits at the top level in every published layout.
        """
        if self.native is not None:
            return "speculators"
        places = {k: self.keys[k].source for k in ("block_size", "mask_token_id", "target_layer_ids")}
        present = {k: p for k, p in places.items() if p != MISSING}
        if not present:
            return "none"
        if all(p == NESTED for p in present.values()):
            return "nested"
        others_nested = all(p == NESTED for k, p in present.items() if k != "block_size")
        if present.get("block_size") == TOP_LEVEL and others_nested:
            return "top-level"
        return "mixed"

    @property
    def architectures(self) -> list[str]:
        archs = self.config.get("architectures")
        return [a for a in archs if isinstance(a, str)] if isinstance(archs, list) else []

    @property
    def generation(self) -> str:
        """``DFlash2``, ``DFlash``, a sibling ``family`` or ``unknown`` (DFlash v1 tensors expected)."""
        if self.family is not None:
            return self.family
        archs = self.architectures
        if DFLASH2_ARCHITECTURES & set(archs):
            return "DFlash2"
        if DFLASH_ARCHITECTURES & set(archs) or is_muse_glimmer(self.config):
            return "DFlash"
        if any(self.extra_keys[k].present for k in DFLASH2_KEYS):
            return "DFlash2"
        return "unknown"

    @property
    def layer_types(self) -> Any:
        """The config's own ``layer_types`` as written (``ABSENT`` when missing or null, as engines
        treat both; DF130/DF131 judge the rest)."""
        return explicit_layer_kinds(self.config)

    def resolved_json(self) -> dict[str, Any]:
        return {k: self.keys[k].value for k in DFLASH_KEYS}

    def sources_json(self) -> dict[str, str]:
        if self.native is not None:  # resolved from the speculators form: say from which key, and how
            return {k: self.native.provenance.get(k, self.keys[k].source) for k in DFLASH_KEYS}
        return {k: ("conflict" if self.keys[k].conflict else self.keys[k].source) for k in DFLASH_KEYS}


def build_spec(
    config: dict[str, Any],
    *,
    label: str,
    where: str = "config.json",
    weights: WeightInventory | None = None,
    raw: bytes | None = None,
    view: bool = True,
) -> DraftSpec:
    """Resolve a parsed config (from disk, or one ``normalize`` is about to write); a
    speculators-native config is resolved through its z-lab view (``draftspec.speculators_format``)
    unless ``view`` is false (what an engine without a reader of that format sees)."""
    native = native_view(config) if view and is_speculators_native(config) else None
    if native is not None:
        config = native.config
    return DraftSpec(
        label=label,
        where=where,
        config=config,
        keys={k: resolve_key(config, k) for k in DFLASH_KEYS},
        extra_keys={k: resolve_key(config, k) for k in (*DFLASH2_KEYS, *SCALING_KEYS)},
        settings=decode_settings(config, where, draft=True),
        weights=weights,
        raw=raw,
        native=native,
    )


def read_config(source: Source, name: str = "config.json") -> tuple[dict[str, Any], bytes]:
    """The parsed config object and its raw bytes; ``InputError`` if it cannot be read."""
    from dflash_ckpt.errors import InputError

    if not source.exists(name):
        raise InputError(
            "missing; the folder is not a model checkpoint "
            "(every draft and target has a config.json)",
            code="DF001", path=source.where(name),
        )
    raw = source.read_json_bytes(name)
    where = source.where(name)
    return require_object(decode_json_bytes(raw, where), where), raw


def read_draft_spec(source: Source, *, with_weights: bool = True) -> DraftSpec:
    """Read a draft's config and (unless told not to) its weight headers."""
    config, raw = read_config(source)
    weights = load_inventory(source) if with_weights else None
    return build_spec(config, label=source.label, where=source.where("config.json"), weights=weights, raw=raw)


class TargetSpec(NamedTuple):
    """The dimensions of a target model that a draft must agree with (raw values, checked later)."""

    label: str
    where: str
    model_type: str | None
    architectures: list[str]
    num_hidden_layers: Any
    hidden_size: Any
    vocab_size: Any
    pad_token_id: Any
    text_config_used: bool
    config: dict[str, Any]
    #: The decoder's settings decoded when the spec was built (``decode_settings``; a run's
    #: ``TargetSettings`` reads them, labelled ``where (text_config)`` for a wrapper).
    settings: Settings
    #: The quantization scheme, decoded when the spec was built (``quant_scheme``).
    scheme: Decoded[Any]
    #: ``generation_config.json`` when the target has one (its eos/bos/pad ids), else empty.
    generation_config: dict[str, Any] = {}  # noqa: RUF012 - NamedTuple default, never mutated
    #: The largest token id ``tokenizer_config.json``'s ``added_tokens_decoder`` names, when it has one.
    tokenizer_max_id: int | None = None
    #: Every id ``added_tokens_decoder`` names (the special and added tokens), sorted, when it has any.
    tokenizer_added_ids: tuple[int, ...] | None = None

    @property
    def decoder(self) -> dict[str, Any]:
        """The decoder's settings: a multimodal wrapper's ``text_config``, else the config itself."""
        return decoder_config(self.config)

    def setting(self, key: str, default: Any = None) -> Any:
        """``key`` as loaders read it: the decoder's value first, then the wrapper's."""
        return decoder_setting(self.config, key, default)

    @property
    def dims(self) -> Dims:
        """The decoder's shapes, read as a draft's are (``None`` where missing or invalid); the
        vocabulary falls back to the wrapper's."""
        dims = self.settings.dims
        return dims if dims.vocab_size is not None else replace(dims, vocab_size=as_int(self.config.get("vocab_size")))

    @property
    def max_position_embeddings(self) -> int | None:
        """The positions rope is defined for (the decoder's value first), ``None`` when not an integer."""
        return as_int(self.setting("max_position_embeddings"))

    def tie_word_embeddings(self, default: bool = False) -> bool:
        """Whether ``lm_head`` shares ``embed_tokens`` (the decoder's key first, then the wrapper's)."""
        return self.setting("tie_word_embeddings", default) is True

    @property
    def eos_values(self) -> list[Any]:
        """The raw ``eos_token_id`` values of config.json (the wrapper's, then the decoder's)."""
        inner = self.decoder
        return [self.config.get("eos_token_id")] + ([inner.get("eos_token_id")] if inner is not self.config else [])

    @property
    def architectures_stated(self) -> bool:
        """Whether config.json's ``architectures`` is a non-empty list of names (engines pick the
        model class from it; without one vLLM loads a pooling model)."""
        archs = self.config.get("architectures")
        return isinstance(archs, list) and bool(archs) and all(isinstance(a, str) and a for a in archs)

    @property
    def depth_at_top(self) -> bool:
        """Whether config.json states ``num_hidden_layers`` at its top level, not only inside
        ``text_config`` (a converter that reads the wrapper alone needs it there)."""
        return "num_hidden_layers" in self.config

    @property
    def quantization_blocks(self) -> list[dict[str, Any]]:
        """Each ``quantization_config`` object the config carries (the wrapper's, then its
        decoder's); empty when the target is not quantized."""
        levels = [self.config] + ([self.decoder] if self.decoder is not self.config else [])
        return [q for cfg in levels if isinstance(q := cfg.get("quantization_config"), dict)]

    @property
    def served_context(self) -> int | None:
        """The context the target serves: the decoder's ``max_position_embeddings``, or the
        YaRN/rope scaling's ``original_max_position_embeddings * factor`` when that is larger."""
        cfg = self.decoder
        mpe = as_int(cfg.get("max_position_embeddings"))
        scaling = cfg.get("rope_scaling") or cfg.get("rope_parameters")
        if isinstance(scaling, dict):
            orig, factor = as_int(scaling.get("original_max_position_embeddings")), scaling.get("factor")
            if orig and isinstance(factor, (int, float)) and not isinstance(factor, bool) and 1 < factor < 1e6:
                mpe = max(mpe or 0, int(orig * factor))
        return mpe

    def stated(self, key: str) -> list[tuple[Any, str]]:
        """``key``'s raw values where loaders look for a token id, each with its file: the
        decoder's, the wrapper's (config.json), then generation_config.json's."""
        return [(self.decoder.get(key), "config.json"), (self.config.get(key), "config.json"),
                (self.generation_config.get(key), "generation_config.json")]

    @property
    def dense(self) -> bool:
        """Whether the decoder has no experts (none of the MoE keys set): its parameters are then
        counted from its shapes."""
        return not any(self.decoder.get(k) for k in MOE_KEYS)

    @property
    def dtype(self) -> str | None:
        """The dtype the config declares (the decoder's first), if any."""
        return config_dtype(self.decoder) or config_dtype(self.config)

    @property
    def quant_method(self) -> Any:
        """``quantization_config.quant_method`` (the wrapper's block first), ``None`` when unquantized."""
        q = self.config.get("quantization_config") or self.decoder.get("quantization_config")
        return q.get("quant_method") if isinstance(q, dict) else None

    def quant_scheme(self) -> Any:
        """The target's quantization scheme (``None`` when not quantized); a format the runtime
        does not read is one DF180 line (``draftspec.quant.read_scheme``, run when built)."""
        return self.scheme.require()

    def to_json(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "model_type": self.model_type,
            "num_hidden_layers": self.num_hidden_layers,
            "hidden_size": self.hidden_size,
            "vocab_size": self.vocab_size,
            "pad_token_id": self.pad_token_id,
            "text_config": self.text_config_used,
        }


def decoder_setting(config: dict[str, Any], key: str, default: Any = None) -> Any:
    """A target's ``key`` as loaders read it: the decoder's value first, then the wrapper's."""
    inner = decoder_config(config)
    return inner[key] if key in inner else config.get(key, default)


def target_from_config(config: dict[str, Any], *, label: str, where: str) -> TargetSpec:
    """Dimensions from a target config; multimodal wrappers keep them in ``text_config``."""
    inner = decoder_config(config)
    pick = partial(decoder_setting, config)
    archs = config.get("architectures")
    model_type = target_model_type(config)
    decoder_where = f"{where} (text_config)" if inner is not config else where
    return TargetSpec(
        label=label,
        where=where,
        model_type=model_type if isinstance(model_type, str) else None,
        architectures=[a for a in archs if isinstance(a, str)] if isinstance(archs, list) else [],
        num_hidden_layers=pick("num_hidden_layers"),
        hidden_size=pick("hidden_size"),
        vocab_size=pick("vocab_size"),
        pad_token_id=pick("pad_token_id"),
        text_config_used=inner is not config,
        config=config,
        settings=decode_settings(inner, decoder_where, draft=False),
        scheme=_decode_scheme(config, inner, where),
    )


def _decode_scheme(config: dict[str, Any], inner: dict[str, Any], where: str) -> Decoded[Any]:
    """The target's quantization scheme, read once; the format modules are imported only for a
    config with a ``quantization_config`` object (``inspect`` of a plain target never pays for them)."""
    if not any(isinstance(cfg.get("quantization_config"), dict) for cfg in (config, inner)):
        return Decoded(None)
    from dflash_ckpt.draftspec.quant import read_scheme

    return decode(read_scheme, config, where)


def read_target_spec(source: Source) -> TargetSpec:
    config, _ = read_config(source)
    spec = target_from_config(config, label=source.label, where=source.where("config.json"))
    if source.exists("generation_config.json"):
        gen, _ = read_config(source, "generation_config.json")
        spec = spec._replace(generation_config=gen)
    added = added_token_ids(source)  # best effort (DF316, DF320)
    return spec._replace(tokenizer_max_id=max(added) if added else None, tokenizer_added_ids=added)


def fc_taps(inventory: WeightInventory, hidden: int | None) -> int | None:
    """k in ``fc.weight [H, k*H]`` (a ``model.``-style prefix tolerated); ``None`` if unknown."""
    for name, info in inventory.tensors.items():
        if name == "fc.weight" or (name.endswith(".fc.weight") and name.count(".") == 2):
            shape = tuple(info.shape)
            h = hidden if hidden else (shape[0] if len(shape) == 2 else None)
            if len(shape) == 2 and h and shape[0] == h and shape[1] % h == 0 and shape[1] > 0:
                return shape[1] // h
            return None
    return None


def with_layer_ids(spec: DraftSpec, ids: Sequence[int]) -> DraftSpec:
    """``spec`` as if its config held ``ids``: a copy of the parsed config, never the file.

    The ids go where engines read them first (``dflash_config``, or the top level of a config
    without one), and a second copy that would conflict is dropped, so ``DraftSettings.from_spec``
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
