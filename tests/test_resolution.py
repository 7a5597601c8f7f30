"""Resolution rules of docs/DESIGN.md section 2 and the reader models of section 3, on in-memory configs."""

from __future__ import annotations

import copy

import pytest

from dflash_ckpt.checks import check_config
from dflash_ckpt.checks.engines.verdicts import judge_readers
from dflash_ckpt.draftspec.specs import build_spec, target_from_config

OLDER = {
    "architectures": ["DFlashDraftModel"], "block_size": 16, "num_target_layers": 36,
    "dflash_config": {"mask_token_id": 151669, "target_layer_ids": [1, 9, 17, 25, 33]},
    "hidden_size": 2560, "num_hidden_layers": 5, "num_attention_heads": 32, "num_key_value_heads": 8,
    "head_dim": 128, "intermediate_size": 9728, "vocab_size": 151936,
    "layer_types": ["full_attention"] * 5, "rope_theta": 1000000,
}


def spec_of(cfg: dict) -> object:
    return build_spec(cfg, label="draft", where="draft/config.json")


def test_nested_wins_and_provenance() -> None:
    cfg = copy.deepcopy(OLDER)
    cfg["dflash_config"]["block_size"] = 16
    s = spec_of(cfg)
    assert s.keys["block_size"].source == "dflash_config" and not s.keys["block_size"].conflict
    assert s.keys["num_target_layers"].source == "top_level"
    assert s.layout == "nested"


@pytest.mark.parametrize(
    "mutate, layout",
    [
        (lambda c: None, "top-level"),
        (lambda c: c["dflash_config"].update(block_size=c.pop("block_size")), "nested"),
        (lambda c: c.update(mask_token_id=c["dflash_config"].pop("mask_token_id")), "mixed"),
        (lambda c: c.update(c.pop("dflash_config")), "mixed"),
        (lambda c: [c.pop("dflash_config"), c.pop("block_size")], "none"),
    ],
    ids=["older", "newer", "mask-at-top", "flat", "none"],
)
def test_layouts(mutate, layout: str) -> None:
    cfg = copy.deepcopy(OLDER)
    mutate(cfg)
    assert spec_of(cfg).layout == layout


def test_conflict_is_reported_not_resolved_silently() -> None:
    cfg = copy.deepcopy(OLDER)
    cfg["dflash_config"]["block_size"] = 8
    s = spec_of(cfg)
    assert s.keys["block_size"].conflict
    assert [f.code for f in check_config(s) if f.severity.value == "error"] == ["DF103"]
    verdicts = judge_readers(s)
    assert "ignoring the conflicting 16" in verdicts["sglang"].reason
    assert "ignoring the conflicting 8" in verdicts["speculators"].reason


def test_equal_mirror_is_no_conflict_but_type_matters() -> None:
    cfg = copy.deepcopy(OLDER)
    cfg["dflash_config"]["block_size"] = 16
    assert not spec_of(cfg).keys["block_size"].conflict
    cfg["dflash_config"]["block_size"] = 16.0
    assert spec_of(cfg).keys["block_size"].conflict


def test_layer_ids_are_never_guessed() -> None:
    cfg = copy.deepcopy(OLDER)
    del cfg["dflash_config"]["target_layer_ids"]
    s = spec_of(cfg)
    assert s.target_layer_ids is None and s.keys["target_layer_ids"].source == "missing"
    assert "DF101" in {f.code for f in check_config(s)}
    assert all(not v.loads for k, v in judge_readers(s).items())


def test_readers_demands() -> None:
    canonical = copy.deepcopy(OLDER)
    canonical["dflash_config"]["block_size"] = 16
    assert all(v.loads for v in judge_readers(spec_of(canonical)).values())
    no_types = copy.deepcopy(canonical)
    del no_types["layer_types"]
    v = judge_readers(spec_of(no_types))
    assert not v["lmdeploy"].loads and "layer_types" in v["lmdeploy"].reason
    nested_ntl = copy.deepcopy(canonical)
    nested_ntl["dflash_config"]["num_target_layers"] = nested_ntl.pop("num_target_layers")
    v = judge_readers(spec_of(nested_ntl))
    assert v["sglang"].loads and not v["lmdeploy"].loads and not v["zlab-legacy"].loads
    target = target_from_config({"model_type": "qwen3", "num_hidden_layers": 36, "hidden_size": 4096, "vocab_size": 151000}, label="t", where="t/config.json")
    v = judge_readers(spec_of(canonical), target)
    assert not v["vllm"].loads and "vocab_size" in v["vllm"].reason
    assert not v["speculators"].loads and "hidden_size" in v["speculators"].reason
    assert not v["sglang"].loads and "mask_token_id" in v["sglang"].reason


def test_softcap_at_top_level_is_a_caveat_for_sglang() -> None:
    cfg = copy.deepcopy(OLDER)
    cfg["final_logit_softcapping"] = 30.0
    s = spec_of(cfg)
    assert "DF134" in {f.code for f in check_config(s)}
    v = judge_readers(s)
    assert v["sglang"].loads and "ignores the top-level final_logit_softcapping=30.0" in v["sglang"].reason
    assert "does not apply final_logit_softcapping" in v["vllm"].reason


def test_text_config_of_multimodal_targets() -> None:
    t = target_from_config({"model_type": "qwen3_5", "text_config": {"num_hidden_layers": 64, "hidden_size": 5120, "vocab_size": 248320},
                            "vision_config": {"hidden_size": 1152}}, label="t", where="t/config.json")
    assert (t.num_hidden_layers, t.hidden_size, t.vocab_size, t.text_config_used) == (64, 5120, 248320, True)


def test_head_dim_defaults_like_transformers() -> None:
    cfg = copy.deepcopy(OLDER)
    del cfg["head_dim"]
    assert spec_of(cfg).dims.head_dim == 2560 // 32
    del cfg["num_key_value_heads"]
    assert spec_of(cfg).dims.num_key_value_heads == 32
