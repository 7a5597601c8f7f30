"""Quantized targets: one record per format (``FORMATS``), as engines are, and what they share.

Production targets are served quantized; the reference runtime runs them by dequantizing each
quantized linear layer into the compute dtype while loading. Each format's module holds its whole
story: how its ``quantization_config`` is read (``parse``), which tensors make one layer and how
their headers are checked (``components``, ``require_layer``), and how one layer is dequantized
(``dequantize``, which imports torch when called). Formats read (each from its producer's own
code, docs/quantized-targets.md): ``fp8`` (transformers' fine-grained FP8), ``awq`` (AutoAWQ's
GEMM), ``gptq`` (AutoGPTQ / GPTQModel, ``gptq`` and ``gptq_v2``) and ``compressed-tensors``
(llm-compressor: pack-, float- and int-quantized). ``layers`` checks a checkpoint against its
scheme whatever the format. Nothing is imported from torch at import time, so the checks run
before anything is allocated and ``inspect`` makes them too.
"""

from __future__ import annotations

from typing import Any, Mapping

from dflash_ckpt.draftspec.quant import awq, compressed, fp8, gptq
from dflash_ckpt.draftspec.quant.base import QuantFormat, QuantScheme, bad
from dflash_ckpt.draftspec.quant.layers import (DEQUANT_BYTES_PER_ELEMENT, LINEARS, require_headers, require_layer,
                                                dequant_peak_bytes, quantized_layers, stored_dims, summarize,
                                                summary_line)

#: Every format the runtime dequantizes, by ``quant_method``.
FORMATS: dict[str, QuantFormat] = {f.method: f for f in (fp8.FORMAT, awq.FORMAT, gptq.FORMAT, compressed.FORMAT)}
#: What the runtime dequantizes, as a finding names it.
SUPPORTED = tuple(f.supported for f in FORMATS.values())


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
    record = FORMATS.get(method) if isinstance(method, str) else None
    if record is None:
        raise bad(where, "quant_method", method, "; ".join(SUPPORTED))
    return record.parse(q, where)


__all__ = ["DEQUANT_BYTES_PER_ELEMENT", "FORMATS", "LINEARS", "SUPPORTED", "QuantFormat", "QuantScheme", "require_headers",
           "require_layer", "dequant_peak_bytes", "quantized_layers", "read_scheme", "stored_dims", "summarize",
           "summary_line"]
