"""DFlash2-only checks: the four DFlash2 keys (DF146) and the codebook names (DF224).

The DFlash2 tensors' names and shapes are part of ``spec.tensor_layout.expected_tensors``, so
``checks.weights`` already reports them missing (DF212), misshapen (DF213) or unexpected
(DF214). What is left for here: the keys those shapes come from, which engines read as required
integers (``int(dflash_config["conv_kernel_size"])`` in vLLM and z-lab), and the one naming
slip a re-save makes: codebooks written as ``nn.Embedding``s, with a ``.weight`` suffix the
published files do not have.
"""

from __future__ import annotations

from dflash_ckpt.checks.config import conflict_findings, show_value
from dflash_ckpt.rules import Finding, finding
from dflash_ckpt.sources.jsonfile import json_type
from dflash_ckpt.draftspec.specs import DFLASH2_KEYS, DraftSpec, as_int

CODEBOOKS = ("candidate_selector.predecessor_codebook", "candidate_selector.successor_codebook")


def check_dflash2_config(spec: DraftSpec) -> list[Finding]:
    """DF146: each DFlash2 key present and a positive integer, ``conv_group_size`` dividing
    ``hidden_size``, ``selector_top_k`` at most ``vocab_size``; DF103 for a nested/top conflict."""
    if spec.generation != "DFlash2":
        return []
    w = spec.where
    vals: dict[str, int] = {}
    out: list[Finding] = conflict_findings(w, spec.extra_keys, DFLASH2_KEYS, "engines disagree on which wins, "
                                                                          "keep the trained value in dflash_config")
    for key in DFLASH2_KEYS:
        rk = spec.extra_keys[key]
        if not rk.present:
            out.append(finding(
                "DF146",
                f"key 'dflash_config.{key}' is missing; a DFlash2 draft needs it (it fixes the "
                "shapes of its conv or selector tensors), restore it from the published config",
                path=w, key=f'dflash_config.{key}',
            ))
            continue
        val = as_int(rk.value)
        if val is None or val < 1:
            out.append(finding(
                "DF146",
                f"key 'dflash_config.{key}' must be a positive integer, found {json_type(rk.value)} "
                f"{show_value(rk.value)}; restore it from the published config", path=w, key=f'dflash_config.{key}',
            ))
            continue
        vals[key] = val
    h, vocab = spec.dims.hidden_size, spec.dims.vocab_size
    g = vals.get("conv_group_size")
    if g is not None and h is not None and h % g:
        out.append(finding(
            "DF146",
            f"key 'dflash_config.conv_group_size' is {g}, which does not divide hidden_size {h}; "
            "the conv has one coefficient per group of conv_group_size channels (16 in published drafts)",
            path=w, key="dflash_config.conv_group_size",
        ))
    k = vals.get("selector_top_k")
    if k is not None and vocab is not None and k > vocab:
        out.append(finding(
            "DF146",
            f"key 'dflash_config.selector_top_k' is {k}, more than vocab_size {vocab}; the selector "
            "re-ranks the top-k of the vocabulary (16 in published drafts)", path=w, key="dflash_config.selector_top_k",
        ))
    return out


def check_dflash2_weights(spec: DraftSpec) -> list[Finding]:
    """DF224: a codebook stored as ``...codebook.weight`` (under any prefix, DF216's business)."""
    if spec.generation != "DFlash2" or spec.weights is None:
        return []
    names = list(spec.weights.tensors)
    out = []
    for cb in CODEBOOKS:
        if any(n.endswith(cb + ".weight") for n in names) and not any(n.endswith(cb) for n in names):
            out.append(finding(
                "DF224",
                f"tensor '{cb}.weight' should be named '{cb}': published DFlash2 files "
                "store the codebooks without '.weight', and engines look them up by that name; rename it",
                path=spec.label,
            ))
    return out
