"""Findings of a speculators-native draft (DF170-DF175, ``rule_tables/speculators``): where its
values came from and that no one measured them, a layout only ``speculative_tokens`` declares,
taps that do not fit the fc or the target (the converters' traps), vLLM's causal override, and a
verifier other than the target. The format itself: ``draftspec.speculators_format``."""

from __future__ import annotations

import shlex
from dflash_ckpt.checks.config import show_value
from dflash_ckpt.draftspec.layer_kinds import FULL, SLIDING
from dflash_ckpt.draftspec.layout import ANCHOR_FIRST
from dflash_ckpt.draftspec.specs import DraftSpec, TargetSpec, as_int, fc_taps
from dflash_ckpt.draftspec.speculators_format import (AUX_KEY, AUX_RULE, SPEC_TOKENS_PATH, aux_ids, non_causal,
                                                      speculative_tokens, verifier_architectures, verifier_name)
from dflash_ckpt.rules import Finding, finding


def probe_command(spec: DraftSpec, target_label: str | None) -> str:
    """The one command that measures a draft's taps and both block layouts."""
    target = shlex.quote(target_label) if target_label else "TARGET"
    return f"dflash-ckpt probe-taps {shlex.quote(spec.label)} --target {target}"


def check_speculators_format(spec: DraftSpec, target: TargetSpec | None = None) -> list[Finding]:
    """Every DF17x finding of a speculators-native draft (none for any other draft)."""
    native = spec.native
    if native is None:
        return []
    raw, w = native.raw, spec.where
    ids = spec.target_layer_ids
    layout = spec.block_layout
    version = native.version or "unknown"
    out = [finding(
        "DF170",
        f"a speculators-native {native.kind} draft (speculators_version {version}): taps {show_value(ids)} = "
        f"{AUX_RULE}, block_size and mask_token_id from the top level, the decoder from transformer_layer_config, "
        f"layout {layout.layout} from {layout.source}; converters and exporters write these without measuring "
        "them (speculators 0.9.0's converter writes sample_from_anchor false for an anchor-first draft, "
        "third-party ones drop the + 1 of the taps): `" + probe_command(spec, target.label if target else None)
        + "` measures the taps and both layouts",
        path=w, key=AUX_KEY)]
    if "sample_from_anchor" not in raw and layout.source == SPEC_TOKENS_PATH:
        k = speculative_tokens(raw)
        out.append(finding(
            "DF171",
            f"the block layout ({layout.layout}) is declared only by {SPEC_TOKENS_PATH} {k} (block_size "
            f"{spec.block_size}); vLLM's speculators adapter reads sample_from_anchor alone (absent: false, 1+N)"
            + (", so it runs this draft one position off" if layout.layout == ANCHOR_FIRST else "")
            + f"; add \"sample_from_anchor\": {str(layout.layout == ANCHOR_FIRST).lower()} at the top level",
            path=w, key="sample_from_anchor"))
    out += _tap_findings(spec, target)
    out += _causal_override(spec)
    if target is not None:
        out += _verifier(spec, target)
    return out


def _tap_findings(spec: DraftSpec, target: TargetSpec | None) -> list[Finding]:
    """DF172: aux ids against the fc width (the converter's last-layer rule) and the verifier's
    depth; an aux id 0 (the copied-without-+1 trap's mark)."""
    assert spec.native is not None
    aux = aux_ids(spec.native.raw)
    if not aux:
        return []
    w = spec.where
    depth = as_int(target.num_hidden_layers) if target is not None else None
    out: list[Finding] = []
    k = fc_taps(spec.weights, spec.dims.hidden_size) if spec.weights is not None else None
    if k is not None and k == len(aux) + 1:
        last = f" ({depth}: the verifier's last layer)" if depth is not None and depth not in aux else ""
        out.append(finding(
            "DF172",
            f"fc.weight holds {k} taps but {AUX_KEY} lists {len(aux)} {show_value(aux)}: speculators' converter "
            f"drops an aux id equal to the verifier's depth{last}, so the draft runs without its last tap; "
            f"restore it ({show_value(sorted(aux + [depth]) if depth is not None and depth not in aux else aux + ['L'])})",
            path=w, key=AUX_KEY))
    if depth is not None:
        beyond = [a for a in aux if a > depth]
        if beyond:
            out.append(finding(
                "DF172",
                f"{AUX_KEY} {show_value(aux)} holds {show_value(beyond)} above the verifier's depth {depth} "
                f"(aux ids are hidden-state indices 0..{depth}); no layer of the target has it",
                path=w, key=AUX_KEY))
    if 0 in aux and spec.family is None:
        out.append(finding(
            "DF175",
            f"{AUX_KEY} {show_value(aux)} holds 0, a tap on the embedding output (target_layer_ids -1): "
            "a converter that copied z-lab target_layer_ids without the + 1 writes this, every tap one layer "
            "early; measure them: `" + probe_command(spec, target.label if target else None) + "`",
            path=w, key=AUX_KEY))
    return out


def full_layers(spec: DraftSpec) -> int:
    """How many draft layers are full attention (trained bidirectional within the block)."""
    lt = spec.layer_type_list
    if isinstance(lt, list):
        return sum(1 for t in lt if t == FULL)
    return spec.dims.num_hidden_layers or 0 if spec.top("use_sliding_window") is not True else 0


def causal_override(spec: DraftSpec) -> int:
    """The number of full-attention layers vLLM's speculators adapter turns causal (0: none): for a
    DFlash or DFlash2 export (``update_dflash``; DSpark's adapter sets no causality) it maps
    ``sliding_window_non_causal: false`` to ``dflash_config.causal: true``, which
    ``qwen3_dflash.py`` applies to every layer."""
    if spec.native is None or spec.native.kind not in ("dflash", "dflash2"):
        return 0
    if spec.native.raw.get("sliding_window_non_causal") is not False:
        return 0
    return full_layers(spec)


def absent_key_sliding(spec: DraftSpec) -> int:
    """The sliding layers vLLM runs bidirectional though speculators trained them causal: the key is
    absent, which speculators reads as its DFlash default (false: causal sliding windows) and vLLM's
    adapter as true (``config_dict.get("sliding_window_non_causal", True)``)."""
    if spec.native is None or spec.native.kind != "dflash" or "sliding_window_non_causal" in spec.native.raw:
        return 0
    lt = spec.layer_type_list
    return sum(1 for t in lt if t == SLIDING) if isinstance(lt, list) else 0


def _causal_override(spec: DraftSpec) -> list[Finding]:
    n, sliding = causal_override(spec), absent_key_sliding(spec)
    out: list[Finding] = []
    if n:
        out.append(finding(
            "DF173",
            f"sliding_window_non_causal is false: vLLM's speculators adapter maps it to dflash_config.causal: true "
            f"and qwen3_dflash.py then runs every layer causal, the {n} full-attention layer(s) trained "
            "bidirectional within the block included: vLLM serves it with fewer drafts accepted and no error; "
            f"`dflash-ckpt normalize {shlex.quote(spec.label)} OUT` writes the z-lab form vLLM runs as trained",
            path=spec.where, key="sliding_window_non_causal"))
    if sliding:
        out.append(finding(
            "DF173",
            f"sliding_window_non_causal is absent: speculators trains a DFlash draft's {sliding} sliding layer(s) "
            "causal when it is (its default, false), but vLLM's speculators adapter reads the absent key as true "
            "and runs them bidirectional; write \"sliding_window_non_causal\": false, or serve the z-lab form "
            f"`dflash-ckpt normalize {shlex.quote(spec.label)} OUT` writes",
            path=spec.where, key="sliding_window_non_causal"))
    return out


def _hub_id(name: str) -> bool:
    return name.count("/") == 1 and not name.startswith((".", "/", "~")) and " " not in name


def _verifier(spec: DraftSpec, target: TargetSpec) -> list[Finding]:
    """DF174: the verifier's Hub id against the target's, its architectures against the target's."""
    assert spec.native is not None
    raw, out = spec.native.raw, []
    name = verifier_name(raw)
    label = target.label.rstrip("/")
    if name and _hub_id(name) and _hub_id(label.split("@")[0]) and name.lower() != label.split("@")[0].lower():
        out.append(finding("DF174", f"speculators_config.verifier.name_or_path is {show_value(name)}, but the target "
                                    f"is {label}", path=spec.where, key="speculators_config.verifier"))
    th, want = as_int(raw.get("target_hidden_size")), as_int(target.hidden_size)
    if th is not None and want is not None and th != want:
        out.append(finding("DF174", f"target_hidden_size is {th} (the verifier's hidden size the fc reads), but the "
                                    f"target's hidden_size is {want}", path=spec.where, key="target_hidden_size"))
    archs = verifier_architectures(raw)
    if archs and target.architectures and not set(archs) & set(target.architectures):
        out.append(finding("DF174", f"speculators_config.verifier.architectures is {show_value(archs)}, but the "
                                    f"target's are {show_value(target.architectures)}",
                           path=spec.where, key="speculators_config.verifier"))
    return out


__all__ = ["causal_override", "check_speculators_format", "non_causal", "probe_command"]
