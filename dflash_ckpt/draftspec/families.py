"""Target families each backend runs, and what differs between them: two tables.

``FAMILIES``: the native runtime (``runtime/target.py``); ``HF_FAMILIES``: the transformers
backend (``runtime/hf_target.py``), with how each family rolls its cache back and how it was
verified (README's table is this one).

Every other runtime module asks this table instead of testing ``model_type`` itself, so adding a
family (or seeing what one needs) means reading and editing one place. No torch here: ``smoke-run``
refuses an unsupported target before importing it.

Traits shared by both families, and therefore not in the table: the decoder keeps its settings at
the top level of ``config.json`` or, in multimodal wrappers, in ``text_config``; tokens are embedded
through ``embed_tokens`` and the draft borrows that table and ``lm_head``; the feature of tap layer
``i`` is the residual stream after decoder layer ``i`` (HF ``hidden_states[i + 1]``), taken after
the final norm for the last layer; rope is read by ``rope_spec.rope_specs`` from ``rope_theta`` +
``rope_scaling`` or ``rope_parameters``.

It sits in ``draftspec`` because the specs' settings (``target_settings``) judge a target by it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dflash_ckpt.draftspec.values import target_model_type
from dflash_ckpt.errors import UsageError


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


class Unsupported(UsageError):
    """A pair the reference runtime cannot run (exit 2): names what is supported."""

    def __init__(self, what: str) -> None:
        super().__init__(f"not supported by the reference runtime: {what}; {SUPPORTED_TEXT}")


# -- the transformers backend ------------------------------------------------------------------


@dataclass(frozen=True)
class HFFamily:
    """A decoder ``model_type`` the transformers backend (``runtime/hf_target.py``) runs. Keyed by
    the decoder's type: a wrapper's ``text_config`` decides. README's family table mirrors this."""

    model_type: str
    name: str
    #: The wrapper model types whose ``text_config`` holds this decoder (run text-only).
    wrappers: tuple[str, ...] = ()


HF_FAMILIES: dict[str, HFFamily] = {f.model_type: f for f in (
    HFFamily("llama", "Llama 3.x"),
    HFFamily("qwen3", "dense Qwen3"),
    HFFamily("qwen3_moe", "Qwen3 MoE (Qwen3-Coder-30B-A3B)"),
    HFFamily("qwen3_next", "Qwen3-Next (Qwen3-Coder-Next)"),
    HFFamily("qwen3_5_text", "Qwen3.5/3.6 dense", wrappers=("qwen3_5",)),
    HFFamily("qwen3_5_moe_text", "Qwen3.5/3.6 MoE", wrappers=("qwen3_5_moe",)),
    HFFamily("gpt_oss", "gpt-oss"),
    HFFamily("gemma4_text", "gemma-4", wrappers=("gemma4",)),
    HFFamily("deepseek_v3", "DeepSeek-V3 / Kimi-K2.5 (MLA + MoE)", wrappers=("kimi_k25",)),
)}

HF_SUPPORTED_TEXT = (
    "the transformers backend supports targets of model_type "
    + ", ".join(f"'{m}'" + (f" (in {'/'.join(f.wrappers)})" if f.wrappers else "") for m, f in HF_FAMILIES.items())
    + " with DFlash v1 and DFlash2 drafts"
)


def hf_family_of(config: dict[str, Any]) -> HFFamily | None:
    """The transformers-backend family of a target config, ``None`` when not verified there."""
    model_type = target_model_type(config)
    if model_type == "kimi_k2":  # Kimi's text_config: transformers reads it as deepseek_v3
        model_type = "deepseek_v3"
    return HF_FAMILIES.get(model_type) if isinstance(model_type, str) else None
