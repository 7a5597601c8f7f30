"""Issue 32: a target config the transformers backend cannot build (a key naming a method or a
read-only property of the config class, a value of the wrong type) is one DF142 line, exit 2,
before anything is loaded; never a traceback read as a failed pair (exit 1)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")

from conftest import ROOT, error_line, smoke  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

PAIR = ROOT / "fixtures" / "tiny-pair"
BASE = json.loads((PAIR / "target" / "config.json").read_text())

NOT_SETTINGS = {
    "use_return_dict": (True, "read-only property"), "is_heterogeneous": (True, "read-only property"),
    "per_layer_attributes": (["x"], "read-only property"), "sub_configs": ({"a": 1}, "property"),
    "to_dict": (1, "method"), "get_text_config": (1, "method"), "dict_dtype_to_str": (1, "method"),
}
MISTYPED = {"num_labels": "x", "per_layer_config": 5, "rope_scaling": "x"}


def _target(folder: Path, patch: dict[str, Any]) -> Path:
    folder.mkdir(parents=True)
    for f in (PAIR / "target").iterdir():
        if f.name != "config.json":
            os.symlink(f, folder / f.name)
    (folder / "config.json").write_text(json.dumps({**BASE, **patch}))
    return folder


def _never_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    import dflash_ckpt.runtime.hf_target as hf_target

    def never(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the target was loaded")

    monkeypatch.setattr(hf_target, "load_hf_target", never)


@pytest.mark.parametrize("key", sorted(NOT_SETTINGS))
def test_a_key_naming_a_method_or_read_only_property_is_one_line(cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, key: str) -> None:
    _never_loaded(monkeypatch)
    value, what = NOT_SETTINGS[key]
    target = _target(tmp_path / "t", {key: value})
    res = smoke(cli, (str(PAIR / "draft"), str(target)), "--backend", "transformers", "-n", "4", "--device", "cpu")
    assert res.code == 2, res.stdout + res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    line = error_line(res)
    assert f"{target}/config.json" in line and "DF142 error:" in line and f"key '{key}'" in line and what in line


def test_a_key_naming_a_method_of_the_text_config_is_named_with_its_level() -> None:
    from transformers import Gemma3Config, Gemma3TextConfig

    from dflash_ckpt.runtime.hf_config import attribute_problem

    cfg = {"model_type": "gemma3", "text_config": {"model_type": "gemma3_text", "to_json_string": 3}}
    assert attribute_problem(cfg, Gemma3Config, Gemma3TextConfig) == (
        "text_config.to_json_string", "a method of transformers' Gemma3TextConfig")
    assert attribute_problem({"num_labels": 3, "hidden_size": 8}, Gemma3TextConfig) is None  # settable


@pytest.mark.parametrize("key", sorted(MISTYPED))
def test_a_mistyped_value_is_one_line_before_the_load(cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, key: str) -> None:
    _never_loaded(monkeypatch)
    target = _target(tmp_path / "t", {key: MISTYPED[key]})
    res = smoke(cli, (str(PAIR / "draft"), str(target)), "--backend", "transformers", "-n", "4", "--device", "cpu")
    assert res.code == 2, res.stdout + res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    line = error_line(res)
    assert f"{target}/config.json" in line and "DF142 error:" in line and "transformers cannot build Qwen3Config" in line


def test_what_transformers_raises_while_loading_is_one_df212_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The loader's own catch: a TypeError or AttributeError from ``from_pretrained`` (a value the
    config build accepted but the model rejects) is one line too."""
    import torch
    import transformers

    from dflash_ckpt.errors import DFlashCkptError
    from dflash_ckpt.draftspec.specs import target_from_config
    from dflash_ckpt.runtime.hf_target import hf_target_info, load_hf_target

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise TypeError("'str' object cannot be interpreted as an integer")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", broken)
    target = _target(tmp_path / "t", {})
    info = hf_target_info(target_from_config(BASE, label="t", where=str(target)))
    with pytest.raises(DFlashCkptError) as err:
        load_hf_target(target, info, dtype=torch.float32, device=torch.device("cpu"), tensor_names=[])
    assert err.value.code == "DF212" and "TypeError" in err.value.message and err.value.exit_code == 2


def test_probe_taps_refuses_the_same_config_in_one_line(cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _never_loaded(monkeypatch)
    target = _target(tmp_path / "t", {"to_dict": 1})
    res = cli("probe-taps", str(PAIR / "draft"), "--target", str(target), "--backend", "transformers", "--device", "cpu")
    assert res.code == 2, res.stdout + res.stderr
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "DF142 error:" in error_line(res) and "key 'to_dict' names a method" in error_line(res)
