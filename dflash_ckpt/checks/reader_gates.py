"""What every reader verdict must agree with beyond where it reads the keys: weights that no
engine loads, and the DSpark path of the engines that serve DSpark drafts.

A verdict of "loads as is" beside a DF211 error (an fc width that contradicts target_layer_ids)
told the user the opposite of the findings (issue 31): every engine loads the draft's tensors into
modules sized by the config, strictly, so the header findings that say a tensor is missing or
mis-shaped stop each of them, and each verdict says so.
"""

from __future__ import annotations

from dflash_ckpt.checks.config import DSPARK_ALIASES
from dflash_ckpt.checks.layout import DSPARK_PATHS, engine_path
from dflash_ckpt.checks.reading import TOP_THEN_NESTED, Reading, Verdict
from dflash_ckpt.draftspec.siblings import (DSPARK, LAGUNA, LILICORR, MUSE_GLIMMER_NAMES, dspark_value, is_muse_glimmer,
                                            markov_rank)
from dflash_ckpt.draftspec.specs import DraftSpec, TargetSpec, as_int

#: Header findings that stop every engine's weight load (shape or presence of a tensor the model
#: is built with, or a file that cannot be read).
LOAD_STOPPERS = ("DF203", "DF204", "DF205", "DF206", "DF210", "DF211", "DF212", "DF213", "DF223", "DF224",
                 "DF230", "DF231")


def weight_load_problems(spec: DraftSpec) -> list[str]:
    """One clause per finding in ``LOAD_STOPPERS``, for every reader's verdict."""
    if spec.weights is None:
        return []
    from dflash_ckpt.checks.weights import check_weights  # noqa: PLC0415 - header checks, only with weights

    return [f"its weights do not load ({f.code}: {f.message})" for f in check_weights(spec) if f.code in LOAD_STOPPERS]




def dspark_verdict(reader: str, spec: DraftSpec) -> Verdict:
    """The verdict of an engine's DSpark path: the keys at the top level (DeepSpec) or nested, or
    under their ``dspark_`` names."""
    r = Reading(spec)
    for key, alias in DSPARK_ALIASES.items():
        if spec.keys[key].present or dspark_value(spec.config, alias) is None:
            r.read(key, TOP_THEN_NESTED, kind="list" if key == "target_layer_ids" else "int")
    return r.verdict(f"loads as DSpark through {DSPARK_PATHS[reader]}")


def family_problems(reader: str, spec: DraftSpec, target: TargetSpec | None) -> list[str]:
    """Why ``reader`` cannot run a sibling family's draft (vLLM 0.32.0 is the one engine with
    ``lilicorr.py`` and ``laguna_dflash.py``; only it renames Muse-Glimmer's ``encoder.fc``), and what
    vLLM's Laguna path requires (``laguna_dflash.py``: uniform ``layer_types``, nested non-empty
    taps, ``draft_vocab_size`` equal to the target's vocabulary)."""
    family = spec.family
    out: list[str] = []
    if family in (LILICORR, LAGUNA) and reader != "vllm":
        what = "LiLiCorr's candidate-lattice head" if family == LILICORR else "Laguna's draft layers"
        out.append(f"has no {family} path ({what}: vLLM's models/{'lilicorr' if family == LILICORR else 'laguna_dflash'}.py "
                   "is the one modelled engine that serves it)")
    if family == LAGUNA and reader == "vllm":
        lt = spec.config.get("layer_types")
        if not isinstance(lt, list) or len(set(map(str, lt))) != 1:
            out.append("laguna_dflash.py requires a uniform layer_types list")
        if not (spec.dflash_config or {}).get("target_layer_ids"):
            out.append("laguna_dflash.py requires a non-empty dflash_config.target_layer_ids")
        dvs, tv = as_int(spec.config.get("draft_vocab_size")), as_int(target.vocab_size) if target else None
        if dvs is None:
            out.append("laguna_dflash.py requires draft_vocab_size")
        elif tv is not None and dvs != tv:
            out.append(f"laguna_dflash.py requires draft_vocab_size ({dvs}) equal to the target vocabulary ({tv})")
    names = spec.weights.tensors if spec.weights is not None else {}
    if reader != "vllm" and is_muse_glimmer(spec.config) and any(n in names for n in MUSE_GLIMMER_NAMES):
        out.append("finds no fc.weight: Muse-Glimmer names it encoder.fc.weight (only vLLM renames it)")
    rank = markov_rank(spec.config)
    if family == DSPARK and rank and not engine_path(reader, spec).dspark:
        out.append(f"has no DSpark path: it would drop the Markov head (markov_rank {rank})")
    return out


def vllm_v1_refusals(spec: DraftSpec) -> list[str]:
    """What vLLM 0.32.0's V1 model runner refuses (``config/vllm.py``
    ``_get_v1_model_runner_unsupported_features``); it is the runner of the CPU build (no Triton)."""
    out: list[str] = []
    lt = spec.config.get("layer_types")
    if isinstance(lt, list) and "sliding_attention" in lt and "full_attention" in lt:
        out.append("mixed sliding/full dflash drafts")
    if spec.generation == "DFlash2":
        out.append("DFlash candidate-head drafts")
    if spec.family == LILICORR:
        out.append("LiLiCorr drafts")
    if spec.family == DSPARK:
        out.append("dspark speculative decoding")
    return out
