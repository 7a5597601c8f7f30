"""z-lab's MLX port, ``dflash/model_mlx.py``: DFlash v1 drafts as ``load_draft`` at
c2489aa8e9446ffb4f6591060b3d696305754f8e reads them (``cfg[...]`` on the top level for
``rope_theta``, ``max_position_embeddings``, ``block_size``, ``num_target_layers``, ``head_dim``;
``dflash_config`` for the taps and mask id); DFlash2 drafts as main at
0a7587c04af47b56024ef80f44c0926e795a540b reads them (an adapter per ``architectures[0]``,
``block_size`` nested then top, default 16). Main dropped the v1 adapter; pin the older commit
for v1 drafts. 1+N only."""

from __future__ import annotations

from dflash_ckpt.checks.config import show_value
from dflash_ckpt.checks.engines.reading import (NESTED_ONLY, NESTED_THEN_TOP, TOP_ONLY, Reading, Verdict,
                                                one_plus_n_path)
from dflash_ckpt.checks.engines.record import Engine
from dflash_ckpt.checks.engines.versions import Versions
from dflash_ckpt.draftspec.specs import DraftSpec, TargetSpec

#: The block size MLX ports run when they do not find one.
MLX_DEFAULT_BLOCK = 16


def top_required(r: Reading, keys: tuple[str, ...]) -> None:
    """A problem naming the keys the loader reads as ``cfg[key]`` and the config lacks."""
    missing = [k for k in keys if not r.spec.states(k)]
    if missing:
        r.problems.append(f"needs top-level {', '.join(missing)} (read as cfg[key])")


def judge(spec: DraftSpec, target: TargetSpec | None) -> Verdict:
    """v1 at c2489aa8, DFlash2 at 0a7587c0 (module docstring)."""
    r = Reading(spec)
    # The shape keys every config has (hidden_size, ...) are DF142's; here, what the loader reads
    # with cfg[key] that drafts differ on.
    shapes = ("head_dim",)
    r.read("mask_token_id", NESTED_ONLY)
    r.read("target_layer_ids", NESTED_ONLY, kind="list")
    if spec.generation == "DFlash2":
        archs = spec.architectures
        if not archs or archs[0] != "DFlash2DraftModel":
            r.problems.append(f"picks its loader by architectures[0] and has none for {show_value(archs[0]) if archs else 'nothing'}")
        top_required(r, shapes)
        if r.read("block_size", NESTED_THEN_TOP, required=False) is None and not spec.keys["block_size"].present:
            r.problems.append(f"block_size is absent, so it runs at its default {MLX_DEFAULT_BLOCK}")
        return r.verdict()
    top_required(r, (*shapes, "rope_theta"))
    r.read("block_size", TOP_ONLY)
    r.read("num_target_layers", TOP_ONLY)
    lt = spec.layer_type_list
    if isinstance(lt, list) and "sliding_attention" in lt:
        r.notes.append("its v1 loader runs every layer with full attention (sliding_window is not applied)")
    return r.verdict()


ENGINE = Engine("zlab-mlx", "z-lab MLX", judge, one_plus_n_path("its DFlash loader"),
                versions=Versions("git c2489aa", None, "read: v1 drafts there, DFlash2 at git 0a7587c"))
