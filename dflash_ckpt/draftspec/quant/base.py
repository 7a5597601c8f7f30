"""What every quantization format shares: the resolved scheme, the format record, and the checks of
``quantization_config`` values and of tensor headers that several formats make alike.

Pure: nothing here imports torch, so the checks run before anything is allocated and ``inspect``
makes them too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from dflash_ckpt.errors import InputError

#: safetensors dtypes an index tensor (``g_idx``, ``weight_g_idx``, ``weight_shape``) may have.
INDEX_DTYPES = ("I8", "I16", "I32", "I64", "U8", "U16", "U32", "U64")
#: A stored ``weight`` is quantized when it is e4m3 or int8 (an excluded layer keeps a float one).
QUANTIZED_WEIGHT_DTYPES = ("F8_E4M3", "I8")


@dataclass(frozen=True)
class QuantScheme:
    """One target's quantization, resolved: what the report names and the loader follows."""

    #: ``quant_method``: ``fp8``, ``awq``, ``gptq`` or ``compressed-tensors`` (its record: ``record``).
    method: str
    #: The stored layout: ``fp8``, ``awq-gemm``, ``gptq``, ``gptq_v2``, ``pack-quantized``,
    #: ``float-quantized``, ``int-quantized``.
    format: str
    bits: int
    #: Input columns sharing one scale (``None``: per channel or per tensor, see ``strategy``).
    group_size: int | None
    #: ``tensor``, ``channel``, ``group`` or ``block``.
    strategy: str
    symmetric: bool = True
    #: ``[rows, cols]`` of one FP8 scale block.
    block: tuple[int, int] | None = None
    #: GPTQ ``desc_act`` / compressed-tensors ``actorder``: columns grouped by ``g_idx``.
    act_order: bool = False
    #: compressed-tensors: the element type (``int`` or ``float``).
    kind: str = "int"
    where: str = ""
    #: Notes on what the kernels would compute otherwise (activation quantization dropped...).
    notes: tuple[str, ...] = field(default_factory=tuple)
    #: The format's record, which read this scheme (``draftspec.quant.FORMATS``).
    record: QuantFormat = field(kw_only=True, compare=False, repr=False)

    def describe(self) -> str:
        """``gptq 4-bit, group 128, act-order, asymmetric`` and the like."""
        label = self.record.labels.get(self.format, self.method if self.format == self.method else f"{self.method} {self.format}")
        parts = [label, f"{self.bits}-bit"]
        if self.strategy == "group":
            parts.append(f"group {self.group_size}")
        elif self.strategy == "block" and self.block:
            parts.append(f"block {self.block[0]}x{self.block[1]}")
        else:
            parts.append(f"per-{self.strategy}")
        if self.act_order:
            parts.append("act-order")
        if self.kind == "int":
            parts.append("symmetric" if self.symmetric else "asymmetric")
        return ", ".join(parts)

    def components(self, base: str) -> dict[str, str]:
        """The tensors of one quantized linear layer ``base`` (``model.layers.0.mlp.up_proj``),
        by role; optional ones (``g_idx``, an asymmetric zero point) included when the scheme has them."""
        return {role: f"{base}.{suffix}" for role, suffix in self.record.components(self).items()}

    def optional(self) -> frozenset[str]:
        """Roles a layer may lack: GPTQ's ``g_idx`` (absent in many exports without act-order)."""
        return self.record.optional(self)

    def is_quantized(self, base: str, tensors: Mapping[str, Any]) -> bool:
        """Whether layer ``base`` is stored quantized: its packed or FP8/int8 weight is there
        (an excluded layer keeps a plain float ``weight``)."""
        role = self.record.stored(self)
        info = tensors.get(f"{base}.{self.record.components(self)[role]}")
        return info is not None and (role != "weight" or info.dtype in QUANTIZED_WEIGHT_DTYPES)


#: ``(scheme, base, parts, tensors, out_features, in_features)``: a layer's headers against its
#: scheme (``parts``: its tensors by role, every required one present).
LayerCheck = Callable[[QuantScheme, str, dict[str, str], Mapping[str, Any], int, int], None]


@dataclass(frozen=True)
class QuantFormat:
    """One ``quant_method`` the runtime dequantizes, as engines are records: how its config is
    read, how its layers are stored and checked from the headers, and how one is dequantized."""

    method: str
    #: What a DF180 line names as supported.
    supported: str
    #: ``(quantization_config, where) -> QuantScheme``; a value it does not read is DF180.
    parse: Callable[[Mapping[str, Any], str], QuantScheme]
    #: The tensor suffixes of one layer by role (``{"weight": "weight", "scale": "weight_scale_inv"}``).
    components: Callable[[QuantScheme], dict[str, str]]
    #: The role whose tensor marks a layer stored quantized; its 2-D header gives the layer's size.
    stored: Callable[[QuantScheme], str]
    #: ``(scheme, rows, cols)`` of that tensor -> the layer's ``(out, in)`` (packed widths unpacked).
    dims: Callable[[QuantScheme, int, int], tuple[int, int]]
    require_layer: LayerCheck
    #: ``(scheme, tensors by role, (out, in)) -> float32 [out, in]`` (imports torch when called).
    dequantize: Callable[[QuantScheme, dict[str, Any], tuple[int, int]], Any]
    #: Roles a layer may lack.
    optional: Callable[[QuantScheme], frozenset[str]] = lambda scheme: frozenset()
    #: The config key a scale block comes from, as a DF181 line names it.
    block_key: str = "block_structure"
    #: How ``describe`` names a stored layout, where not ``method layout``.
    labels: Mapping[str, str] = field(default_factory=dict)


def bad(where: str, key: str, value: Any, supported: str) -> InputError:
    """DF180: ``quantization_config.key`` holds a value the runtime does not dequantize."""
    shown = repr(value)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    return InputError(f"key 'quantization_config.{key}' is {shown}, which the runtime does not "
                      f"dequantize; supported: {supported}", code="DF180", path=where)


def int_key(q: Mapping[str, Any], key: str, where: str, allowed: tuple[int, ...], default: Any = ...) -> int:
    """``q[key]``, an integer among ``allowed`` (DF180 otherwise)."""
    value = q.get(key, default)
    if value is ... or isinstance(value, bool) or not isinstance(value, int) or value not in allowed:
        raise bad(where, key, value, f"{key} one of {', '.join(map(str, allowed))}")
    return value


def group_size(q: Mapping[str, Any], key: str, where: str) -> int | None:
    """``q[key]`` (default 128) as a group size, ``None`` for -1 (one group per row)."""
    value = q.get(key, 128)
    if isinstance(value, int) and not isinstance(value, bool) and (value == -1 or 1 <= value <= 1 << 20):
        return None if value == -1 else value
    raise bad(where, key, value, f"{key} a positive integer, or -1 for one group per row")


def shape(tensors: Mapping[str, Any], name: str) -> tuple[int, ...]:
    return tuple(tensors[name].shape)


def contradiction(scheme: QuantScheme, name: str, key: str, got: tuple[int, ...], want: str) -> InputError:
    """DF181: the config (``key``) implies tensor ``name`` of shape ``want``; its header says ``got``."""
    return InputError(f"key 'quantization_config' {key} implies tensor '{name}' of shape {want}, "
                      f"but its header has {list(got)}; restore the config the quantizer wrote (or re-quantize)",
                      code="DF181", path=scheme.where)


def require_block(scheme: QuantScheme, base: str, out_features: int, in_features: int) -> None:
    """A scale block larger than the weight it scales: a scale grid of one row or column then
    matches the headers whatever the block says, and the block is what the dequantizer would
    spread each scale over (``[1, 16777216]`` on a 128-column weight). Refused (DF181)."""
    if scheme.strategy != "block" or not scheme.block:
        return
    b0, b1 = scheme.block
    if b0 > out_features or b1 > in_features:
        raise InputError(f"key 'quantization_config' {scheme.record.block_key} {[b0, b1]} is larger than layer '{base}' "
                         f"([{out_features}, {in_features}]); a scale block lies within its weight: restore the "
                         "config the quantizer wrote (or re-quantize)", code="DF181", path=scheme.where)


def require_index(scheme: QuantScheme, tensors: Mapping[str, Any], name: str, want: tuple[int, ...]) -> None:
    """An index tensor (``g_idx``, ``weight_g_idx``, ``weight_shape``) of integers and of the
    length the layer implies: a float one (NaN) or a longer one would be read as indices."""
    if shape(tensors, name) != want:
        raise contradiction(scheme, name, "(with the model config)", shape(tensors, name), str(list(want)))
    require_index_dtype(scheme, tensors, name)


def require_index_dtype(scheme: QuantScheme, tensors: Mapping[str, Any], name: str) -> None:
    info = tensors[name]
    if info.dtype not in INDEX_DTYPES:
        raise InputError(f"tensor '{name}' is stored as {info.dtype}; it holds indices or a shape, so it is an "
                         "integer tensor (I32 or I64 as the quantizer writes it): the quantized files are corrupt, "
                         "re-download or re-quantize them", code="DF181", path=scheme.where)


def scale_shape(scheme: QuantScheme, out_features: int, in_features: int) -> tuple[int, ...]:
    """The scale grid a layer's strategy implies."""
    if scheme.strategy == "block" and scheme.block:
        return (math.ceil(out_features / scheme.block[0]), math.ceil(in_features / scheme.block[1]))
    if scheme.strategy == "group" and scheme.group_size:
        return (out_features, math.ceil(in_features / scheme.group_size))
    if scheme.strategy == "channel":
        return (out_features, 1)
    return (1,)


def require_scale(scheme: QuantScheme, name: str, got: tuple[int, ...], out_features: int, in_features: int) -> None:
    want = scale_shape(scheme, out_features, in_features)
    if scheme.strategy == "tensor" and math.prod(got) == 1:
        return
    if got != want:
        key = {"block": scheme.record.block_key, "group": f"group_size {scheme.group_size}",
               "channel": "strategy channel"}.get(scheme.strategy, "strategy")
        raise contradiction(scheme, name, key, got, str(list(want)))


def require_scaled_weight(scheme: QuantScheme, base: str, parts: dict[str, str], tensors: Mapping[str, Any],
                        out_features: int, in_features: int) -> None:
    """A layer stored as an e4m3 or int8 ``weight`` and its scale grid (FP8, compressed-tensors'
    float- and int-quantized)."""
    w = shape(tensors, parts["weight"])
    if w != (out_features, in_features):
        raise contradiction(scheme, parts["weight"], "(with the model config)", w, f"[{out_features}, {in_features}]")
    require_scale(scheme, parts["scale"], shape(tensors, parts["scale"]), out_features, in_features)
    require_block(scheme, base, out_features, in_features)
    if "g_idx" in parts:
        require_index(scheme, tensors, parts["g_idx"], (in_features,))
