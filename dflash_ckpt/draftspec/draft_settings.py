"""A draft's validated settings (``DraftSettings``), built from its ``DraftSpec``.

The DFlash keys are read through the spec (``dflash_config`` first, then the top level,
docs/DESIGN.md section 2); this adds what a run needs beyond them (dimensions, layer kinds, rope,
the output scalings, DFlash2's conv and selector) with the same DF codes ``inspect`` reports:
dimensions, rope and layer kinds as the spec decoded them when built (``spec.settings``, each bad
one raised here as the run's error), the rest validated here. No torch here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dflash_ckpt.draftspec.config_values import bad_value
from dflash_ckpt.draftspec.decoder_dims import Dims
from dflash_ckpt.draftspec.layer_kinds import SLIDING
from dflash_ckpt.draftspec.layout import BlockLayout, resolve_layout
from dflash_ckpt.draftspec.rope_spec import RopeSpec
from dflash_ckpt.draftspec.specs import DFLASH2_KEYS, DraftSpec
from dflash_ckpt.draftspec.values import as_int
from dflash_ckpt.errors import InputError


@dataclass(frozen=True)
class Dflash2Settings:
    """DFlash2's keys (``dflash_config`` first, then the top level, like every DFlash key).

    ``conv_kernel_size`` taps of the grouped dynamic causal conv around each sublayer, with one
    dynamic coefficient per ``conv_group_size`` channels; the candidate selector re-ranks the
    ``selector_top_k`` best draft logits per position with codebooks of rank ``selector_rank``.
    """

    conv_kernel_size: int
    conv_group_size: int
    selector_rank: int
    selector_top_k: int

    def groups(self, hidden_size: int) -> int:
        """Channel groups of the conv (``hidden_size / conv_group_size``)."""
        return hidden_size // self.conv_group_size

    @classmethod
    def from_spec(cls, spec: DraftSpec, dims: Dims) -> Dflash2Settings:
        """The keys of a draft that passed the checks; the guards left here are the ones without
        which the conv and selector shapes would be garbage (the checks report the same as DF146)."""
        where = spec.where
        vals: dict[str, int] = {}
        for key in DFLASH2_KEYS:
            rk = spec.extra_keys[key]  # a nested/top conflict is inspect's DF103; the nested value is read
            val = as_int(rk.value) if rk.present else None
            if val is None or val < 1:
                raise InputError(
                    f"key 'dflash_config.{key}' must be an integer >= 1 in a DFlash2 draft, found "
                    f"{rk.value if rk.present else 'nothing'}; restore it from the published config",
                    code="DF146", path=where)
            vals[key] = val
        if dims.hidden_size % vals["conv_group_size"]:
            raise InputError(
                f"key 'dflash_config.conv_group_size' ({vals['conv_group_size']}) must divide "
                f"hidden_size ({dims.hidden_size})", code="DF146", path=where)
        return cls(**vals)


@dataclass(frozen=True)
class DraftSettings:
    """A DFlash draft (v1, or DFlash2 with ``dflash2`` set): the keys of ``config.json`` the
    forward pass needs, resolved.

    DFlash keys resolve ``dflash_config`` first, then the top level (docs/DESIGN.md section 2), through
    ``DraftSpec``; the optional output scalings do the same, as the z-lab reference reads them.
    """

    dims: Dims
    block_size: int
    mask_token_id: int
    target_layer_ids: tuple[int, ...]
    num_target_layers: int | None
    layer_types: tuple[str, ...]
    sliding_window: int | None
    is_causal: bool | None
    input_embedding_scale: float
    output_multiplier: float
    final_logit_softcapping: float | None
    ropes: dict[str, RopeSpec] = field(default_factory=dict)
    dtype: str | None = None
    #: DFlash2 only (``None`` for a v1 draft): see ``Dflash2Settings``.
    dflash2: Dflash2Settings | None = None
    #: Which block slots are drafts (1+N: 1..B-1; anchor-first: 0..B-1), as the config declares
    #: it (``draftspec.layout``) or ``--layout`` overrides it: the loops' one switch.
    block_layout: BlockLayout = field(default_factory=lambda: resolve_layout({}))

    @property
    def generation(self) -> str:
        """``DFlash2`` or ``DFlash``: which draft module runs this config."""
        return "DFlash2" if self.dflash2 is not None else "DFlash"

    def layer_causal(self, i: int) -> bool:
        """Sliding layers are causal, full layers bidirectional, unless ``is_causal`` says otherwise."""
        if self.is_causal is not None:
            return self.is_causal
        return self.layer_types[i] == SLIDING

    def layer_window(self, i: int) -> int | None:
        return self.sliding_window if self.layer_types[i] == SLIDING else None

    @classmethod
    def from_spec(cls, spec: DraftSpec) -> DraftSettings:
        """Settings of a draft that passed ``inspect``'s checks (so the DFlash keys are valid):
        the values decoded when the spec was built, each bad one raised as the run's error."""
        where = spec.where
        decoded = spec.settings
        dims = decoded.run_dims.require()
        ids = spec.target_layer_ids
        block = spec.block_size
        mask = spec.mask_token_id
        if ids is None or block is None or mask is None:
            raise InputError("block_size, mask_token_id and target_layer_ids must be set", code="DF101", path=where)
        layer_types = decoded.layer_kinds.require()
        window = spec.sliding_window
        if SLIDING in layer_types and (window is None or window <= 0):
            raise InputError("a sliding_attention layer needs a positive 'sliding_window'", code="DF132", path=where)

        def scaling(name: str, default: float | None) -> float | None:
            rk = spec.extra_keys[name]
            if not rk.present or rk.value is None:
                return default
            val = rk.value
            if isinstance(val, bool) or not isinstance(val, (int, float)):
                raise bad_value(where, name, val, "a number")
            return float(val)

        is_causal = spec.is_causal
        if is_causal is not None and not isinstance(is_causal, bool):
            raise bad_value(where, "is_causal", is_causal, "true, false or null")
        softcap = scaling("final_logit_softcapping", None)
        return cls(
            dims=dims,
            block_size=block,
            mask_token_id=mask,
            target_layer_ids=tuple(ids),
            num_target_layers=spec.num_target_layers,
            layer_types=layer_types,
            sliding_window=window if SLIDING in layer_types else None,
            is_causal=is_causal,
            input_embedding_scale=scaling("input_embedding_scale", 1.0) or 1.0,
            output_multiplier=scaling("output_multiplier", 1.0) or 1.0,
            final_logit_softcapping=softcap if softcap and softcap > 0 else None,
            ropes=decoded.ropes.require(),
            dtype=spec.dtype,
            dflash2=Dflash2Settings.from_spec(spec, dims) if spec.generation == "DFlash2" else None,
            block_layout=spec.block_layout,
        )
