"""Random-weight bf16 pairs at the real shapes of Qwen3-0.6B and Qwen3-4B, built once and cached.

    python benchmarks/real_pairs.py 0.6b        # prints the draft and target folders

The target is a Hugging Face Qwen3 folder (``model.*`` names, tied embeddings, bf16); the draft
has the published Qwen3-4B-DFlash-b16 layout (5 layers, block 16, fixtures/published), scaled to
the target's hidden size. The tokenizer is the tiny pair's (its ids are valid rows of the big
vocabulary). Files are written tensor by tensor (a safetensors header, then each tensor's bytes),
so building the 8 GiB 4B target holds one tensor in memory, not the model. Cached under
fixtures/build/real-size/ (git-ignored); a folder is reused when its ``done`` marker exists.
"""

from __future__ import annotations

import json
import shutil
import struct
import sys
from pathlib import Path
from typing import Iterator

import torch

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "fixtures" / "build" / "real-size"
TINY_TARGET = ROOT / "fixtures" / "tiny-pair" / "target"

_COMMON = {"vocab_size": 151936, "head_dim": 128, "rms_norm_eps": 1e-6, "rope_theta": 1000000,
           "max_position_embeddings": 40960, "tie_word_embeddings": True, "model_type": "qwen3"}
#: Qwen/Qwen3-0.6B and Qwen/Qwen3-4B dimensions (their config.json), and the draft's tap layers
#: (the published 4B draft's; the 0.6B one by the evenly spaced formula over 28 layers).
SHAPES: dict[str, dict] = {
    "0.6b": {**_COMMON, "hidden_size": 1024, "num_hidden_layers": 28, "num_attention_heads": 16,
             "num_key_value_heads": 8, "intermediate_size": 3072, "taps": [1, 7, 13, 19, 25]},
    "4b": {**_COMMON, "hidden_size": 2560, "num_hidden_layers": 36, "num_attention_heads": 32,
           "num_key_value_heads": 8, "intermediate_size": 9728, "taps": [1, 9, 17, 25, 33]},
}
DRAFT_LAYERS, BLOCK, MASK_ID = 5, 16, 151669


def _layer_shapes(prefix: str, s: dict) -> Iterator[tuple[str, tuple[int, ...]]]:
    h, d, i = s["hidden_size"], s["head_dim"], s["intermediate_size"]
    q, kv = s["num_attention_heads"] * d, s["num_key_value_heads"] * d
    yield prefix + "input_layernorm.weight", (h,)
    yield prefix + "post_attention_layernorm.weight", (h,)
    yield prefix + "self_attn.q_proj.weight", (q, h)
    yield prefix + "self_attn.k_proj.weight", (kv, h)
    yield prefix + "self_attn.v_proj.weight", (kv, h)
    yield prefix + "self_attn.o_proj.weight", (h, q)
    yield prefix + "self_attn.q_norm.weight", (d,)
    yield prefix + "self_attn.k_norm.weight", (d,)
    yield prefix + "mlp.gate_proj.weight", (i, h)
    yield prefix + "mlp.up_proj.weight", (i, h)
    yield prefix + "mlp.down_proj.weight", (h, i)


def target_tensors(s: dict) -> list[tuple[str, tuple[int, ...]]]:
    out = [("model.embed_tokens.weight", (s["vocab_size"], s["hidden_size"])), ("model.norm.weight", (s["hidden_size"],))]
    for n in range(s["num_hidden_layers"]):
        out += list(_layer_shapes(f"model.layers.{n}.", s))
    return out


def draft_tensors(s: dict) -> list[tuple[str, tuple[int, ...]]]:
    h = s["hidden_size"]
    out = [("fc.weight", (h, len(s["taps"]) * h)), ("hidden_norm.weight", (h,)), ("norm.weight", (h,))]
    for n in range(DRAFT_LAYERS):
        out += list(_layer_shapes(f"layers.{n}.", s))
    return out


def _values(name: str, shape: tuple[int, ...], gen: torch.Generator) -> Iterator[torch.Tensor]:
    """bf16 values in row chunks: norms near 1, embeddings 0.05 (logits of a few units, as the
    issue's near ties had), projections 1/sqrt(fan_in) (activations of order one)."""
    if len(shape) == 1:
        yield (1 + 0.05 * torch.randn(shape, generator=gen)).to(torch.bfloat16)
        return
    std = 0.05 if "embed" in name else shape[1] ** -0.5
    rows = max(1, (1 << 24) // shape[1])
    for r in range(0, shape[0], rows):
        n = min(rows, shape[0] - r)
        yield (torch.randn(n, shape[1], generator=gen) * std).to(torch.bfloat16)


def write_safetensors(path: Path, tensors: list[tuple[str, tuple[int, ...]]], seed: int, *, sparse: bool = False) -> None:
    """A bf16 safetensors file of random values, written tensor by tensor (``sparse``: the real
    header and a hole for the data, real size on paper and none on disk, for header-only tests)."""
    header: dict[str, dict] = {}
    offset = 0
    for name, shape in tensors:
        size = 2
        for dim in shape:
            size *= dim
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    gen = torch.Generator().manual_seed(seed)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as fh:
        fh.write(struct.pack("<Q", len(raw)) + raw)
        if sparse:
            fh.truncate(8 + len(raw) + offset)
            tensors = []
        for name, shape in tensors:
            for chunk in _values(name, shape, gen):
                fh.write(chunk.view(torch.int16).numpy().tobytes())
    tmp.replace(path)


def build_pair(shape: str, root: Path | None = None, *, sparse: bool = False) -> tuple[Path, Path]:
    """``(draft folder, target folder)`` for ``shape`` (``0.6b`` or ``4b``), built if missing
    (under ``root``, default the cache; ``sparse``: see ``write_safetensors``)."""
    s = SHAPES[shape]
    root = root or CACHE / shape
    draft, target = root / "draft", root / "target"
    if (root / "done").exists():
        return draft, target
    for d in (draft, target):
        d.mkdir(parents=True, exist_ok=True)
    keys = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "intermediate_size",
            *_COMMON)
    tcfg = {"architectures": ["Qwen3ForCausalLM"], **{k: s[k] for k in keys}, "dtype": "bfloat16",
            "attention_bias": False, "hidden_act": "silu", "bos_token_id": 720, "eos_token_id": 722,
            "use_sliding_window": False, "sliding_window": None, "rope_scaling": None}
    (target / "config.json").write_text(json.dumps(tcfg, indent=2))
    for f in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        shutil.copy(TINY_TARGET / f, target / f)
    write_safetensors(target / "model.safetensors", target_tensors(s), seed=0, sparse=sparse)
    dcfg = {"architectures": ["DFlashDraftModel"], "model_type": "qwen3", "block_size": BLOCK,
            "dflash_config": {"mask_token_id": MASK_ID, "target_layer_ids": s["taps"]},
            "num_target_layers": s["num_hidden_layers"], "num_hidden_layers": DRAFT_LAYERS,
            **{k: s[k] for k in ("hidden_size", "num_attention_heads", "num_key_value_heads", "intermediate_size",
                                 "vocab_size", "head_dim", "rms_norm_eps", "rope_theta", "max_position_embeddings")},
            "layer_types": ["full_attention"] * DRAFT_LAYERS, "dtype": "bfloat16", "attention_bias": False,
            "hidden_act": "silu", "tie_word_embeddings": True, "use_sliding_window": False, "sliding_window": None}
    (draft / "config.json").write_text(json.dumps(dcfg, indent=2))
    write_safetensors(draft / "model.safetensors", draft_tensors(s), seed=1, sparse=sparse)
    (root / "done").write_text("ok\n")
    return draft, target


if __name__ == "__main__":
    for name in sys.argv[1:] or ["0.6b"]:
        d, t = build_pair(name)
        print(d, t)
