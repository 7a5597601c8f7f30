"""A target's validated decoder settings (``TargetSettings``), built from its ``TargetSpec``.

``TargetSpec`` keeps the raw values ``inspect`` reports on, its dims and rope decoded when built
(``spec.settings``); a run needs them valid. This is where a target's decoder settings are
required for a run: the native runtime builds its model from these fields only, so every DF142
line and every refusal (exit 2) for a setting the runtime does not implement is raised here. No torch here: ``smoke-run`` refuses before paying for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dflash_ckpt.draftspec.config_values import bool_value
from dflash_ckpt.draftspec.decoder_dims import Dims
from dflash_ckpt.draftspec.families import FAMILIES, Family, Unsupported
from dflash_ckpt.draftspec.layer_kinds import FULL
from dflash_ckpt.draftspec.rope_spec import RopeSpec
from dflash_ckpt.draftspec.specs import TargetSpec, target_from_config
from dflash_ckpt.draftspec.values import config_dtype, target_model_type


def native_family(spec: TargetSpec) -> Family | None:
    """The native runtime's family of the target, ``None`` when it does not implement it."""
    return FAMILIES.get(spec.model_type) if spec.model_type is not None else None


def ensure_supported(spec: TargetSpec) -> None:
    """Refuse (exit 2) a target architecture the runtime does not implement.

    Only the kind of model is judged here, so that a supported pair with bad values is reported
    by the checks (exit 1) rather than refused as unsupported. Both draft generations (DFlash
    and DFlash2) are implemented.
    """
    if native_family(spec) is None:
        arch = f" ({', '.join(spec.architectures)})" if spec.architectures else ""
        raise Unsupported(f"target model_type {target_model_type(spec.config)!r}{arch} in {spec.where}")
    if any("Moe" in a for a in spec.architectures) or spec.decoder.get("num_experts"):
        raise Unsupported(f"a mixture-of-experts target in {spec.where}")


@dataclass(frozen=True)
class TargetSettings:
    """A dense Qwen3 or Llama 3.x decoder, as the native runtime builds it."""

    model_type: str
    dims: Dims
    rope: RopeSpec
    qk_norm: bool
    mlp_bias: bool
    tie_word_embeddings: bool
    dtype: str | None
    text_config: bool

    @classmethod
    def from_spec(cls, spec: TargetSpec) -> TargetSettings:
        """Settings of a target spec; multimodal wrappers keep them in ``text_config``."""
        config, where = spec.config, spec.where
        inner = spec.decoder
        label = f"{where} (text_config)" if spec.text_config_used else where
        family = native_family(spec)
        if family is None:
            raise Unsupported(f"target model_type {target_model_type(config)!r} in {where}")
        if family.sliding_flag and inner.get(family.sliding_flag) is True:
            raise Unsupported(f"{label}: a {family.name} target with {family.sliding_flag} true (full attention only)")
        layer_types = inner.get("layer_types")
        if isinstance(layer_types, list) and any(t != FULL for t in layer_types):
            raise Unsupported(f"{label}: target layer_types other than full_attention")
        dims = spec.settings.run_dims.require()  # decoded when the spec was built
        # A missing lm_head with untied embeddings is reported at load time, naming the file.
        return cls(
            model_type=family.model_type,
            dims=dims,
            rope=spec.settings.ropes.require()[FULL],
            qk_norm=family.qk_norm,
            mlp_bias=bool_value(inner.get("mlp_bias"), "mlp_bias", label, False),
            tie_word_embeddings=spec.tie_word_embeddings(family.tie_default),
            dtype=config_dtype(inner) or config_dtype(config),
            text_config=spec.text_config_used,
        )

    @classmethod
    def from_config(cls, config: dict[str, Any], where: str) -> TargetSettings:
        """Settings of a parsed target ``config.json`` (its spec made here), for scripts and tests."""
        return cls.from_spec(target_from_config(config, label=where, where=where))
