"""Target families the reference runtime implements, and what differs between them: one table.

Every other runtime module asks this table instead of testing ``model_type`` itself, so adding a
family (or seeing what one needs) means reading and editing one place. No torch here: ``smoke-run``
refuses an unsupported target before importing it.

Traits shared by both families, and therefore not in the table: the decoder keeps its settings at
the top level of ``config.json`` or, in multimodal wrappers, in ``text_config``; tokens are embedded
through ``embed_tokens`` and the draft borrows that table and ``lm_head``; the feature of tap layer
``i`` is the residual stream after decoder layer ``i`` (HF ``hidden_states[i + 1]``), taken after
the final norm for the last layer; rope is read by ``args.rope_specs`` from ``rope_theta`` +
``rope_scaling`` or ``rope_parameters``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dflash_ckpt.spec.resolve import target_model_type


@dataclass(frozen=True)
class Family:
    """What one target ``model_type`` means to the runtime."""

    model_type: str
    #: How the family is named to a user.
    name: str
    #: ``q_norm``/``k_norm`` RMSNorms on each head before rope (Qwen3 has them, Llama does not).
    qk_norm: bool
    #: A config key that, when true, asks for sliding-window attention the runtime does not
    #: implement for targets (Qwen3's ``use_sliding_window``); ``None`` when the family has none.
    sliding_flag: str | None
    #: ``tie_word_embeddings`` when the config does not say (both config classes default to untied).
    tie_default: bool = False


FAMILIES: dict[str, Family] = {
    "qwen3": Family("qwen3", "dense Qwen3", qk_norm=True, sliding_flag="use_sliding_window"),
    "llama": Family("llama", "Llama 3.x", qk_norm=False, sliding_flag=None),
}

SUPPORTED_TEXT = (
    "the reference runtime supports "
    + " and ".join(f"{f.name} (model_type '{f.model_type}')" for f in FAMILIES.values())
    + " targets with DFlash v1 and DFlash2 drafts (DFlashDraftModel, DFlash2DraftModel)"
)


def family_of(config: dict[str, Any]) -> Family | None:
    """The family of a target config, ``None`` when the runtime does not implement it."""
    model_type = target_model_type(config)
    return FAMILIES.get(model_type) if isinstance(model_type, str) else None
