"""A quantized target's ``quantization_config`` read into one scheme, and checked against its headers.

Production targets are served quantized; the reference runtime runs them by dequantizing each
quantized linear layer into the compute dtype while loading (``runtime/quant/``). This module is
the pure half of that: which format a config names, its bits, group size and excluded modules,
which tensors make up one quantized layer, and whether the safetensors headers agree with the
config (bits, group size, shapes, scale tensors present). Nothing here imports torch, so the
checks run before anything is allocated and ``inspect`` may use them too.

Formats read (each from its producer's own code, docs/quantized-targets.md):

- ``fp8`` (transformers' fine-grained FP8, the official ``-FP8`` releases): ``weight`` F8_E4M3
  ``[out, in]`` and ``weight_scale_inv`` F32 ``[ceil(out/b0), ceil(in/b1)]`` for
  ``weight_block_size [b0, b1]``, or one value per tensor without a block size;
- ``awq`` GEMM (AutoAWQ): ``qweight`` I32 ``[in, out*bits/32]`` (columns interleaved in the order
  0,2,4,6,1,3,5,7), ``qzeros`` I32 ``[in/g, out*bits/32]``, ``scales`` ``[in/g, out]``;
- ``gptq`` (AutoGPTQ / GPTQModel): ``qweight`` I32 ``[in*bits/32, out]`` (packed along the input),
  ``qzeros`` I32 ``[groups, out*bits/32]``, ``scales`` ``[groups, out]``, ``g_idx`` ``[in]``;
  ``checkpoint_format`` ``gptq`` stores each zero point minus one (the v1 convention), ``gptq_v2``
  stores it as is;
- ``compressed-tensors`` (llm-compressor): ``pack-quantized`` (``weight_packed`` I32
  ``[out, in*bits/32]``, ``weight_scale``, ``weight_shape``, ``weight_zero_point`` when asymmetric,
  ``weight_g_idx`` with activation order), ``float-quantized`` (``weight`` F8_E4M3 with
  ``weight_scale``) and ``int-quantized``/``naive-quantized`` (``weight`` I8 with ``weight_scale``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from dflash_ckpt.errors import InputError

#: What the runtime dequantizes, as a finding names it.
SUPPORTED = ("fp8 (e4m3, per-tensor or block scales)", "awq (GEMM, 4-bit)", "gptq (4/8-bit, gptq or gptq_v2)",
             "compressed-tensors (pack-quantized, float-quantized, int-quantized)")
_SUPPORTED_TEXT = "; ".join(SUPPORTED)
#: The linear layers of a dense decoder layer (what a quantizer converts).
LINEARS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
           "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")
_CT_FORMATS = ("pack-quantized", "float-quantized", "int-quantized", "naive-quantized")


@dataclass(frozen=True)
class QuantScheme:
    """One target's quantization, resolved: what the report names and the loader follows."""

    #: ``fp8``, ``awq``, ``gptq`` or ``compressed-tensors``.
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
    #: Module names or ``re:`` patterns left unquantized by the config (``ignore``,
    #: ``modules_to_not_convert``).
    excluded: tuple[str, ...] = ()
    #: compressed-tensors: the element type (``int`` or ``float``).
    kind: str = "int"
    where: str = ""
    #: Notes on what the kernels would compute otherwise (activation quantization dropped...).
    notes: tuple[str, ...] = field(default_factory=tuple)

    def describe(self) -> str:
        """``gptq 4-bit, group 128, act-order, asymmetric`` and the like."""
        label = {"awq-gemm": "awq GEMM", "gptq_v2": "gptq (gptq_v2)"}.get(self.format, self.method if self.format == self.method else f"{self.method} {self.format}")
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
        if self.method == "fp8":
            return {"weight": f"{base}.weight", "scale": f"{base}.weight_scale_inv"}
        if self.method in ("awq", "gptq"):
            out = {"qweight": f"{base}.qweight", "qzeros": f"{base}.qzeros", "scales": f"{base}.scales"}
            if self.method == "gptq":
                out["g_idx"] = f"{base}.g_idx"
            return out
        if self.format == "pack-quantized":
            out = {"packed": f"{base}.weight_packed", "scale": f"{base}.weight_scale", "shape": f"{base}.weight_shape"}
        else:
            out = {"weight": f"{base}.weight", "scale": f"{base}.weight_scale"}
        if not self.symmetric:
            out["zero"] = f"{base}.weight_zero_point"
        if self.act_order:
            out["g_idx"] = f"{base}.weight_g_idx"
        return out

    def optional(self) -> frozenset[str]:
        """Roles a layer may lack: GPTQ's ``g_idx`` (absent in many exports without act-order)."""
        return frozenset({"g_idx"}) if self.method == "gptq" and not self.act_order else frozenset()

    def is_quantized(self, base: str, tensors: Mapping[str, Any]) -> bool:
        """Whether layer ``base`` is stored quantized: its packed or FP8/int8 weight is there
        (an excluded layer keeps a plain float ``weight``)."""
        if self.method in ("awq", "gptq"):
            return f"{base}.qweight" in tensors
        if self.format == "pack-quantized":
            return f"{base}.weight_packed" in tensors
        info = tensors.get(f"{base}.weight")
        return info is not None and info.dtype in ("F8_E4M3", "I8")


def _bad(where: str, key: str, value: Any, supported: str = _SUPPORTED_TEXT) -> InputError:
    shown = repr(value)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    return InputError(f"key 'quantization_config.{key}' is {shown}, which the runtime does not "
                      f"dequantize; supported: {supported}", code="DF180", path=where)


def _int_key(q: Mapping[str, Any], key: str, where: str, allowed: tuple[int, ...], default: Any = ...) -> int:
    value = q.get(key, default)
    if value is ... or isinstance(value, bool) or not isinstance(value, int) or value not in allowed:
        raise _bad(where, key, value, f"{key} one of {', '.join(map(str, allowed))}")
    return value


def _group(q: Mapping[str, Any], key: str, where: str) -> int | None:
    value = q.get(key, 128)
    if isinstance(value, int) and not isinstance(value, bool) and (value == -1 or 1 <= value <= 1 << 20):
        return None if value == -1 else value
    raise _bad(where, key, value, f"{key} a positive integer, or -1 for one group per row")


def _excluded(q: Mapping[str, Any], *keys: str) -> tuple[str, ...]:
    out: list[str] = []
    for key in keys:
        value = q.get(key)
        if isinstance(value, list):
            out += [v for v in value if isinstance(v, str)]
    return tuple(out)


def read_scheme(config: Mapping[str, Any], where: str) -> QuantScheme | None:
    """The target's scheme (``None`` when it is not quantized, or is gpt-oss MXFP4, which the
    transformers backend handles); an unsupported format or variant is one DF180 line."""
    text = config.get("text_config")
    q = config.get("quantization_config")
    if q is None and isinstance(text, dict):
        q = text.get("quantization_config")
    if not isinstance(q, dict):
        return None
    method = q.get("quant_method")
    if method == "mxfp4":
        return None
    if method == "fp8":
        fmt = q.get("fmt", "e4m3")
        if fmt != "e4m3":
            raise _bad(where, "fmt", fmt, "fmt e4m3")
        block = q.get("weight_block_size")
        if block is None:
            return QuantScheme("fp8", "fp8", 8, None, "tensor", kind="float", where=where,
                               excluded=_excluded(q, "modules_to_not_convert"), notes=_fp8_notes(q))
        if not (isinstance(block, list) and len(block) == 2 and all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in block)):
            raise _bad(where, "weight_block_size", block, "weight_block_size [rows, cols] of positive integers, or null")
        return QuantScheme("fp8", "fp8", 8, None, "block", block=(block[0], block[1]), kind="float", where=where,
                           excluded=_excluded(q, "modules_to_not_convert"), notes=_fp8_notes(q))
    if method == "awq":
        version = str(q.get("version", "gemm")).lower()
        if version != "gemm":
            raise _bad(where, "version", q.get("version"), "version gemm (AutoAWQ's GEMM packing)")
        if q.get("zero_point", True) is not True:
            raise _bad(where, "zero_point", q.get("zero_point"), "zero_point true (AutoAWQ's GEMM layout)")
        bits = _int_key(q, "bits", where, (4,), q.get("w_bit", ...))
        group = _group(q, "group_size", where) if "group_size" in q else _group({"q_group_size": q.get("q_group_size", 128)}, "q_group_size", where)
        return QuantScheme("awq", "awq-gemm", bits, group, "group" if group else "channel", symmetric=False,
                           where=where, excluded=_excluded(q, "modules_to_not_convert"))
    if method == "gptq":
        bits = _int_key(q, "bits", where, (4, 8))
        group = _group(q, "group_size", where)
        fmt = q.get("checkpoint_format", "gptq")
        if fmt not in ("gptq", "gptq_v2"):
            raise _bad(where, "checkpoint_format", fmt, "checkpoint_format gptq or gptq_v2")
        return QuantScheme("gptq", fmt, bits, group, "group" if group else "channel",
                           symmetric=q.get("sym", True) is not False, act_order=q.get("desc_act") is True,
                           where=where, excluded=_excluded(q, "modules_to_not_convert"))
    if method == "compressed-tensors":
        return _compressed(q, where)
    raise _bad(where, "quant_method", method)


def _fp8_notes(q: Mapping[str, Any]) -> tuple[str, ...]:
    scheme = q.get("activation_scheme", "dynamic")
    return (f"activations not quantized (the config's activation_scheme is {scheme})",)


def _compressed(q: Mapping[str, Any], where: str) -> QuantScheme:
    groups = q.get("config_groups")
    if not isinstance(groups, dict) or not groups:
        raise _bad(where, "config_groups", groups, "config_groups with one weight scheme")
    schemes = []
    for name, group in groups.items():
        weights = group.get("weights") if isinstance(group, dict) else None
        if not isinstance(weights, dict):
            raise _bad(where, f"config_groups.{name}.weights", weights, "a weights scheme (num_bits, type, strategy)")
        fmt = group.get("format") or q.get("format")
        schemes.append((name, group, weights, fmt))
    if len({repr((w, f)) for _, _, w, f in schemes}) > 1:
        raise _bad(where, "config_groups", sorted(groups), "one weight scheme for every group (mixed schemes are not read)")
    name, group, weights, fmt = schemes[0]
    if fmt not in _CT_FORMATS:
        raise _bad(where, "format", fmt, "format " + ", ".join(_CT_FORMATS[:3]))
    kind = weights.get("type", "int")
    bits = weights.get("num_bits")
    strategy = weights.get("strategy", "tensor")
    pre = f"config_groups.{name}.weights"
    if fmt == "float-quantized":
        if kind != "float" or bits != 8:
            raise _bad(where, f"{pre}.num_bits", bits, "float-quantized weights of type float, num_bits 8 (e4m3)")
    elif kind != "int" or bits not in ((4, 8) if fmt == "pack-quantized" else (8,)):
        raise _bad(where, f"{pre}.num_bits", bits, f"{fmt} weights of type int, num_bits "
                   + ("4 or 8" if fmt == "pack-quantized" else "8"))
    if strategy not in ("tensor", "channel", "group", "block"):
        raise _bad(where, f"{pre}.strategy", strategy, "strategy tensor, channel, group or block")
    group_size = weights.get("group_size") if strategy == "group" else None
    if strategy == "group" and not (isinstance(group_size, int) and not isinstance(group_size, bool) and group_size > 0):
        raise _bad(where, f"{pre}.group_size", group_size, "a positive group_size with strategy group")
    block = weights.get("block_structure")
    if strategy == "block" and not (isinstance(block, list) and len(block) == 2 and all(isinstance(b, int) and b > 0 for b in block)):
        raise _bad(where, f"{pre}.block_structure", block, "block_structure [rows, cols] with strategy block")
    if weights.get("dynamic") not in (None, False):
        raise _bad(where, f"{pre}.dynamic", weights.get("dynamic"), "static weight scales (dynamic false)")
    actorder = weights.get("actorder")
    act = actorder in ("group", True) and strategy == "group"
    notes = ()
    if isinstance(group.get("input_activations"), dict):
        notes = ("activations not quantized (the config quantizes input activations; the dequantized run computes them "
                 "in the compute dtype)",)
    return QuantScheme("compressed-tensors", "int-quantized" if fmt == "naive-quantized" else fmt, int(bits),
                       group_size, strategy, symmetric=weights.get("symmetric", True) is not False,
                       block=(block[0], block[1]) if strategy == "block" else None, act_order=act,
                       excluded=_excluded(q, "ignore"), kind=kind, where=where, notes=notes)


def excluded_by_config(scheme: QuantScheme, module: str) -> bool:
    """Whether ``module`` (``model.layers.0.mlp.down_proj``, ``lm_head``) is named by the
    config's exclusion list, as a name, a suffix of one, or a ``re:`` pattern."""
    for entry in scheme.excluded:
        if entry.startswith("re:"):
            try:
                if re.match(entry[3:], module):
                    return True
            except re.error:
                continue
        elif module == entry or module.endswith("." + entry) or entry.endswith("." + module):
            return True
    return False


__all__ = ["LINEARS", "SUPPORTED", "QuantScheme", "excluded_by_config", "read_scheme"]
