"""A quantized target's layers against its scheme, whatever the format: the header checks and
what the report says.

Each quantized layer's tensors are checked against the scheme from the safetensors headers alone
(DF182 a missing tensor, DF181 a contradiction: the format's own ``require_layer``), before anything
is allocated, and the run's ``quantization`` summary is made. Every size the dequantizers allocate
follows from what is checked here: a block or scale grid no larger than the weight it scales,
index tensors (``g_idx``, ``weight_shape``) of integers and of the weight's length, so one layer's
temporaries are bounded by its dequantized size (``dequant_peak_bytes``, which the memory
pre-check counts). Pure: nothing here imports torch.
"""

from __future__ import annotations

from typing import Any, Mapping

from dflash_ckpt.draftspec.quant.base import QuantScheme, require_block, require_index, require_index_dtype, require_scale, shape
from dflash_ckpt.errors import InputError

#: The linear layers of a dense decoder layer (what a quantizer converts).
LINEARS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
           "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")

#: Bytes one dequantized element costs at the peak of dequantizing its layer (``runtime/quant``):
#: the float32 values, the scale (and zero point) gathered per element, their product, and the
#: unpacked integers or the transposed copy (GPTQ, AWQ). Measured on a 4096x4096 layer (peak RSS
#: above the stored tensors, output included): FP8 block 12.4, GPTQ act-order 16.4, AWQ 16.7,
#: compressed-tensors pack-quantized asymmetric act-order 16.3; counted as 32 for margin.
DEQUANT_BYTES_PER_ELEMENT = 32


def require_layer(scheme: QuantScheme, base: str, tensors: Mapping[str, Any], out_features: int,
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
    scheme.record.require_layer(scheme, base, parts, tensors, out_features, in_features)


def quantized_layers(scheme: QuantScheme, tensors: Mapping[str, Any]) -> list[str]:
    """Names of the layers stored quantized (their ``base``), in header order."""
    bases = {n.rsplit(".", 1)[0] for n in tensors}
    return sorted(b for b in bases if scheme.is_quantized(b, tensors))


def stored_dims(scheme: QuantScheme, base: str, tensors: Mapping[str, Any]) -> tuple[int, int] | None:
    """``(out, in)`` of quantized layer ``base`` as its own headers give it (``None`` when they do
    not: a missing or misshapen tensor, named when the layer is loaded). pack-quantized stores no
    exact input width in a header (``weight_shape`` holds it as data), so its ``in`` is the packed
    width's upper bound, ``columns * 32 / bits``."""
    info = tensors.get(scheme.components(base)[scheme.record.stored(scheme)])
    if info is None or len(info.shape) != 2:
        return None
    rows, cols = (int(v) for v in info.shape)
    return scheme.record.dims(scheme, rows, cols)


def require_headers(scheme: QuantScheme, tensors: Mapping[str, Any]) -> None:
    """The whole checkpoint against ``scheme``, before anything is allocated: at least one layer
    stored quantized (else the config names a quantization the tensors do not have, DF181); each
    quantized layer's block within its stored weight and, where the weight's header gives its
    exact shape (FP8, float- and int-quantized), its scale grid that block's; and its index
    tensors (``g_idx``, ``weight_g_idx``, ``weight_shape``) integers. The rest of ``require_layer``
    (bits, group sizes) needs the model config's dimensions and runs when the layer is loaded."""
    layers = quantized_layers(scheme, tensors)
    for base in layers:
        parts = scheme.components(base)
        dims = stored_dims(scheme, base, tensors)
        if dims is not None and "weight" in parts and parts["scale"] in tensors:
            require_scale(scheme, parts["scale"], shape(tensors, parts["scale"]), *dims)
        if dims is not None:
            require_block(scheme, base, *dims)
        if parts.get("shape") in tensors:
            require_index(scheme, tensors, parts["shape"], (2,))
        if parts.get("g_idx") in tensors:
            require_index_dtype(scheme, tensors, parts["g_idx"])  # its length: against the config, on load
    if layers:
        return
    example = next(iter(scheme.components("model.layers.0.mlp.down_proj").values()))
    raise InputError(f"key 'quantization_config' names {scheme.method} ({scheme.format}), but no "
                     f"tensor is stored that way (no '{example}' or the like); remove the key if the weights are "
                     "not quantized, or restore the quantized files", code="DF181", path=scheme.where)


def dequant_peak_bytes(scheme: QuantScheme, tensors: Mapping[str, Any]) -> int:
    """The most memory dequantizing one layer takes on top of the loaded model, from the headers:
    its largest quantized layer's ``out * in`` elements at ``DEQUANT_BYTES_PER_ELEMENT`` (layers
    are dequantized one at a time; what ``require_headers`` admits keeps every temporary within
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
