"""exllamav3 1.6.5 (its wheel, ``exllamav3/architecture/dflash.py``; shared/ecosystem-2026-12.md
section 1.5): ``block_size`` top level then nested (``:77``), mask id and taps nested then top
(``:67-68``); it also applies ``attention_sink_bias``, ``attention_value_scale`` and ``is_causal``
(``checks.acceptance``) and a learned ``mask_embedding`` tensor (``:97-99``, in place of the
target's embedding row for the mask id). Taps: every ``target_layer_ids`` entry plus ``tap_shift``
(``dflash_config.tap_shift`` then the top level, ``:73``), default 1 for ``DFlashDraftModel``
(``:23-26``: "the original DFlash release needs +1 (determined empirically)") and 0 for
``DFlash2DraftModel`` (``dflash2.py:43``), in its indexing where an index is a layer's output.
Loads DFlash2 (``dflash2.py``) and Laguna (``dflash_laguna.py``, raw taps) drafts. It reads no
layout key: 1+N only. Its config classes assert the architecture is theirs, read the dimensions
typed, and assert unique taps and DFlash2's sizes (``config_problems``; tests/test_engine_parser_judges.py
runs them)."""

from __future__ import annotations

from dflash_ckpt.checks.config import show_value
from dflash_ckpt.checks.engines.reading import NESTED_THEN_TOP, TOP_THEN_NESTED, Reading, Verdict, one_plus_n_path
from dflash_ckpt.checks.engines.record import Engine
from dflash_ckpt.checks.engines.versions import Versions
from dflash_ckpt.draftspec.siblings import LAGUNA
from dflash_ckpt.draftspec.specs import ABSENT, NESTED, TOP_LEVEL, DraftSpec, TargetSpec, as_int

#: exllamav3's default ``tap_shift`` per generation (``dflash.py:26``, ``dflash2.py:43``).
DEFAULT_TAP_SHIFT = {"DFlash2": 0}
TAP_SHIFT_DEFAULT = 1


def tap_shift(spec: DraftSpec) -> tuple[int | None, str]:
    """``(shift, where)``: ``dflash_config.tap_shift``, else the top-level one, else the default
    of the draft's generation; ``None`` when the value found is not an integer."""
    rk = spec.declared("tap_shift")
    for place, name in ((NESTED, "dflash_config.tap_shift"), (TOP_LEVEL, "tap_shift")):
        raw = rk.at(place)
        if raw is not ABSENT:
            return as_int(raw), name
    return DEFAULT_TAP_SHIFT.get(spec.generation, TAP_SHIFT_DEFAULT), "its default"


#: The draft architectures exllamav3 1.6.5 has a config class for (``arch_string`` of
#: ``architecture/dflash.py``, ``dflash2.py``, ``dflash_laguna.py``); ``Config.__init__`` asserts
#: the one listed is its own, so any other name loads as some other model or not at all.
ARCHITECTURES = ("DFlashDraftModel", "DFlash2DraftModel", "DFlashLagunaForCausalLM")
#: Keys ``DFlashConfig`` reads with ``read_cfg(int, ..., no_default)`` (``dflash.py:40-58``): a
#: value of another type raises (``util/file.py`` ``read_dict``).
INT_KEYS = ("hidden_size", "num_attention_heads", "intermediate_size", "num_hidden_layers")


def config_problems(spec: DraftSpec) -> list[str]:
    """What its config classes raise for before any weight is read (tests/test_engine_parser_judges.py
    runs them): the architecture, the typed dimensions, and DFlash2's asserts (``dflash2.py:71-78``)."""
    archs = spec.top("architectures")
    if not (isinstance(archs, list) and len(archs) == 1 and archs[0] in ARCHITECTURES):
        return [f"has no draft architecture {show_value(archs)} (only {', '.join(ARCHITECTURES)})"]
    out = [f"{key} {show_value(spec.top(key))} is not an integer (its config reader raises)" for key in INT_KEYS
           if spec.states(key) and (not isinstance(spec.top(key), int) or isinstance(spec.top(key), bool))]
    if archs[0] == "DFlash2DraftModel":
        def nested_or_top(key: str, default: int | None) -> int | None:
            rk = spec.declared(key)
            raw = rk.nested if rk.nested is not ABSENT else rk.top if rk.top is not ABSENT else default
            return as_int(raw)
        rank, top_k = nested_or_top("selector_rank", None), nested_or_top("selector_top_k", None)
        group, kernel = nested_or_top("conv_group_size", 16), nested_or_top("conv_kernel_size", 2)
        hidden, vocab, block = spec.dims.hidden_size, spec.dims.vocab_size, spec.block_size
        if rank is None or rank <= 0:
            out.append("DFlash2 needs a positive integer selector_rank")
        if top_k is None or top_k <= 0 or (vocab is not None and top_k > vocab):
            out.append("DFlash2 needs selector_top_k between 1 and vocab_size")
        if group is None or group <= 0 or (hidden is not None and hidden % group):
            out.append(f"DFlash2 needs conv_group_size ({group}) dividing hidden_size ({hidden})")
        if kernel is None or kernel <= 0 or (block is not None and kernel > block):
            out.append(f"DFlash2 needs 0 < conv_kernel_size ({kernel}) <= block_size ({block})")
    return out


def judge(spec: DraftSpec, target: TargetSpec | None) -> Verdict:
    """Its config class's checks; ``block_size`` top level then nested; mask id and taps nested
    then top level; the taps shifted by ``tap_shift``, unique."""
    r = Reading(spec)
    r.problems += config_problems(spec)
    r.read("block_size", TOP_THEN_NESTED)
    r.read("mask_token_id", NESTED_THEN_TOP)
    ids = r.read("target_layer_ids", NESTED_THEN_TOP, kind="list")
    if ids and len(set(ids)) != len(ids):
        r.problems.append("target_layer_ids has duplicates (its config reader asserts they are unique)")
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
