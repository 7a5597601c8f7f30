"""Per-draft work lets nothing but ``DFlashCkptError`` escape (issue 10: several drafts in one inspect,
and a broken one must not take the others down). Hypothesis puts arbitrary JSON values, huge
integers and NaN included, at every key the checks read, in the draft's and the target's config,
and runs everything ``inspect`` runs per draft on them: resolution, every check, the engine
verdicts and the JSON document."""

from __future__ import annotations

import pytest

import copy
import json
import math
import sys
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import ROOT

sys.path.insert(0, str(ROOT / "fixtures"))
import make_fixtures  # noqa: E402

from dflash_ckpt.checks import run_checks  # noqa: E402
from dflash_ckpt.checks.engines.verdicts import judge_readers  # noqa: E402
from dflash_ckpt.inspection import InspectResult  # noqa: E402
from dflash_ckpt.errors import DFlashCkptError  # noqa: E402
from dflash_ckpt.sources.jsonfile import parse_json_text  # noqa: E402
from dflash_ckpt.sources.weights import WeightInventory  # noqa: E402
from dflash_ckpt.draftspec.layer_kinds import derive_layer_kinds, layer_kind_keys  # noqa: E402
from dflash_ckpt.draftspec.specs import build_spec, target_from_config  # noqa: E402
from dflash_ckpt.draftspec.tensor_layout import expected_tensors  # noqa: E402

DRAFT_KEYS = [
    "block_size", "num_target_layers", "hidden_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "head_dim", "intermediate_size", "vocab_size", "layer_types", "sliding_window",
    "use_sliding_window", "architectures", "dtype", "torch_dtype", "attention_bias", "dflash_config",
    "output_multiplier", "final_logit_softcapping", "auto_map", "max_window_layers",
    "dflash_config.block_size", "dflash_config.mask_token_id", "dflash_config.target_layer_ids",
    "dflash_config.num_target_layers", "dflash_config.conv_kernel_size", "dflash_config.conv_group_size",
    "dflash_config.selector_rank", "dflash_config.selector_top_k", "dflash_config.output_multiplier",
]
TARGET_KEYS = ["num_hidden_layers", "hidden_size", "vocab_size", "pad_token_id", "model_type", "text_config", "architectures"]

scalars = st.one_of(
    st.none(), st.booleans(), st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(10**40), max_value=10**40), st.just(10**4000), st.just(-(10**4000)),
    st.text(max_size=8), st.sampled_from(["full_attention", "sliding_attention", "DFlash2DraftModel", "bfloat16"]),
)
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=6), st.dictionaries(st.text(max_size=5), inner, max_size=4)), max_leaves=12)
big_lists = st.one_of(
    st.builds(lambda n: list(range(n)), st.integers(0, 6000)),
    st.builds(lambda n, v: [v] * n, st.integers(0, 5000), scalars),
)


def _put(cfg: dict[str, Any], path: str, value: Any) -> None:
    node = cfg
    *parents, last = path.split(".")
    for p in parents:
        if not isinstance(node.get(p), dict):
            node[p] = {}
        node = node[p]
    node[last] = value


def _inventory() -> WeightInventory:
    inv = WeightInventory()
    from dflash_ckpt.sources.safetensors_header import TensorInfo

    tensors = make_fixtures.draft_tensors(copy.deepcopy({**make_fixtures.SMALL_DRAFT, "dflash_config": {"target_layer_ids": [1, 3, 5]}}))
    offset = 0
    for name, (dtype, shape) in tensors.items():
        n = 2 * math.prod(shape)
        inv.tensors[name] = TensorInfo(name, dtype, tuple(shape), "model.safetensors", offset, offset + n)
        offset += n
    inv.safetensors_files = ["model.safetensors"]
    inv.where = {"model.safetensors": "model.safetensors"}
    return inv


INVENTORY = _inventory()


def _per_draft(cfg: dict[str, Any], target_cfg: dict[str, Any] | None) -> None:
    """What inspect does for one draft once its files are read; only DFlashCkptError may leave."""
    try:
        spec = build_spec(cfg, label="fuzz", where="config.json", weights=INVENTORY)
        target = target_from_config(target_cfg, label="t", where="t/config.json") if target_cfg is not None else None
        res = InspectResult("fuzz")
        res.draft, res.target = spec, target
        res.findings = run_checks(spec, target)
        res.readers = judge_readers(spec, target)
        json.dumps(res.to_json())
        for f in res.findings:
            assert "\n" not in f.message and len(f.message) < 2000, f
        expected_tensors(spec)
        derive_layer_kinds(*layer_kind_keys(cfg))
    except DFlashCkptError:
        pass


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(DRAFT_KEYS), st.one_of(values, big_lists)), min_size=1, max_size=6),
       st.lists(st.tuples(st.sampled_from(TARGET_KEYS), values), max_size=4), st.booleans())
def test_hostile_config_values_never_escape(edits: list[tuple[str, Any]], target_edits: list[tuple[str, Any]], with_target: bool) -> None:
    cfg = copy.deepcopy({**make_fixtures.SMALL_DRAFT, "dflash_config": {"mask_token_id": 1000, "target_layer_ids": [1, 3, 5]}})
    for path, value in edits:
        _put(cfg, path, value)
    target = dict(make_fixtures.SMALL_TARGET)
    for key, value in target_edits:
        target[key] = value
    _per_draft(cfg, target if with_target else None)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet='{}[]",:0123456789.eE-+ntrufalsNIiy\\ ', max_size=200))
def test_any_text_parses_or_is_one_line(text: str) -> None:
    try:
        parse_json_text(text, "x.json")
    except DFlashCkptError as err:
        assert "\n" not in str(err)


def test_the_fuzzer_reaches_the_checks(tmp_path: Path) -> None:
    """The harness is not vacuous: a clean config gives the base findings, a broken one errors."""
    cfg = copy.deepcopy({**make_fixtures.SMALL_DRAFT, "dflash_config": {"mask_token_id": 1000, "target_layer_ids": [1, 3, 5]}})
    spec = build_spec(cfg, label="fuzz", weights=INVENTORY)
    assert {f.code for f in run_checks(spec)} == {"DF220"}
    cfg["block_size"] = 10**4000
    assert "DF145" in {f.code for f in run_checks(build_spec(cfg, label="fuzz", weights=INVENTORY))}
