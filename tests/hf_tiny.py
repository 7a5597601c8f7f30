"""Tiny random-init targets of every published family, built from transformers' config classes.

Each builder makes a model with transformers itself and writes it with ``save_pretrained``
(safetensors, the checkpoint layout transformers publishes: wrappers keep their text model under
``model.language_model.`` and a small vision tower beside it), plus this suite's tokenizer, so
``smoke-run`` can run the folder. Sizes are a few hundred thousand parameters: seconds each.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import torch

import tiny_models as tm

VOCAB = tm.VOCAB
LAYERS = 4
#: gpt-oss / gemma-4 sliding window: shorter than every prompt the tests use.
WINDOW = 6


def _common(**kw: Any) -> dict[str, Any]:
    base = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=LAYERS,
                num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=1024,
                tie_word_embeddings=False, bos_token_id=tm.EOS_ID, eos_token_id=tm.IM_END_ID, pad_token_id=tm.EOS_ID)
    base.update(kw)
    return base


def _llama() -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    return LlamaForCausalLM(LlamaConfig(**_common(rope_parameters={"rope_type": "default", "rope_theta": 10000.0})))


def _qwen3() -> Any:
    from transformers import Qwen3Config, Qwen3ForCausalLM

    return Qwen3ForCausalLM(Qwen3Config(**_common()))


def _qwen3_moe() -> Any:
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    return Qwen3MoeForCausalLM(Qwen3MoeConfig(**_common(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                                                        norm_topk_prob=True)))


_LINEAR = dict(linear_num_value_heads=4, linear_num_key_heads=2, linear_key_head_dim=16, linear_value_head_dim=16,
               linear_conv_kernel_dim=4)


def _qwen3_next() -> Any:
    from transformers import Qwen3NextConfig, Qwen3NextForCausalLM

    return Qwen3NextForCausalLM(Qwen3NextConfig(**_common(**_LINEAR, num_experts=4, num_experts_per_tok=2,
                                                          moe_intermediate_size=32, shared_expert_intermediate_size=32)))


def _qwen35_vision() -> dict[str, Any]:
    return dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64, patch_size=8,
                num_position_embeddings=16)


def _qwen3_5() -> Any:
    from transformers import Qwen3_5Config, Qwen3_5ForConditionalGeneration

    text = _common(**_LINEAR)
    text.pop("tie_word_embeddings")
    return Qwen3_5ForConditionalGeneration(Qwen3_5Config(text_config=text, vision_config=_qwen35_vision(),
                                                         tie_word_embeddings=False))


def _qwen3_5_moe() -> Any:
    from transformers import Qwen3_5MoeConfig, Qwen3_5MoeForConditionalGeneration

    text = _common(**_LINEAR, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                   shared_expert_intermediate_size=32)
    text.pop("tie_word_embeddings")
    return Qwen3_5MoeForConditionalGeneration(Qwen3_5MoeConfig(text_config=text, vision_config=_qwen35_vision(),
                                                               tie_word_embeddings=False))


def _gpt_oss() -> Any:
    from transformers import GptOssConfig, GptOssForCausalLM

    cfg = GptOssConfig(**_common(num_local_experts=4, num_experts_per_tok=2, sliding_window=WINDOW,
                                 intermediate_size=64,
                                 layer_types=["sliding_attention", "full_attention"] * (LAYERS // 2)))
    return GptOssForCausalLM(cfg)


def _gemma4_text(moe: bool) -> dict[str, Any]:
    kw = _common(sliding_window=WINDOW, layer_types=["sliding_attention", "full_attention"] * (LAYERS // 2),
                 final_logit_softcapping=30.0, hidden_size_per_layer_input=0, vocab_size_per_layer_input=VOCAB,
                 global_head_dim=32, tie_word_embeddings=True)
    if moe:
        kw.update(enable_moe_block=True, num_experts=4, top_k_experts=2, moe_intermediate_size=32)
    return kw


def _gemma4(moe: bool = False) -> Any:
    from transformers import Gemma4Config, Gemma4ForConditionalGeneration

    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                  num_key_value_heads=2, head_dim=16, patch_size=8, position_embedding_size=64)
    return Gemma4ForConditionalGeneration(Gemma4Config(text_config=_gemma4_text(moe), vision_config=vision,
                                                       audio_config=None))


def _deepseek_v3_cfg() -> dict[str, Any]:
    return _common(num_key_value_heads=4, moe_intermediate_size=32, n_shared_experts=1, n_routed_experts=4,
                   num_experts_per_tok=2, n_group=1, topk_group=1, first_k_dense_replace=1, kv_lora_rank=16,
                   q_lora_rank=32, qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16, head_dim=8,
                   rope_interleave=True, num_mtp_layers=0)


def _deepseek_v3() -> Any:
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    return DeepseekV3ForCausalLM(DeepseekV3Config(**_deepseek_v3_cfg()))


BUILDERS: dict[str, Callable[[], Any]] = {
    "llama": _llama,
    "qwen3": _qwen3,
    "qwen3_moe": _qwen3_moe,
    "qwen3_5": _qwen3_5,
    "qwen3_5_moe": _qwen3_5_moe,
    "qwen3_next": _qwen3_next,
    "gpt_oss": _gpt_oss,
    "gemma4": lambda: _gemma4(False),
    "gemma4_moe": lambda: _gemma4(True),
    "deepseek_v3": _deepseek_v3,
}


def build(family: str, *, seed: int = 0) -> Any:
    """A tiny ``family`` model, weights std ``1/sqrt(fan_in)`` (embeddings 1) for clear top-2 margins."""
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    torch.manual_seed(seed)
    model = BUILDERS[family]().eval()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2 and p.is_floating_point():
                # gemma multiplies its embeddings by sqrt(hidden): keep its residual stream at std 1
                fan_in = p.shape[-1] if "embed" not in name or family.startswith("gemma") else 1
                p.copy_(torch.randn(p.shape, generator=gen) / fan_in ** 0.5)
    return model


def make_hf_target(folder: Path, family: str, *, seed: int = 0, model: Any = None) -> Path:
    """Write a tiny ``family`` target with ``save_pretrained`` (safetensors) and its tokenizer."""
    model = build(family, seed=seed) if model is None else model
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(folder))
    tm.write_tokenizer(folder)
    return folder


def make_kimi_target(folder: Path, *, seed: int = 0) -> Path:
    """A Kimi-K2.5-style wrapper: the DeepSeek-V3 text model under ``language_model.model.``, its head
    under ``language_model.lm_head``, a ``kimi_k25`` config with ``text_config`` of type ``kimi_k2``
    and an ``auto_map`` (as published; never run). Built by renaming a tiny DeepSeek-V3 checkpoint."""
    import json

    from safetensors.torch import load_file, save_file

    src = make_hf_target(folder.with_name(folder.name + "-src"), "deepseek_v3", seed=seed)
    tensors = load_file(str(src / "model.safetensors"))
    out = {("language_model." + k): v for k, v in tensors.items()}
    out["vision_tower.patch_embed.proj.weight"] = torch.zeros(8, 3, 2, 2)
    folder.mkdir(parents=True, exist_ok=True)
    save_file(out, str(folder / "model.safetensors"), metadata={"format": "pt"})
    text = json.loads((src / "config.json").read_text())
    text["model_type"] = "kimi_k2"
    text.pop("architectures", None)
    cfg = {"architectures": ["KimiK25ForConditionalGeneration"], "model_type": "kimi_k25",
           "auto_map": {"AutoConfig": "configuration_kimi_k25.KimiK25Config",
                        "AutoModel": "modeling_kimi_k25.KimiK25ForConditionalGeneration"},
           "text_config": text, "vision_config": {"model_type": "kimi_k25_vision"}, "dtype": "float32"}
    (folder / "config.json").write_text(json.dumps(cfg, indent=2))
    tm.write_tokenizer(folder)
    return folder


FP4 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])


def make_mxfp4_gpt_oss(root: Path, *, seed: int = 0) -> tuple[Path, Path]:
    """The same tiny gpt-oss twice: ``root/bf16`` with plain expert weights and ``root/mxfp4`` with
    them as published (``*_blocks`` of FP4 E2M1 nibbles, low nibble first, and ``*_scales`` of
    biased power-of-two exponents per 32 inputs, plus ``quantization_config``). The expert
    weights are drawn on the FP4 grid times a power of two, so both hold exactly the same model."""
    import json

    from safetensors.torch import load_file, save_file

    model = build("gpt_oss", seed=seed)
    gen = torch.Generator().manual_seed(seed + 7)
    packed: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        for name, p in model.named_parameters():
            if not name.endswith(("experts.gate_up_proj", "experts.down_proj")):
                continue
            e, fan_in, out = p.shape  # HF keeps [experts, in, out]; the checkpoint [experts, out, in]
            idx = torch.randint(0, 16, (e, out, fan_in // 32, 32), generator=gen)
            exp = torch.randint(-4, -1, (e, out, fan_in // 32), generator=gen)
            values = FP4[idx] * torch.pow(2.0, exp.float())[..., None]
            p.copy_(values.reshape(e, out, fan_in).transpose(1, 2))
            nib = idx.to(torch.uint8)
            packed[name + "_blocks"] = (nib[..., 0::2] | (nib[..., 1::2] << 4)).contiguous()
            packed[name + "_scales"] = (exp + 127).to(torch.uint8).contiguous()
    plain = make_hf_target(root / "bf16", "gpt_oss", model=model)
    quant = root / "mxfp4"
    quant.mkdir(parents=True, exist_ok=True)
    tensors = {k: v for k, v in load_file(str(plain / "model.safetensors")).items()
               if not k.endswith(("experts.gate_up_proj", "experts.down_proj"))}
    tensors.update(packed)
    save_file(tensors, str(quant / "model.safetensors"), metadata={"format": "pt"})
    cfg = json.loads((plain / "config.json").read_text())
    cfg["quantization_config"] = {"quant_method": "mxfp4", "modules_to_not_convert": [
        "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}
    (quant / "config.json").write_text(json.dumps(cfg, indent=2))
    tm.write_tokenizer(quant)
    return plain, quant
