"""A ``TargetSpec`` carries its config decoded (draftspec/specs.py): a multimodal wrapper's
``text_config`` is read there, once, decoder first and then the wrapper, so nothing above
draftspec/ reads the dict (tests/test_house.py scans for it)."""

from __future__ import annotations

from dflash_ckpt.draftspec.decoder_dims import default_head_dim
from dflash_ckpt.draftspec.specs import build_spec, target_from_config

WRAPPED = {
    "model_type": "qwen3_vl", "architectures": ["Qwen3VLForConditionalGeneration"], "tie_word_embeddings": True,
    "eos_token_id": 5, "vocab_size": 300, "quantization_config": {"quant_method": "fp8"},
    "text_config": {"model_type": "qwen3", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2,
                    "max_position_embeddings": 4096, "tie_word_embeddings": False, "eos_token_id": [6, 7],
                    "dtype": "bfloat16", "rope_scaling": {"original_max_position_embeddings": 4096, "factor": 4.0}},
}


def test_a_wrapper_is_read_decoder_first() -> None:
    spec = target_from_config(WRAPPED, label="t", where="t/config.json")
    assert spec.text_config_used and spec.model_type == "qwen3"
    assert spec.max_position_embeddings == 4096 and spec.served_context == 16384
    assert spec.tie_word_embeddings() is False  # the decoder's key wins over the wrapper's
    assert spec.dims.head_dim == 16 and spec.dims.num_key_value_heads == 4 and spec.dims.vocab_size == 300
    assert spec.eos_values == [5, [6, 7]] and spec.dtype == "bfloat16"
    assert spec.quant_method == "fp8" and spec.quantization_blocks == [{"quant_method": "fp8"}]
    assert spec.architectures_stated and spec.dense


def test_a_plain_config_and_its_defaults() -> None:
    spec = target_from_config({"hidden_size": 96, "num_attention_heads": 4, "num_experts": 8,
                               "architectures": ["", "X"], "max_position_embeddings": True}, label="t", where="t")
    assert not spec.text_config_used and spec.eos_values == [None]
    assert spec.max_position_embeddings is None  # a bool is no position count
    assert spec.tie_word_embeddings() is False and spec.tie_word_embeddings(True) is True
    assert not spec.architectures_stated and not spec.dense and spec.quantization_blocks == []
    assert spec.stated("pad_token_id") == [(None, "config.json"), (None, "config.json"), (None, "generation_config.json")]


def test_the_head_size_is_derived_in_one_place() -> None:
    assert default_head_dim(64, 4) == 16 and default_head_dim(65, 4) is None and default_head_dim(None, 4) is None
    assert build_spec({"hidden_size": 64, "num_attention_heads": 4}, label="d").dims.head_dim == 16
    assert build_spec({"hidden_size": 64, "num_attention_heads": 4, "head_dim": 32}, label="d").dims.head_dim == 32
