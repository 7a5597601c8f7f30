"""Logits of a (quantized) target from transformers, run in another Python: the independent oracle.

    PYTHON tests/quant_oracle.py TARGET_DIR OUT.json [--fp8 | --vllm-ref VARIANT]

Plain: loads TARGET_DIR with ``AutoModelForCausalLM`` (transformers decompresses a
compressed-tensors checkpoint on a CPU; needs compressed-tensors, as in the vLLM venv).
``--fp8``: fine-grained FP8 weights dequantized by transformers' own ``_dequantize_fp8_weight``
(its FP8 loader needs accelerate, which is not installed). ``--vllm-ref VARIANT``: AWQ/GPTQ,
which transformers loads only through GPTQModel/AutoAWQ (CUDA): the dequantized weights vLLM's
quantizer computed for the codes (``fixtures/make_quantized.reference_state``, vLLM venv). The
last two run transformers' Qwen3 over those weights. Writes the float32 logits of ``IDS``.
Nothing of dflash_ckpt is imported.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

IDS = [(i * 37 + 11) % 700 for i in range(40)]


def main() -> None:
    from transformers import AutoConfig, AutoModelForCausalLM

    folder, out = Path(sys.argv[1]), Path(sys.argv[2])
    torch.manual_seed(0)
    if "--fp8" not in sys.argv and "--vllm-ref" not in sys.argv:
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    else:
        from safetensors.torch import load_file

        stored = load_file(str(folder / "model.safetensors"))
        if "--fp8" in sys.argv:
            from transformers.integrations.finegrained_fp8 import _dequantize_fp8_weight

            block = json.loads((folder / "config.json").read_text())["quantization_config"]["weight_block_size"]
            weights = {}
            for k, v in stored.items():
                if k.endswith("weight_scale_inv"):
                    continue
                scale = stored.get(k + "_scale_inv")
                weights[k] = _dequantize_fp8_weight(v, scale, block, torch.float32) if scale is not None else v.float()
        else:
            sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
            from make_quantized import SOURCE, reference_state

            weights = reference_state(load_file(str(SOURCE / "model.safetensors")), sys.argv[sys.argv.index("--vllm-ref") + 1])
        cfg = AutoConfig.from_pretrained(folder)
        if hasattr(cfg, "quantization_config"):
            del cfg.quantization_config
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
        missing, unexpected = model.load_state_dict({k: v.float() for k, v in weights.items()}, strict=False)
        if unexpected or any(not k.endswith("lm_head.weight") for k in missing):
            raise SystemExit(f"weights do not fit: missing {missing}, unexpected {unexpected}")
        model.tie_weights()
    model.eval()
    with torch.no_grad():
        logits = model(torch.tensor([IDS])).logits[0].float()
    kinds = sorted({type(m).__name__ for m in model.modules() if "Linear" in type(m).__name__})
    out.write_text(json.dumps({"ids": IDS, "logits": logits.tolist(), "linear_classes": kinds}))


if __name__ == "__main__":
    main()
