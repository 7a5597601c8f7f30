"""A quantized target's layers against its scheme: the header checks and what the report says.

``quant_scheme.py`` reads the scheme from ``quantization_config``; here each quantized layer's
tensors are checked against it from the safetensors headers alone (DF181 a contradiction, DF182
a missing tensor), before anything is allocated, and the run's ``quantization`` summary is made.
Every size the dequantizers allocate follows from what is checked here: a block or scale grid
no larger than the weight it scales, index tensors (``g_idx``, ``weight_shape``) of integers and
of the weight's length, so one layer's temporaries are bounded by its dequantized size
(``dequant_peak_bytes``, which the memory pre-check counts). Pure: nothing here imports torch.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from dflash_ckpt.draftspec.quant_scheme import LINEARS, QuantScheme
from dflash_ckpt.errors import InputError

#: safetensors dtypes an index tensor (``g_idx``, ``weight_g_idx``, ``weight_shape``) may have.
INDEX_DTYPES = ("I8", "I16", "I32", "I64", "U8", "U16", "U32", "U64")
#: Bytes one dequantized element costs at the peak of dequantizing its layer (``runtime/quant``):
#: the float32 values, the scale (and zero point) gathered per element, their product, and the
#: unpacked integers or the transposed copy (GPTQ, AWQ). Measured on a 4096x4096 layer (peak RSS
#: above the stored tensors, output included): FP8 block 12.4, GPTQ act-order 16.4, AWQ 16.7,
#: compressed-tensors pack-quantized asymmetric act-order 16.3; counted as 32 for margin.
DEQUANT_BYTES_PER_ELEMENT = 32


def _shape(tensors: Mapping[str, Any], name: str) -> tuple[int, ...]:
    return tuple(tensors[name].shape)


def _contradiction(scheme: QuantScheme, name: str, key: str, shape: tuple[int, ...], want: str) -> InputError:
    return InputError(f"key 'quantization_config' {key} implies tensor '{name}' of shape {want}, "
                      f"but its header has {list(shape)}; restore the config the quantizer wrote (or re-quantize)",
                      code="DF181", path=scheme.where)


def check_layer(scheme: QuantScheme, base: str, tensors: Mapping[str, Any], out_features: int,
                in_features: int) -> None:
    """Refuse (DF182 a missing tensor, DF181 a config contradicting the shapes, exit 2) quantized
    layer ``base`` whose tensors do not make an ``[out_features, in_features]`` weight under
    ``scheme``; every check is on the headers (nothing is read)."""
    parts = scheme.components(base)
    for role, name in parts.items():
        if name not in tensors and role not in scheme.optional():
            have = ", ".join(sorted(n.rsplit(".", 1)[-1] for n in tensors if n.startswith(base + "."))) or "none"
            need = ", ".join(sorted(v.rsplit(".", 1)[-1] for v in parts.values()))
            raise InputError(f"tensor '{name}' is missing from the safetensors files: a "
                             f"{scheme.method} layer needs {need} (found {have}); the checkpoint is incomplete "
                             f"or not {scheme.method}", code="DF182", path=scheme.where)
    per = 32 // scheme.bits
    m = scheme.method
    if m == "fp8" or scheme.format in ("float-quantized", "int-quantized"):
        w = _shape(tensors, parts["weight"])
        if w != (out_features, in_features):
            raise _contradiction(scheme, parts["weight"], "(with the model config)", w, f"[{out_features}, {in_features}]")
        _check_scale(scheme, parts["scale"], _shape(tensors, parts["scale"]), out_features, in_features)
        _check_block(scheme, base, out_features, in_features)
        if "g_idx" in parts:
            _check_index(scheme, tensors, parts["g_idx"], (in_features,))
    elif m == "awq":
        qw, sc = _shape(tensors, parts["qweight"]), _shape(tensors, parts["scales"])
        if qw != (in_features, out_features // per):
            raise _contradiction(scheme, parts["qweight"], f"bits {scheme.bits}", qw, f"[{in_features}, {out_features // per}]")
        groups = in_features // scheme.group_size if scheme.group_size else 1
        if scheme.group_size and in_features % scheme.group_size or sc != (groups, out_features):
            raise _contradiction(scheme, parts["scales"], f"group_size {scheme.group_size}", sc, f"[{groups}, {out_features}]")
        qz = _shape(tensors, parts["qzeros"])
        if qz != (groups, out_features // per):
            raise _contradiction(scheme, parts["qzeros"], f"bits {scheme.bits}", qz, f"[{groups}, {out_features // per}]")
    elif m == "gptq":
        qw, sc = _shape(tensors, parts["qweight"]), _shape(tensors, parts["scales"])
        if qw != (in_features // per, out_features) or in_features % per:
            raise _contradiction(scheme, parts["qweight"], f"bits {scheme.bits}", qw, f"[{in_features // per}, {out_features}]")
        groups = math.ceil(in_features / scheme.group_size) if scheme.group_size else 1
        if sc != (groups, out_features):
            raise _contradiction(scheme, parts["scales"], f"group_size {scheme.group_size or -1}", sc, f"[{groups}, {out_features}]")
        qz = _shape(tensors, parts["qzeros"])
        if qz != (groups, math.ceil(out_features / per)):
            raise _contradiction(scheme, parts["qzeros"], f"bits {scheme.bits}", qz, f"[{groups}, {math.ceil(out_features / per)}]")
        if parts["g_idx"] in tensors:
            _check_index(scheme, tensors, parts["g_idx"], (in_features,))
    else:  # pack-quantized
        pk = _shape(tensors, parts["packed"])
        if pk != (out_features, math.ceil(in_features / per)):
            raise _contradiction(scheme, parts["packed"], f"num_bits {scheme.bits}", pk,
                                 f"[{out_features}, {math.ceil(in_features / per)}]")
        _check_scale(scheme, parts["scale"], _shape(tensors, parts["scale"]), out_features, in_features)
        _check_block(scheme, base, out_features, in_features)
        _check_index(scheme, tensors, parts["shape"], (2,))
        if "g_idx" in parts:
            _check_index(scheme, tensors, parts["g_idx"], (in_features,))
        if "zero" in parts:
            zp = _shape(tensors, parts["zero"])
            scale_shape = _scale_shape(scheme, out_features, in_features)
            want = (math.ceil(scale_shape[0] / per), *scale_shape[1:])
            if zp != want:
                raise _contradiction(scheme, parts["zero"], f"num_bits {scheme.bits}", zp, str(list(want)))


def _check_block(scheme: QuantScheme, base: str, out_features: int, in_features: int) -> None:
    """A scale block larger than the weight it scales: a scale grid of one row or column then
    matches the headers whatever the block says, and the block is what the dequantizer would
    spread each scale over (``[1, 16777216]`` on a 128-column weight). Refused (DF181)."""
    if scheme.strategy != "block" or not scheme.block:
        return
    b0, b1 = scheme.block
    if b0 > out_features or b1 > in_features:
        key = "weight_block_size" if scheme.method == "fp8" else "block_structure"
        raise InputError(f"key 'quantization_config' {key} {[b0, b1]} is larger than layer '{base}' "
                         f"([{out_features}, {in_features}]); a scale block lies within its weight: restore the "
                         "config the quantizer wrote (or re-quantize)", code="DF181", path=scheme.where)


def _check_index(scheme: QuantScheme, tensors: Mapping[str, Any], name: str, want: tuple[int, ...]) -> None:
    """An index tensor (``g_idx``, ``weight_g_idx``, ``weight_shape``) of integers and of the
    length the layer implies: a float one (NaN) or a longer one would be read as indices."""
    if _shape(tensors, name) != want:
        raise _contradiction(scheme, name, "(with the model config)", _shape(tensors, name), str(list(want)))
    _check_index_dtype(scheme, tensors, name)


def _check_index_dtype(scheme: QuantScheme, tensors: Mapping[str, Any], name: str) -> None:
    info = tensors[name]
    if info.dtype not in INDEX_DTYPES:
        raise InputError(f"tensor '{name}' is stored as {info.dtype}; it holds indices or a shape, so it is an "
                         "integer tensor (I32 or I64 as the quantizer writes it): the quantized files are corrupt, "
                         "re-download or re-quantize them", code="DF181", path=scheme.where)


def _scale_shape(scheme: QuantScheme, out_features: int, in_features: int) -> tuple[int, ...]:
    if scheme.strategy == "block" and scheme.block:
        return (math.ceil(out_features / scheme.block[0]), math.ceil(in_features / scheme.block[1]))
    if scheme.strategy == "group" and scheme.group_size:
        return (out_features, math.ceil(in_features / scheme.group_size))
    if scheme.strategy == "channel":
        return (out_features, 1)
    return (1,)


def _check_scale(scheme: QuantScheme, name: str, shape: tuple[int, ...], out_features: int, in_features: int) -> None:
    want = _scale_shape(scheme, out_features, in_features)
    if scheme.strategy == "tensor" and math.prod(shape) == 1:
        return
    if shape != want:
        key = {"block": "weight_block_size" if scheme.method == "fp8" else "block_structure",
               "group": f"group_size {scheme.group_size}", "channel": "strategy channel"}.get(scheme.strategy, "strategy")
        raise _contradiction(scheme, name, key, shape, str(list(want)))


def quantized_layers(scheme: QuantScheme, tensors: Mapping[str, Any]) -> list[str]:
    """Names of the layers stored quantized (their ``base``), in header order."""
    bases = {n.rsplit(".", 1)[0] for n in tensors}
    return sorted(b for b in bases if scheme.is_quantized(b, tensors))


def stored_dims(scheme: QuantScheme, base: str, tensors: Mapping[str, Any]) -> tuple[int, int] | None:
    """``(out, in)`` of quantized layer ``base`` as its own headers give it (``None`` when they do
    not: a missing or misshapen tensor, named when the layer is loaded). pack-quantized stores no
    exact input width in a header (``weight_shape`` holds it as data), so its ``in`` is the packed
    width's upper bound, ``columns * 32 / bits``."""
    per = 32 // scheme.bits
    packed = scheme.method in ("awq", "gptq")
    key = "qweight" if packed else "packed" if scheme.format == "pack-quantized" else "weight"
    info = tensors.get(scheme.components(base)[key])
    if info is None or len(info.shape) != 2:
        return None
    rows, cols = (int(v) for v in info.shape)
    if scheme.method == "awq":  # [in, out / per]
        return cols * per, rows
    if scheme.method == "gptq":  # [in / per, out]
        return cols, rows * per
    return (rows, cols * per) if key == "packed" else (rows, cols)


def check_headers(scheme: QuantScheme, tensors: Mapping[str, Any]) -> None:
    """The whole checkpoint against ``scheme``, before anything is allocated: at least one layer
    stored quantized (else the config names a quantization the tensors do not have, DF181); each
    quantized layer's block within its stored weight and, where the weight's header gives its
    exact shape (FP8, float- and int-quantized), its scale grid that block's; and its index
    tensors (``g_idx``, ``weight_g_idx``, ``weight_shape``) integers. The rest of ``check_layer``
    (bits, group sizes) needs the model config's dimensions and runs when the layer is loaded."""
    layers = quantized_layers(scheme, tensors)
    for base in layers:
        parts = scheme.components(base)
        dims = stored_dims(scheme, base, tensors)
        if dims is not None and "weight" in parts and parts["scale"] in tensors:
            _check_scale(scheme, parts["scale"], _shape(tensors, parts["scale"]), *dims)
        if dims is not None:
            _check_block(scheme, base, *dims)
        if parts.get("shape") in tensors:
            _check_index(scheme, tensors, parts["shape"], (2,))
        if parts.get("g_idx") in tensors:
            _check_index_dtype(scheme, tensors, parts["g_idx"])  # its length: against the config, on load
    if layers:
        return
    example = next(iter(scheme.components("model.layers.0.mlp.down_proj").values()))
    raise InputError(f"key 'quantization_config' names {scheme.method} ({scheme.format}), but no "
                     f"tensor is stored that way (no '{example}' or the like); remove the key if the weights are "
                     "not quantized, or restore the quantized files", code="DF181", path=scheme.where)


def dequant_peak_bytes(scheme: QuantScheme, tensors: Mapping[str, Any]) -> int:
    """The most memory dequantizing one layer takes on top of the loaded model, from the headers:
    its largest quantized layer's ``out * in`` elements at ``DEQUANT_BYTES_PER_ELEMENT`` (layers
    are dequantized one at a time; what ``check_headers`` admits keeps every temporary within
    the layer's own size)."""
    largest = 0
    for base in quantized_layers(scheme, tensors):
        dims = stored_dims(scheme, base, tensors)
        if dims is not None:
            largest = max(largest, dims[0] * dims[1])
    return largest * DEQUANT_BYTES_PER_ELEMENT


def _plain_modules(scheme: QuantScheme, tensors: Mapping[str, Any]) -> list[str]:
    """Linear layers (and ``lm_head``) stored unquantized: the excluded ones, as stored."""
    out = []
    for name in tensors:
        base = name.removesuffix(".weight")
        if name.endswith(".weight") and (base.endswith("lm_head") or any(base.endswith(lin) for lin in LINEARS)) \
                and not scheme.is_quantized(base, tensors):
            out.append(base)
    return sorted(out)


def summarize(scheme: QuantScheme, tensors: Mapping[str, Any], compute_dtype: str, *, tied: bool) -> dict[str, Any]:
    """What the report and ``--json`` say about a quantized target's run (``quantization``)."""
    plain = _plain_modules(scheme, tensors)
    if tied and not any(p.endswith("lm_head") for p in plain) and not scheme.is_quantized("lm_head", tensors):
        plain.insert(0, "lm_head (tied to embed_tokens)")
    return {
        "format": scheme.method,
        "layout": scheme.format,
        "bits": scheme.bits,
        "group_size": scheme.group_size,
        "strategy": scheme.strategy,
        "block": list(scheme.block) if scheme.block else None,
        "symmetric": scheme.symmetric,
        "act_order": scheme.act_order,
        "description": scheme.describe(),
        "quantized_layers": len(quantized_layers(scheme, tensors)),
        "unquantized_modules": plain,
        "dequantized": True,
        "dequantized_to": compute_dtype,
        "lossless_against": "the dequantized target",
        "notes": list(scheme.notes),
    }


def summary_line(q: Mapping[str, Any]) -> str:
    """One line for people: the format, what was dequantized, what stayed, what lossless means."""
    plain = q["unquantized_modules"]
    shown = ", ".join(plain[:6]) + (f" and {len(plain) - 6} more" if len(plain) > 6 else "")
    notes = "".join(f"; {n}" for n in q["notes"])
    return (f"target quantized: {q['description']}; {q['quantized_layers']} layers dequantized to {q['dequantized_to']} "
            f"on load (kept as stored: {shown or 'none'}){notes}; lossless is judged against the dequantized target")


__all__ = ["DEQUANT_BYTES_PER_ELEMENT", "INDEX_DTYPES", "check_headers", "check_layer", "dequant_peak_bytes",
           "quantized_layers", "stored_dims", "summarize", "summary_line"]
