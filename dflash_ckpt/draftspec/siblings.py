"""Which family a draft belongs to beyond DFlash and DFlash2: DSpark, Laguna, LiLiCorr, and the
DFlash drafts that only name things differently (Muse-Glimmer).

Recognised from the config alone (architectures, ``model_type``, the family's own keys), so that
each family gets its own checks and the DFlash v1 rules that do not apply are not fired at it
(shared/DESIGN.md section 12; vLLM 0.32.0 ``models/registry.py``, ``qwen3_dspark.py``,
``laguna_dflash.py``, ``lilicorr.py``, ``qwen3_dflash.py``'s ``hf_to_vllm_mapper``).
"""

from __future__ import annotations

from typing import Any, Mapping

from dflash_ckpt.draftspec.layout import DSPARK_ARCHITECTURES

DSPARK, LAGUNA, LILICORR = "DSpark", "Laguna", "LiLiCorr"

#: Laguna drafts run as the target's own architecture (vLLM renames it ``DFlashLagunaForCausalLM``).
LAGUNA_ARCHITECTURES = frozenset({"LagunaForCausalLM", "DFlashLagunaForCausalLM"})
LILICORR_ARCHITECTURES = frozenset({"LiLiCorrDraftModel"})
#: Muse-Glimmer's DFlash head: a DFlash v1 draft whose fc and hidden norm sit under ``encoder.``.
MUSE_GLIMMER_ARCHITECTURES = frozenset({"MuseGlimmerAssistantModel", "DFlashMuseGlimmerAssistantModel"})
#: Stored name -> the DFlash name it stands for (vLLM's ``hf_to_vllm_mapper`` renames them).
MUSE_GLIMMER_NAMES = {"encoder.fc.weight": "fc.weight", "encoder.output_norm_enc.weight": "hidden_norm.weight"}


def _archs(config: Mapping[str, Any]) -> set[str]:
    archs = config.get("architectures")
    return {a for a in archs if isinstance(a, str)} if isinstance(archs, list) else set()


def _nested(config: Mapping[str, Any]) -> Mapping[str, Any]:
    value = config.get("dflash_config")
    return value if isinstance(value, Mapping) else {}


def sibling_family(config: Mapping[str, Any]) -> str | None:
    """``DSpark``, ``Laguna``, ``LiLiCorr`` or ``None`` (a DFlash or DFlash2 draft, or unknown)."""
    archs = _archs(config)
    if archs & DSPARK_ARCHITECTURES or config.get("speculators_model_type") == "dspark":
        return DSPARK
    if archs & LILICORR_ARCHITECTURES or any(str(k).startswith("lilicorr_") for k in _nested(config)):
        return LILICORR
    if archs & LAGUNA_ARCHITECTURES or (config.get("model_type") == "laguna" and "dflash_config" in config):
        return LAGUNA
    return None


def is_muse_glimmer(config: Mapping[str, Any]) -> bool:
    return bool(_archs(config) & MUSE_GLIMMER_ARCHITECTURES)


def dspark_value(config: Mapping[str, Any], key: str) -> Any:
    """A DSpark key where DeepSpec and speculators put it: the top level, else ``dflash_config``."""
    if key in config:
        return config[key]
    return _nested(config).get(key)


def markov_rank(config: Mapping[str, Any]) -> int | None:
    """The Markov head's rank when it is a non-negative JSON integer (0 = plain anchor-first DFlash)."""
    value = dspark_value(config, "markov_rank")
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def confidence_head(config: Mapping[str, Any]) -> bool:
    """``enable_confidence_head`` (or TensorRT-LLM's ``use_confidence_head``) is true."""
    return dspark_value(config, "enable_confidence_head") is True or dspark_value(config, "use_confidence_head") is True
