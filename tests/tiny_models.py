"""Tiny random Qwen3/Llama targets and DFlash drafts, written to disk as real checkpoints.

Each builder writes ``config.json`` and safetensors files in the published key layouts (targets:
Hugging Face names with ``model.``; drafts: unprefixed), and targets get a ``tokenizer.json`` made
with ``tokenizers``, a ``tokenizer_config.json`` with a Qwen-style chat template and a
``generation_config.json``. Tensors are built here by name and shape, independently of
``dflash_ckpt.runtime``, so a naming or layout mistake in the loader fails the tests instead of
being mirrored.

Weights are random with ``std = 1/sqrt(fan_in)`` (embeddings 1), which keeps activations of order
one and top-2 logit margins far from ties, so greedy outputs are stable across dtypes.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Sequence

import torch
from safetensors.torch import save_file

VOCAB = 512
#: Row of the embedding table used as the mask; past the tokenizer's own vocabulary, as in Qwen3.
MASK_ID = 511
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]
EOS_ID, IM_END_ID = 0, 2

#: Qwen3's template reduced to what matters here: roles, the generation prompt and the empty
#: think block written when ``enable_thinking`` is false.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- endif %}"
    "{%- endif %}"
)

_CORPUS = [
    "A train leaves at 9:40 and covers 210 km at an average speed of 84 km/h.",
    "At what time does it arrive? Reason step by step and give the final answer.",
    "Write a Python function fib(n) that returns the n-th Fibonacci number iteratively.",
    "def fib(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n",
    "Give me three practical tips for staying focused while working from home, one sentence each.",
    "The quick brown fox jumps over the lazy dog. 0123456789 + - * / = ( ) [ ] { }",
    "user assistant system hello world thinking answer question number",
]


def write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2) + "\n")


def write_tokenizer(folder: Path, *, chat_template: str | None = CHAT_TEMPLATE, vocab_size: int = 320) -> None:
    """A byte-level BPE trained on a few sentences, plus its tokenizer_config.json."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(_CORPUS * 4, trainer)
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    cfg: dict[str, Any] = {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "bos_token": None,
                           "tokenizer_class": "Qwen2Tokenizer"}
    if chat_template is not None:
        cfg["chat_template"] = chat_template
    write_json(folder / "tokenizer_config.json", cfg)


class _Rand:
    def __init__(self, seed: int) -> None:
        self.gen = torch.Generator().manual_seed(seed)

    def linear(self, out_f: int, in_f: int) -> torch.Tensor:
        return torch.randn(out_f, in_f, generator=self.gen) / math.sqrt(in_f)

    def embed(self, rows: int, dim: int) -> torch.Tensor:
        return torch.randn(rows, dim, generator=self.gen)

    def norm(self, dim: int) -> torch.Tensor:
        return 1.0 + 0.05 * torch.randn(dim, generator=self.gen)

    def bias(self, dim: int) -> torch.Tensor:
        return 0.02 * torch.randn(dim, generator=self.gen)


_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _save(folder: Path, tensors: dict[str, torch.Tensor], dtype: str, shards: int) -> None:
    tensors = {k: v.to(_DTYPES[dtype]).contiguous() for k, v in tensors.items()}
    if shards == 1:
        save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
        return
    names = list(tensors)
    per = -(-len(names) // shards)
    weight_map = {}
    for i in range(shards):
        file = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: tensors[n] for n in names[i * per:(i + 1) * per]}
        save_file(part, str(folder / file), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(part, file))
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    write_json(folder / "model.safetensors.index.json", {"metadata": {"total_size": total}, "weight_map": weight_map})


def _layer_tensors(r: _Rand, p: str, *, hidden: int, heads: int, kv_heads: int, head_dim: int,
                   intermediate: int, qk_norm: bool, bias: bool) -> dict[str, torch.Tensor]:
    t = {
        f"{p}input_layernorm.weight": r.norm(hidden),
        f"{p}post_attention_layernorm.weight": r.norm(hidden),
        f"{p}self_attn.q_proj.weight": r.linear(heads * head_dim, hidden),
        f"{p}self_attn.k_proj.weight": r.linear(kv_heads * head_dim, hidden),
        f"{p}self_attn.v_proj.weight": r.linear(kv_heads * head_dim, hidden),
        f"{p}self_attn.o_proj.weight": r.linear(hidden, heads * head_dim),
        f"{p}mlp.gate_proj.weight": r.linear(intermediate, hidden),
        f"{p}mlp.up_proj.weight": r.linear(intermediate, hidden),
        f"{p}mlp.down_proj.weight": r.linear(hidden, intermediate),
    }
    if qk_norm:
        t[f"{p}self_attn.q_norm.weight"] = r.norm(head_dim)
        t[f"{p}self_attn.k_norm.weight"] = r.norm(head_dim)
    if bias:
        for proj, dim in (("q", heads * head_dim), ("k", kv_heads * head_dim), ("v", kv_heads * head_dim), ("o", hidden)):
            t[f"{p}self_attn.{proj}_proj.bias"] = r.bias(dim)
    return t


def make_target(
    folder: Path,
    *,
    model_type: str = "qwen3",
    hidden: int = 64,
    layers: int = 6,
    heads: int = 4,
    kv_heads: int = 2,
    head_dim: int = 16,
    intermediate: int = 128,
    vocab: int = VOCAB,
    dtype: str = "float32",
    store_dtype: str | None = None,
    tie: bool = False,
    seed: int = 0,
    shards: int = 1,
    text_config: bool = False,
    rope_scaling: dict[str, Any] | None = None,
    rope_theta: float = 10000.0,
    outlier: Sequence[tuple[int, float]] = (),
    outlier_channel: int = 5,
    tokenizer: bool = True,
    extra_config: dict[str, Any] | None = None,
) -> Path:
    """A dense Qwen3 (``q_norm``/``k_norm``) or Llama target.

    ``outlier``: ``(layer, value)`` pairs; each adds ``value`` to channel ``outlier_channel`` of
    the residual stream through that layer's ``o_proj`` bias (Qwen3's ``attention_bias``), as
    the massive activations of real Qwen3 models do. A later negative entry removes it again.
    """
    r = _Rand(seed)
    qk_norm = model_type == "qwen3"
    bias = bool(outlier)
    t: dict[str, torch.Tensor] = {"model.embed_tokens.weight": r.embed(vocab, hidden)}
    for i in range(layers):
        t.update(_layer_tensors(r, f"model.layers.{i}.", hidden=hidden, heads=heads, kv_heads=kv_heads,
                                head_dim=head_dim, intermediate=intermediate, qk_norm=qk_norm, bias=bias))
    for layer, value in outlier:
        t[f"model.layers.{layer}.self_attn.o_proj.bias"][outlier_channel] = value
    t["model.norm.weight"] = r.norm(hidden)
    if not tie:
        t["lm_head.weight"] = r.embed(vocab, hidden) / math.sqrt(hidden) * 8
    text: dict[str, Any] = {
        "model_type": model_type,
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "intermediate_size": intermediate,
        "vocab_size": vocab,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "max_position_embeddings": 4096,
        "rope_theta": rope_theta,
        "rope_scaling": rope_scaling,
        "attention_bias": bias,
        "tie_word_embeddings": tie,
        "eos_token_id": IM_END_ID,
        "pad_token_id": EOS_ID,
        "torch_dtype": dtype,
    }
    if model_type == "qwen3":
        text.update({"use_sliding_window": False, "sliding_window": None, "max_window_layers": layers})
    text.update(extra_config or {})
    folder.mkdir(parents=True, exist_ok=True)
    if text_config:
        # A multimodal wrapper: dimensions in text_config, text weights under model.language_model.
        t = {k.replace("model.", "model.language_model.", 1): v for k, v in t.items()}
        t["model.visual.patch_embed.proj.weight"] = r.linear(hidden, 48)
        config = {"architectures": ["Qwen3VLForConditionalGeneration"], "model_type": "qwen3_vl",
                  "text_config": text, "tie_word_embeddings": tie}
    else:
        arch = "Qwen3ForCausalLM" if model_type == "qwen3" else "LlamaForCausalLM"
        config = {"architectures": [arch], **text}
    write_json(folder / "config.json", config)
    write_json(folder / "generation_config.json", {"eos_token_id": [IM_END_ID, EOS_ID], "do_sample": False})
    _save(folder, t, store_dtype or dtype, shards)
    if tokenizer:
        write_tokenizer(folder)
    return folder


LLAMA3_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 64}


def make_draft(
    folder: Path,
    *,
    hidden: int = 64,
    taps: Sequence[int] = (1, 3, 5),
    num_target_layers: int = 6,
    layers: int = 2,
    heads: int = 4,
    kv_heads: int = 2,
    head_dim: int = 16,
    intermediate: int = 128,
    vocab: int = VOCAB,
    block_size: int = 8,
    mask_token_id: int = MASK_ID,
    layer_types: Sequence[str] | None = None,
    sliding_window: int | None = None,
    seed: int = 1,
    store_dtype: str = "bfloat16",
    architectures: Sequence[str] = ("DFlashDraftModel",),
    fc_outlier: tuple[int, float] | None = None,
    extra_config: dict[str, Any] | None = None,
    nested_block_size: bool = False,
) -> Path:
    """A DFlash v1 draft in the published layout (older style: ``block_size`` at the top level).

    ``fc_outlier = (channel, weight)`` sets the ``fc`` weights reading that channel of every tap
    to ``weight``, so that an outlier there is summed over the taps, as in Qwen3's fc overflow.
    """
    r = _Rand(seed)
    k = len(taps)
    t: dict[str, torch.Tensor] = {
        "fc.weight": r.linear(hidden, k * hidden),
        "hidden_norm.weight": r.norm(hidden),
        "norm.weight": r.norm(hidden),
    }
    for i in range(layers):
        t.update(_layer_tensors(r, f"layers.{i}.", hidden=hidden, heads=heads, kv_heads=kv_heads,
                                head_dim=head_dim, intermediate=intermediate, qk_norm=True, bias=False))
    if fc_outlier is not None:
        channel, weight = fc_outlier
        for j in range(k):
            t["fc.weight"][:, j * hidden + channel] = weight
    lt = list(layer_types) if layer_types is not None else ["full_attention"] * layers
    dflash: dict[str, Any] = {"mask_token_id": mask_token_id, "target_layer_ids": list(taps)}
    config: dict[str, Any] = {
        "architectures": list(architectures),
        "model_type": "qwen3",
        "attention_bias": False,
        "dflash_config": dflash,
        "dtype": store_dtype,
        "head_dim": head_dim,
        "hidden_act": "silu",
        "hidden_size": hidden,
        "intermediate_size": intermediate,
        "layer_types": lt,
        "max_position_embeddings": 4096,
        "num_attention_heads": heads,
        "num_hidden_layers": layers,
        "num_key_value_heads": kv_heads,
        "num_target_layers": num_target_layers,
        "rms_norm_eps": 1e-6,
        "rope_scaling": None,
        "rope_theta": 10000.0,
        "sliding_window": sliding_window,
        "use_sliding_window": sliding_window is not None,
        "vocab_size": vocab,
    }
    if nested_block_size:
        dflash["block_size"] = block_size
    else:
        config["block_size"] = block_size
    config.update(extra_config or {})
    folder.mkdir(parents=True, exist_ok=True)
    write_json(folder / "config.json", config)
    _save(folder, t, store_dtype, 1)
    return folder


def make_pair(root: Path, **target_kw: Any) -> tuple[Path, Path]:
    """The default tiny pair: a 6-layer Qwen3 target and a 2-layer draft tapping 1, 3, 5."""
    target = make_target(root / "target", **target_kw)
    draft = make_draft(root / "draft")
    return draft, target


def load_runtime_pair(draft_dir: Path, target_dir: Path, *, draft_dtype: str = "float32",
                      target_dtype: str = "float32", device: str = "cpu") -> tuple[Any, Any]:
    """``(target, draft)`` runtime modules loaded from the folders (for in-process tests)."""
    from dflash_ckpt.draftspec.draft_settings import DraftSettings
    from dflash_ckpt.draftspec.target_settings import TargetSettings
    from dflash_ckpt.runtime.loading import load_draft, load_target
    from dflash_ckpt.sources.local import LocalSource
    from dflash_ckpt.draftspec.specs import read_draft_spec as read_draft, read_target_spec as read_target

    spec = read_draft(LocalSource(draft_dir))
    tspec = read_target(LocalSource(target_dir))
    dev = torch.device(device)
    target = load_target(target_dir, TargetSettings.from_config(tspec.config, tspec.where), dtype=_DTYPES[target_dtype], device=dev)
    draft = load_draft(draft_dir, DraftSettings.from_spec(spec), dtype=_DTYPES[draft_dtype], device=dev)
    return target, draft


def load_draft_only(draft_dir: Path, dtype: torch.dtype = torch.float32) -> Any:
    """The folder's draft runtime module (v1 or DFlash2, as its config says) on the CPU, frozen."""
    from dflash_ckpt.draftspec.draft_settings import DraftSettings
    from dflash_ckpt.runtime.loading import load_draft
    from dflash_ckpt.sources.local import LocalSource
    from dflash_ckpt.draftspec.specs import read_draft_spec as read_draft

    args = DraftSettings.from_spec(read_draft(LocalSource(draft_dir)))
    return load_draft(draft_dir, args, dtype=dtype, device=torch.device("cpu")).requires_grad_(False)


def draft_inputs(c: int, n: int, seed: int = 0, hidden: int = 64, taps: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    """Random tapped features ``[c, taps * hidden]`` (scaled up, as a target's are) and block
    embeddings ``[n, hidden]`` for a draft's forward."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(c, taps * hidden, generator=g) * 3, torch.randn(n, hidden, generator=g)


def load_target_only(target_dir: Path, *, dtype: str = "float32") -> Any:
    from dflash_ckpt.draftspec.target_settings import TargetSettings
    from dflash_ckpt.runtime.loading import load_target
    from dflash_ckpt.sources.local import LocalSource
    from dflash_ckpt.draftspec.specs import read_target_spec as read_target

    tspec = read_target(LocalSource(target_dir))
    return load_target(target_dir, TargetSettings.from_config(tspec.config, tspec.where), dtype=_DTYPES[dtype], device=torch.device("cpu"))


def make_draft2(
    folder: Path,
    *,
    conv_kernel_size: int = 2,
    conv_group_size: int = 16,
    selector_rank: int = 8,
    selector_top_k: int = 16,
    seed: int = 1,
    dynamic_scale: float = 1.0,
    codebook_scale: float = 1.0,
    codebook_suffix: str = "",
    **draft_kw: Any,
) -> Path:
    """A DFlash2 draft: ``make_draft``'s v1 tensors plus, named as published, per layer
    ``{attention,mlp}_conv.base_kernel [2, ks, H]`` and ``.kernel_projection.weight
    [2*ks*H/g, H]``, and ``candidate_selector.hidden_projection.weight [r, H]`` and the two
    codebooks ``[vocab, r]`` (no ``.weight`` suffix unless ``codebook_suffix`` says so). The
    four keys go in ``dflash_config``. Base kernels are near the identity (tap 0 about 1), the
    dynamic part of order ``dynamic_scale``, so the conv changes the output but keeps it stable."""
    make_draft(folder, seed=seed, architectures=("DFlash2DraftModel",), **draft_kw)
    cfg = json.loads((folder / "config.json").read_text())
    cfg["dflash_config"].update(conv_kernel_size=conv_kernel_size, conv_group_size=conv_group_size,
                                selector_rank=selector_rank, selector_top_k=selector_top_k)
    write_json(folder / "config.json", cfg)
    from safetensors.torch import load_file

    t = {k: v.float() for k, v in load_file(str(folder / "model.safetensors")).items()}
    r = _Rand(seed + 100)
    h, ks = cfg["hidden_size"], conv_kernel_size
    for i in range(cfg["num_hidden_layers"]):
        for conv in ("attention_conv", "mlp_conv"):
            base = 0.3 * torch.randn(2, ks, h, generator=r.gen)
            base[:, 0] += 1.0
            t[f"layers.{i}.{conv}.base_kernel"] = base
            t[f"layers.{i}.{conv}.kernel_projection.weight"] = dynamic_scale * r.linear(2 * ks * (h // conv_group_size), h)
    vocab = cfg["vocab_size"]
    t["candidate_selector.hidden_projection.weight"] = r.linear(selector_rank, h) * 2
    t["candidate_selector.predecessor_codebook" + codebook_suffix] = codebook_scale * r.embed(vocab, selector_rank)
    t["candidate_selector.successor_codebook" + codebook_suffix] = codebook_scale * r.embed(vocab, selector_rank)
    _save(folder, t, cfg["dtype"], 1)
    return folder


# -- float64 reference pieces (the draft tests' transcriptions; no dflash_ckpt.runtime) ------------


def ref_rms(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm: ``w * x / sqrt(mean(x^2) + eps)``."""
    return w * (x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps))


def ref_rope(x: torch.Tensor, pos: torch.Tensor, freq: torch.Tensor) -> torch.Tensor:
    """Rotate-half RoPE of ``x [..., n, d]`` at positions ``pos [n]`` (in float64)."""
    ang = pos[:, None].double() * freq[None, :]
    c, s = torch.cos(ang), torch.sin(ang)
    a, b = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat([a * c - b * s, b * c + a * s], dim=-1)
