"""Sampling options and generation_config.json defaults (run/sampling_settings.py, no torch)."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

from dflash_ckpt.errors import UsageError
from dflash_ckpt.run.sampling_settings import DEFAULT_RULE, RULES, from_generation_config, make_settings


def test_defaults_are_greedy_and_the_papers_rule() -> None:
    s = make_settings()
    assert s.greedy and (s.temperature, s.top_p, s.top_k, s.seed, s.rule) == (0.0, 1.0, 0, 0, "match")
    assert DEFAULT_RULE == "match" and set(RULES) == {"match", "rejection"}
    assert s.to_json() == {"temperature": 0.0, "top_p": 1.0, "top_k": 0, "seed": 0, "rule": "match",
                           "source": "options", "greedy": True, "engines": list(RULES["match"])}
    assert any("vLLM" in e for e in make_settings(rule="rejection").engines())


@pytest.mark.parametrize(("kwargs", "option"), [
    ({"temperature": -0.1}, "--temperature"), ({"temperature": math.nan}, "--temperature"),
    ({"temperature": math.inf}, "--temperature"), ({"top_p": 0.0}, "--top-p"), ({"top_p": 1.5}, "--top-p"),
    ({"top_k": -2}, "--top-k"), ({"top_k": 2.5}, "--top-k"), ({"seed": -1}, "--seed"), ({"seed": True}, "--seed"),
    ({"rule": "typical"}, "--verify"),
])
def test_each_bad_value_is_one_usage_line_naming_its_option(kwargs: dict, option: str) -> None:
    with pytest.raises(UsageError) as err:
        make_settings(**kwargs)
    assert err.value.key == option and err.value.exit_code == 2
    line = err.value.line()
    assert line.startswith(f"dflash-ckpt: DF004 error: {option} ") and "\n" not in line


def test_top_k_off_spellings() -> None:
    assert make_settings(top_k=None).top_k == 0 and make_settings(top_k=-1).top_k == 0
    assert make_settings(temperature=0.7, top_k=20).top_k == 20


def test_qwen3_generation_config_is_what_vllm_would_serve() -> None:
    qwen3 = {"do_sample": True, "temperature": 0.6, "top_p": 0.95, "top_k": 20, "bos_token_id": 151643}
    s = from_generation_config(qwen3, seed=7, rule="rejection")
    assert (s.temperature, s.top_p, s.top_k, s.seed, s.rule, s.source) == (0.6, 0.95, 20, 7, "rejection",
                                                                         "generation_config.json")
    assert not s.greedy


def test_generation_config_without_do_sample_is_greedy_and_gaps_take_hf_defaults() -> None:
    assert from_generation_config({"temperature": 0.6}).greedy  # do_sample absent: generate() is greedy
    assert from_generation_config({}).greedy
    s = from_generation_config({"do_sample": True})
    assert (s.temperature, s.top_p, s.top_k) == (1.0, 1.0, 50)
    with pytest.raises(UsageError):
        from_generation_config({"do_sample": True, "top_p": 0})


def test_the_torch_free_parts_stay_torch_free() -> None:
    code = ("import sys, dflash_ckpt.run.sampling_settings, dflash_ckpt.stats.confidence, "
            "dflash_ckpt.sources.suites, dflash_ckpt.checks.published; print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
