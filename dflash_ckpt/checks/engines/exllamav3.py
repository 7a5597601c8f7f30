"""exllamav3 1.6.5 (its wheel, ``exllamav3/architecture/dflash.py``; shared/ecosystem-2026-12.md
section 1.5): ``block_size`` top level then nested (``:77``), mask id and taps nested then top
(``:67-68``); it also applies ``attention_sink_bias``, ``attention_value_scale`` and ``is_causal``
(``checks.acceptance``) and a learned ``mask_embedding`` tensor (``:97-99``, in place of the
target's embedding row for the mask id). Taps: every ``target_layer_ids`` entry plus ``tap_shift``
(``dflash_config.tap_shift`` then the top level, ``:73``), default 1 for ``DFlashDraftModel``
(``:23-26``: "the original DFlash release needs +1 (determined empirically)") and 0 for
``DFlash2DraftModel`` (``dflash2.py:43``), in its indexing where an index is a layer's output.
Loads DFlash2 (``dflash2.py``) and Laguna (``dflash_laguna.py``, raw taps) drafts. It reads no
layout key: 1+N only."""

from __future__ import annotations

from dflash_ckpt.checks.engines.reading import NESTED_THEN_TOP, TOP_THEN_NESTED, Reading, Verdict, one_plus_n_path
from dflash_ckpt.checks.engines.record import Engine
from dflash_ckpt.checks.engines.versions import Versions
from dflash_ckpt.draftspec.siblings import LAGUNA
from dflash_ckpt.draftspec.specs import ABSENT, NESTED, TOP_LEVEL, DraftSpec, TargetSpec, as_int, resolve_key

#: exllamav3's default ``tap_shift`` per generation (``dflash.py:26``, ``dflash2.py:43``).
DEFAULT_TAP_SHIFT = {"DFlash2": 0}
TAP_SHIFT_DEFAULT = 1


def tap_shift(spec: DraftSpec) -> tuple[int | None, str]:
    """``(shift, where)``: ``dflash_config.tap_shift``, else the top-level one, else the default
    of the draft's generation; ``None`` when the value found is not an integer."""
    rk = resolve_key(spec.config, "tap_shift")
    for place, name in ((NESTED, "dflash_config.tap_shift"), (TOP_LEVEL, "tap_shift")):
        raw = rk.at(place)
        if raw is not ABSENT:
            return as_int(raw), name
    return DEFAULT_TAP_SHIFT.get(spec.generation, TAP_SHIFT_DEFAULT), "its default"


def judge(spec: DraftSpec, target: TargetSpec | None) -> Verdict:
    """``block_size`` top level then nested; mask id and taps nested then top level; the taps
    shifted by ``tap_shift``."""
    r = Reading(spec)
    r.read("block_size", TOP_THEN_NESTED)
    r.read("mask_token_id", NESTED_THEN_TOP)
    ids = r.read("target_layer_ids", NESTED_THEN_TOP, kind="list")
    if spec.family != LAGUNA:  # dflash_laguna.py takes the raw ids
        shift, where = tap_shift(spec)
        if shift is None:
            r.problems.append(f"{where} is not an integer (its config reader raises)")
        elif ids:
            taps = [int(i) + shift for i in ids]
            depth = as_int(target.num_hidden_layers) if target is not None else None
            if depth is not None and any(t >= depth or t < 0 for t in taps):
                r.problems.append(f"taps target_layer_ids + {shift} ({where}) = {taps} leave the target's "
                                  f"{depth} layers")
            elif where != "its default":  # the default (+1 for DFlash v1) is docs/engines.md's to say
                r.notes.append(f"taps target_layer_ids + {shift} ({where})")
    return r.verdict()


ENGINE = Engine("exllamav3", "exllamav3", judge, one_plus_n_path("its DFlash loader"), families=frozenset({LAGUNA}),
                versions=Versions("1.6.5", "1.6.5", "read in its wheel"),
                speculators_fact="exllamav3 1.6.5 architecture/dflash.py reads target_layer_ids nested then top level, "
                                 "never aux_hidden_state_layer_ids or transformer_layer_config")
