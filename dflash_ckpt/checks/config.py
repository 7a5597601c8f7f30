"""Config checks (DF1xx): keys present, resolvable, typed, consistent and in range."""

from __future__ import annotations

import shlex
from collections import Counter
from typing import Any

from dflash_ckpt.sources.jsonfile import json_type
from dflash_ckpt.rules import Finding, finding
from dflash_ckpt.draftspec.decoder_dims import too_large_finding
from dflash_ckpt.draftspec.siblings import DSPARK
from dflash_ckpt.limits import MAX_LAYERS, MAX_LIST_LEN
from dflash_ckpt.draftspec.specs import DFLASH2_KEYS, DFLASH_KEYS, NESTED, TOP_LEVEL, DraftSpec
from dflash_ckpt.draftspec.values import ABSENT, KEY_BOUNDS, as_int, as_int_list, show_value


def key_path(place: str, key: str) -> str:
    return f"dflash_config.{key}" if place == NESTED else key


def check_config(spec: DraftSpec, target_label: str | None = None) -> list[Finding]:
    """The config's own findings; ``target_label`` (the pair's target, when given) goes into the
    probe-taps command DF101 suggests, instead of a TARGET placeholder."""
    out: list[Finding] = []
    w = spec.where
    dc = spec.top("dflash_config", ABSENT)
    if dc is not ABSENT and not isinstance(dc, dict):
        out.append(finding("DF104", f"key 'dflash_config' must be an object, found {json_type(dc)}",
                           path=w, key="dflash_config"))

    for key in ("block_size", "mask_token_id", "target_layer_ids"):
        if not spec.keys[key].present and not dspark_alias(spec, key):
            measure = (f"; or measure it: `dflash-ckpt probe-taps {shlex.quote(spec.label)} --target {shlex.quote(target_label) if target_label else 'TARGET'} --write OUT`"
                       if key == "target_layer_ids" else "")
            out.append(finding(
                "DF101",
                f"key '{key}' is in neither dflash_config nor the top level; supply it with "
                f"`dflash-ckpt normalize --{key.replace('_', '-')} ...` (never guessed){measure}", path=w, key=key,
            ))
    if not spec.keys["num_target_layers"].present and spec.native is None:  # the format has no such key
        out.append(finding(
            "DF102",
            "key 'num_target_layers' is missing; add the target's num_hidden_layers "
            "(`dflash-ckpt normalize --num-target-layers N`)", path=w, key="num_target_layers",
        ))
    out += conflict_findings(w, spec.keys, DFLASH_KEYS, "engines disagree on which wins. Run `dflash-ckpt "
                             "normalize --prefer nested` or `--prefer top-level`")

    for key in ("block_size", "mask_token_id", "num_target_layers"):
        for place in (NESTED, TOP_LEVEL):
            raw = spec.keys[key].at(place)
            if raw is not ABSENT and as_int(raw) is None:
                out.append(finding(
                    "DF104",
                    f"key '{key_path(place, key)}' must be an integer, found {json_type(raw)} {show_value(raw)}",
                    path=w, key=key_path(place, key),
                ))

    out += _check_bounds(spec)
    out += _check_layer_ids(spec)
    block = spec.block_size
    if block is not None and block < 2:
        out.append(finding("DF120", f"key 'block_size' is {block}; it must be at least 2 (anchor plus drafts)",
                           path=w, key="block_size"))
    mask = spec.mask_token_id
    if mask is not None:
        vocab = spec.dims.vocab_size
        if mask < 0:
            out.append(finding("DF121", f"key 'mask_token_id' is {mask}; it must be a non-negative token id",
                               path=w, key="mask_token_id"))
        elif vocab is not None and mask >= vocab:
            out.append(finding(
                "DF122",
                f"key 'mask_token_id' {mask} is not below vocab_size {vocab}; it must be a row "
                "of the target's embedding table", path=w, key="mask_token_id",
            ))
    out += spec.problems["layer_types"]  # DF130-DF133, judged when the spec was built

    for key in ("output_multiplier", "final_logit_softcapping"):
        rk = spec.extra_keys[key]
        if rk.top is not ABSENT and rk.top is not None and rk.nested is ABSENT:
            out.append(finding(
                "DF134",
                f"key '{key}' ({show_value(rk.top)}) is only at the top level; SGLang reads it only "
                "from dflash_config and serves the draft without it (`dflash-ckpt normalize` copies it)",
                path=w, key=key,
            ))
    if spec.generation == "unknown":
        archs = show_names(spec.architectures) if spec.architectures else "nothing"
        out.append(finding(
            "DF140",
            f"key 'architectures' is {archs}, not DFlashDraftModel or DFlash2DraftModel; "
            "checking the DFlash v1 layout", path=w, key="architectures",
        ))
    if spec.states("auto_map"):
        out.append(finding("DF141", "key 'auto_map' names remote code; it was not run (and never is)",
                           path=w, key="auto_map"))
    out += spec.problems["dims"]  # DF142, judged when the spec was built
    for key in ("dtype", "torch_dtype"):
        dtype = spec.top(key)
        if isinstance(dtype, str) and dtype not in ("bfloat16", "auto"):
            out.append(finding(
                "DF143",
                f"key '{key}' is {show_value(dtype)}; DFlash drafts run in bfloat16 (fp16 collapses "
                "acceptance on Qwen3 hidden-state outliers)", path=w, key=key,
            ))
            break
    return out


def _check_bounds(spec: DraftSpec) -> list[Finding]:
    """DF145 for every number past ``KEY_BOUNDS``: the spec treats those as unknown, so the checks
    that would use them are skipped rather than sized by them."""
    w = spec.where
    out: list[Finding] = []
    for key in ("block_size", "mask_token_id", "num_target_layers", *DFLASH2_KEYS):
        rk = spec.keys.get(key) or spec.extra_keys[key]
        for place in (NESTED, TOP_LEVEL):
            v = as_int(rk.at(place))
            if v is not None and abs(v) > KEY_BOUNDS[key]:
                out.append(too_large_finding(w, key_path(place, key), v, KEY_BOUNDS[key]))
    out += spec.problems["dims_bounds"]
    window = spec.sliding_window
    if window is not None and window > KEY_BOUNDS["sliding_window"]:
        out.append(too_large_finding(w, "sliding_window", window, KEY_BOUNDS["sliding_window"]))
    rk = spec.keys["target_layer_ids"]
    value = rk.value
    if isinstance(value, list):
        path = key_path(rk.source, "target_layer_ids")
        if len(value) > MAX_LIST_LEN:
            out.append(too_large_finding(w, path, value, MAX_LIST_LEN, f" ({len(value):,} entries)"))
        elif (ids := as_int_list(value)) is not None and any(abs(i) > MAX_LAYERS for i in ids):
            big = next(i for i in ids if abs(i) > MAX_LAYERS)
            out.append(too_large_finding(w, path, value, MAX_LAYERS, f" (holds {show_value(big)})"))
    lt = spec.layer_type_list
    if isinstance(lt, list) and len(lt) > MAX_LIST_LEN:
        out.append(too_large_finding(w, "layer_types", lt, MAX_LIST_LEN, f" ({len(lt):,} entries)"))
    return out


def _check_layer_ids(spec: DraftSpec) -> list[Finding]:
    rk = spec.keys["target_layer_ids"]
    if not rk.present:
        return []
    w = spec.where
    path = key_path(rk.source, "target_layer_ids")
    ids = as_int_list(rk.value)
    if ids is None:
        return [finding("DF110", f"key '{path}' must be a list of integers, found {json_type(rk.value)} {show_value(rk.value)}",
                        path=w, key=path)]
    if not ids:
        return [finding("DF111", f"key '{path}' is empty; restore the trained tap layers", path=w, key=path)]
    if spec.target_layer_ids is None:
        return []  # DF145: too long, or ids no target has; nothing below is meaningful
    out: list[Finding] = []
    dupes = sorted(i for i, n in Counter(ids).items() if n > 1)
    if dupes:
        out.append(finding("DF113", f"key '{path}' repeats layer(s) {show_value(dupes)}; each tap must be distinct",
                           path=w, key=path))
    if any(b <= a for a, b in zip(ids, ids[1:])) and not (dupes and ids == sorted(ids)):
        out.append(finding(
            "DF112",
            f"key '{path}' {show_value(ids)} is not strictly increasing; features are concatenated in "
            "this order, restore the trained order", path=w, key=path,
        ))
    depth = spec.num_target_layers
    bad = [i for i in ids if i < -1 or (depth is not None and i >= depth)]  # -1: the embedding output (DeepSpec)
    if bad:
        hint = ""
        if depth is not None and max(ids) == depth and min(ids) >= 1:
            hint = (f"; {depth} is the target's depth, so these look like hidden_states indices "
                    f"(i+1, vLLM/GGUF convention): subtract 1 to get {show_value([i - 1 for i in ids])}")
        rng = f"-1..{depth - 1} (-1: the embedding output)" if depth is not None else "-1 or above"
        out.append(finding("DF114", f"key '{path}' has {show_value(bad)} outside {rng} (num_target_layers {depth}){hint}",
                           path=w, key=path))
    return out


def show_names(names: list[str], limit: int = 4) -> str:
    """Names (``architectures``) as names, the way a tensor name is shown: quoted with ``repr``,
    so a control character reads as the same visible escape ``errors.inert`` writes, and shortened
    (the first ``limit`` of them, each cut at 80 characters) so a hostile list stays one line."""
    shown = []
    for name in names[:limit]:
        text = repr(name[:80])
        shown.append(text if len(name) <= 80 else text[:-1] + "..." + text[-1])
    more = f", and {len(names) - limit:,} more" if len(names) > limit else ""
    return "[" + ", ".join(shown) + more + "]"


def conflict_findings(where: str, keys: dict[str, Any], names: Any, fix: str) -> list[Finding]:
    """DF103 for each of ``names`` whose ``dflash_config`` and top-level values disagree; ``fix``
    ends the message (the v1 keys and the DFlash2 keys are fixed differently)."""
    return [
        finding("DF103", f"key '{key}' is {show_value(keys[key].nested)} in dflash_config but "
                         f"{show_value(keys[key].top)} at the top level; {fix}", path=where, key=key)
        for key in names if keys[key].conflict
    ]


#: The DSpark spelling of a DFlash key (vLLM's DSpark path reads it when the DFlash name is absent).
DSPARK_ALIASES = {"block_size": "dspark_block_size", "target_layer_ids": "dspark_target_layer_ids",
                  "mask_token_id": "dspark_noise_token_id"}


def dspark_alias(spec: DraftSpec, key: str) -> bool:
    """A DSpark draft gives ``key`` under its DSpark name instead (not DF101's)."""
    return spec.family == DSPARK and spec.dspark(DSPARK_ALIASES[key]) is not None
