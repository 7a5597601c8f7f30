"""A quantized target: DF180-DF182 (what smoke-run and probe-taps refuse before dequantizing).

Rows as ``rules.Rule`` takes them (code, name, severity, summary, explanation, fix), plain
data so that ``rules`` (which every layer imports) imports nothing of the package for them."""

from __future__ import annotations

ROWS: tuple[tuple[str, str, str, str, str, str], ...] = (
    ("DF180", "quant-format-unsupported", "error",
     "The target's quantization_config names a format the runtime does not dequantize",
     "The reference runtime runs a quantized target by dequantizing it on load into the compute dtype: "
     "FP8 e4m3 (per-tensor or block scales), AWQ GEMM int4, GPTQ int4/int8 (gptq or gptq_v2, act-order, "
     "symmetric or not) and compressed-tensors pack-quantized, float-quantized and int-quantized. Another "
     "format, version, bit width or strategy would be read as garbage, so the run is refused.",
     "Run the target's unquantized release, or a release in one of the supported formats."),
    ("DF181", "quant-config-contradicts", "error", "The quantization_config contradicts the quantized tensors",
     "The bits, group size or block size the config gives imply the shapes of each layer's packed weight, "
     "scales and zero points; a header that disagrees (or a block larger than the weight it scales, a "
     "weight_shape that differs from the model config or is not integers, a g_idx or weight_g_idx naming "
     "groups that do not exist, non-finite scales) means the config is not the one the quantizer wrote, "
     "and dequantizing would compute garbage or allocate far beyond the layer's size.",
     "Restore the config the quantizer wrote, or re-quantize the target."),
    ("DF182", "quant-tensor-missing", "error", "A quantized layer lacks one of its tensors",
     "A quantized layer is several tensors (packed weight, scales, zero points; FP8: weight and "
     "weight_scale_inv). One of them is missing, or an FP8/int8 weight is stored without a "
     "quantization_config saying how to scale it.",
     "Download the missing shard again, or restore the config the quantizer wrote."),
)
