"""A whole folder given in the wrong place: a target model passed as the draft (DF232).

A forgotten ``--target`` (``inspect DRAFT TARGET`` reads both as drafts), or a pre-commit hook
matching every ``config.json``, points the draft checks at a full causal LM; they then report
five errors about missing DFlash keys and advise ``normalize --block-size`` on a model that is no
draft at all. One line that says what the folder is serves better, so when this check fires the
draft checks are not run (``checks.run_checks``).
"""

from __future__ import annotations

from dflash_ckpt.draftspec.specs import DraftSpec
from dflash_ckpt.rules import Finding, finding

#: Architecture name endings of full models (a target), as transformers names them.
FULL_MODEL_SUFFIXES = ("ForCausalLM", "ForConditionalGeneration", "LMHeadModel")
#: Keys only a DFlash draft sets; one of them present means the folder means to be a draft.
DRAFT_KEYS = ("dflash_config", "block_size", "mask_token_id", "target_layer_ids", "num_target_layers")


def _is_full_model_architecture(spec: DraftSpec) -> str | None:
    archs = spec.top("architectures")
    if not isinstance(archs, list):
        return None
    for arch in archs:
        if isinstance(arch, str) and arch.endswith(FULL_MODEL_SUFFIXES) and "dflash" not in arch.lower():
            return arch
    return None


def check_target_as_draft(spec: DraftSpec) -> list[Finding]:
    """DF232 when the "draft" is a plain causal LM: a full-model architecture, no DFlash key, and
    (where the weights were read) embed_tokens or lm_head but no fc.weight."""
    arch = _is_full_model_architecture(spec)
    if arch is None or any(map(spec.states, DRAFT_KEYS)):
        return []
    evidence = f"architectures {arch}, no DFlash keys"
    if spec.weights is not None and spec.weights.tensors:
        names = list(spec.weights.tensors)
        if any(n == "fc.weight" or n.endswith(".fc.weight") for n in names):
            return []
        held = [part for part in ("embed_tokens", "lm_head") if any(part in n for n in names)]
        if not held:
            return []
        evidence += f", {' and '.join(held)} but no fc.weight"
    return [finding(
        "DF232",
        f"this looks like a target model ({evidence}), not a DFlash draft; did you mean "
        f"--target? (`dflash-ckpt inspect DRAFT --target {spec.label}`)",
        path=spec.where,
    )]
