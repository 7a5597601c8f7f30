"""The speculators-native draft format, read as the z-lab form the checks and the runtime know.

speculators (the vLLM project's draft library, 0.7 to 0.9.0) and the drafts it exports or converts
(RedHatAI ``*-speculator.dflash``, ``.dflash2``, ``.dspark``) keep no ``dflash_config``: the
decoder's settings sit under ``transformer_layer_config``, the taps are hidden-state indices
(``aux_hidden_state_layer_ids`` = ``target_layer_ids`` + 1; vLLM's adapter maps them back with
- 1), and ``block_size``, ``mask_token_id``, ``draft_vocab_size``, ``sample_from_anchor`` and
``sliding_window_non_causal`` sit at the top level beside ``speculators_config`` (the proposal's
``speculative_tokens`` and the verifier's name). Facts: shared/ecosystem-2026-12.md sections 1.4
and 2.1 (speculators 0.9.0 ``models/dflash/config.py``, ``core.py``; vLLM
``transformers_utils/configs/speculators/algos.py``).

``native_view`` turns such a config into a superset that also holds the z-lab keys (the raw keys
stay, so the layout and family rules still see them), with where each resolved value came from;
``zlab_steps`` is the same mapping as edits, which ``normalize`` applies, the speculators-only
keys then removed. Pure: reads the dict only, no torch.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Mapping

#: ``speculators_model_type`` values whose drafts are DFlash-backbone drafts.
SPECULATORS_TYPES = ("dflash", "dflash2", "dspark")
#: Where the proposal's draft count is (the layout's second declaration).
SPEC_TOKENS_PATH = "speculators_config.proposal_methods[0].speculative_tokens"
#: The taps' key and how a tap is got from it.
AUX_KEY = "aux_hidden_state_layer_ids"
AUX_RULE = "aux_hidden_state_layer_ids - 1"
#: Keys of the wrapper that describe the wrapper itself, not the decoder, and so win over
#: ``transformer_layer_config``'s.
WRAPPER_KEYS = frozenset({"architectures", "auto_map", "dtype", "torch_dtype", "transformers_version",
                          "tie_word_embeddings", "model_type"})
#: DFlash2's keys: top level in the speculators form, ``dflash_config`` in the z-lab one (vLLM's
#: adapter copies them there, ``algos.py``).
DFLASH2_KEYS = ("conv_kernel_size", "conv_group_size", "selector_rank", "selector_top_k")
#: Keys only the speculators form has, dropped when ``normalize`` writes the z-lab form.
SPECULATORS_ONLY = ("speculators_model_type", "speculators_version", "speculators_config", AUX_KEY,
                    "transformer_layer_config", "auto_map", "sliding_window_non_causal", "max_anchors",
                    "sample_from_anchor", "target_hidden_size")
#: The architecture vLLM's speculators adapter gives each kind (``algos.py``: whatever the file
#: names, except a DSpark draft naming one of ``DSPARK_KEPT``).
ARCHITECTURES = {"dflash": ["DFlashDraftModel"], "dflash2": ["DFlash2DraftModel"], "dspark": ["Qwen3DSparkModel"]}
DSPARK_KEPT = ("Qwen3DSparkModel", "Qwen3OmniDSparkModel")
#: speculators' own default of ``sliding_window_non_causal`` per type (``core.py``).
NON_CAUSAL_DEFAULT = {"dflash": False, "dflash2": True, "dspark": False}


def is_speculators_native(config: Mapping[str, Any]) -> bool:
    """A speculators-native draft: a known ``speculators_model_type``, no ``dflash_config`` object,
    and the format's decoder or taps key."""
    kind = config.get("speculators_model_type")
    return (isinstance(kind, str) and kind in SPECULATORS_TYPES and not isinstance(config.get("dflash_config"), dict)
            and (isinstance(config.get("transformer_layer_config"), dict) or AUX_KEY in config))


@dataclass(frozen=True)
class Step:
    """One edit from the speculators form to the z-lab form: ``op`` is ``set`` or ``remove``."""

    op: str
    path: tuple[str, ...]
    value: Any
    reason: str


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def aux_ids(config: Mapping[str, Any]) -> list[int] | None:
    """``aux_hidden_state_layer_ids`` when it is a list of integers, else ``None``."""
    value = config.get(AUX_KEY)
    if isinstance(value, list) and all(_int(v) is not None for v in value):
        return list(value)
    return None


def speculative_tokens(config: Mapping[str, Any]) -> Any:
    """``speculators_config.proposal_methods[0].speculative_tokens`` (``None`` when not there)."""
    sc = config.get("speculators_config")
    methods = sc.get("proposal_methods") if isinstance(sc, Mapping) else None
    first = methods[0] if isinstance(methods, list) and methods and isinstance(methods[0], Mapping) else None
    return first.get("speculative_tokens") if first is not None else None


def verifier_name(config: Mapping[str, Any]) -> str | None:
    """``speculators_config.verifier.name_or_path`` when it is a non-empty string."""
    sc = config.get("speculators_config")
    ver = sc.get("verifier") if isinstance(sc, Mapping) else None
    name = ver.get("name_or_path") if isinstance(ver, Mapping) else None
    return name if isinstance(name, str) and name else None


def verifier_architectures(config: Mapping[str, Any]) -> list[str]:
    sc = config.get("speculators_config")
    ver = sc.get("verifier") if isinstance(sc, Mapping) else None
    archs = ver.get("architectures") if isinstance(ver, Mapping) else None
    return [a for a in archs if isinstance(a, str)] if isinstance(archs, list) else []


def non_causal(config: Mapping[str, Any]) -> tuple[bool, bool]:
    """``sliding_window_non_causal`` as speculators trains it (its default per type when absent),
    and whether the key is there."""
    raw = config.get("sliding_window_non_causal")
    if isinstance(raw, bool):
        return raw, True
    return NON_CAUSAL_DEFAULT.get(str(config.get("speculators_model_type")), False), False


def zlab_steps(config: Mapping[str, Any], *, anchor_first: bool | None = None) -> list[Step]:
    """The edits that write ``config``'s values where the z-lab form keeps them, then (``remove``
    steps, last) drop the keys only the speculators form has. ``anchor_first`` is the resolved
    block layout (``draftspec.layout``); true writes ``dflash_config.sample_from_anchor``."""
    steps: list[Step] = []
    inner = config.get("transformer_layer_config")
    if isinstance(inner, Mapping):
        for key, value in inner.items():
            if (key in WRAPPER_KEYS and key in config) or key in SPECULATORS_ONLY or key == "dflash_config":
                continue  # the wrapper's own, or a key the z-lab form sets from the wrapper
            if key not in config or config[key] != value:
                steps.append(Step("set", (key,), copy.deepcopy(value), f"from transformer_layer_config.{key}"))
    kind = config.get("speculators_model_type")
    archs = config.get("architectures")
    want = ARCHITECTURES.get(str(kind), [])
    if kind == "dspark" and isinstance(archs, list) and any(a in DSPARK_KEPT for a in archs):
        want = [a for a in archs if a in DSPARK_KEPT]
    if want and archs != want:
        steps.append(Step("set", ("architectures",), want, f"the architecture vLLM's speculators adapter gives a {kind} draft"))
    nested: dict[str, Any] = {}
    reasons: list[str] = []
    for key in ("block_size", "mask_token_id"):
        if key in config:
            nested[key] = config[key]
            reasons.append(f"{key}: the top-level {key}")
    ids = aux_ids(config)
    if ids is not None:
        nested["target_layer_ids"] = [i - 1 for i in ids]
        reasons.append(f"target_layer_ids: {AUX_RULE}")
    elif AUX_KEY in config:
        nested["target_layer_ids"] = config[AUX_KEY]  # not a list of integers: DF110 names it
        reasons.append(f"target_layer_ids: {AUX_KEY} as found (not a list of integers)")
    for key in DFLASH2_KEYS:
        if key in config:
            nested[key] = config[key]
            reasons.append(f"{key}: the top-level {key}")
    if anchor_first:
        nested["sample_from_anchor"] = True
        reasons.append("sample_from_anchor: the resolved block layout (anchor-first)")
    steps.append(Step("set", ("dflash_config",), nested, "the speculators form's DFlash keys, where the z-lab "
                      "readers look (" + "; ".join(reasons) + ")"))
    snc, _ = non_causal(config)
    if snc:
        steps.append(Step("set", ("is_causal",), False, "sliding_window_non_causal is true: no layer is causal"))
    for key in SPECULATORS_ONLY:
        if key in config and not (kind == "dspark" and key == "sample_from_anchor"):  # DSpark paths read it there
            steps.append(Step("remove", (key,), None, "a speculators-only key (the z-lab form has none)"))
    return steps


@dataclass(frozen=True)
class NativeView:
    """A speculators-native config as the checks read it (``config``: the raw keys plus the z-lab
    ones) and where each resolved DFlash key came from (``provenance``)."""

    raw: dict[str, Any]
    config: dict[str, Any]
    provenance: dict[str, str] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        return str(self.raw.get("speculators_model_type"))

    @property
    def version(self) -> str | None:
        v = self.raw.get("speculators_version")
        return v if isinstance(v, str) else None


def native_view(config: Mapping[str, Any]) -> NativeView:
    """The z-lab keys added to a copy of ``config`` (nothing removed) and their provenance."""
    view = copy.deepcopy(dict(config))
    for step in zlab_steps(config):
        if step.op == "set":
            view[step.path[0]] = step.value
    provenance = {"block_size": "block_size (top level)", "mask_token_id": "mask_token_id (top level)",
                  "target_layer_ids": AUX_RULE,
                  "num_target_layers": "not in the speculators format (the verifier's num_hidden_layers)"}
    for key in ("block_size", "mask_token_id"):
        if key not in config:
            provenance[key] = "missing"
    if AUX_KEY not in config:
        provenance["target_layer_ids"] = "missing"
    return NativeView(raw=copy.deepcopy(dict(config)), config=view, provenance=provenance)
