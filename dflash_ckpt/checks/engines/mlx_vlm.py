"""mlx-vlm 0.7.10, ``DFlashConfig.from_dict`` (read in its wheel, shared/DESIGN.md section 10
corrections): the mask id and taps from ``dflash_config``, ``block_size`` from the top level only
(a nested one is ignored; its DFlash2 config reads it nested), and every key it does not find
silently filled with Qwen3.5-9B's values (block 16, mask 248070, taps [1, 8, 15, 22, 29],
rope_theta 1e7): the draft then runs with another model's mask, taps or block and accepts little,
with no error (Rapid-MLX#2195, omlx#827, omlx#2557). Its dspark drafter reads the top-level
``sample_from_anchor``."""

from __future__ import annotations

from typing import Any

from dflash_ckpt.checks.engines.reading import (NESTED_ONLY, NESTED_THEN_TOP, TOP_ONLY, EnginePath, Reading, Verdict,
                                                dspark_from_anchor, one_plus_n)
from dflash_ckpt.checks.engines.record import Engine
from dflash_ckpt.checks.engines.versions import Versions
from dflash_ckpt.checks.engines.zlab_mlx import MLX_DEFAULT_BLOCK
from dflash_ckpt.draftspec.siblings import DSPARK
from dflash_ckpt.draftspec.specs import ABSENT, DraftSpec, TargetSpec, as_int

DSPARK_LAUNCH = "its dspark drafter"
#: What ``DFlashConfig.from_dict`` silently fills a missing key with (Qwen3.5-9B's values).
MLX_VLM_DEFAULTS: dict[str, Any] = {"block_size": 16, "mask_token_id": 248070, "target_layer_ids": [1, 8, 15, 22, 29],
                                    "rope_theta": 10_000_000}


def _rope_theta(spec: DraftSpec) -> bool:
    params = spec.top("rope_parameters")
    return spec.states("rope_theta") or (isinstance(params, dict) and "rope_theta" in params)


def judge(spec: DraftSpec, target: TargetSpec | None) -> Verdict:
    """What it reads, and each default it would run with instead of the draft's value."""
    r = Reading(spec)
    for key in ("mask_token_id", "target_layer_ids"):
        if r.read(key, NESTED_ONLY, required=False, kind="list" if key == "target_layer_ids" else "int") is None:
            if spec.declared(key).nested is ABSENT:
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


def path(spec: DraftSpec) -> EnginePath:
    """Its dspark drafter for a DSpark draft; its DFlash loader (1+N) otherwise."""
    if spec.family == DSPARK:
        return dspark_from_anchor(spec, DSPARK_LAUNCH)
    return one_plus_n(spec, "its DFlash loader")


ENGINE = Engine("mlx-vlm", "mlx-vlm 0.7.10", judge, path, dspark_launch=DSPARK_LAUNCH,
                versions=Versions("0.7.10", "0.7.10", "read in its wheel"))
