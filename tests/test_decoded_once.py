"""Each value of a draft or target config is judged once, when its spec is built.

``specs.decode_settings`` runs every decoder (dims, rope, layer kinds) once per spec and keeps
both severities: ``inspect``'s findings (``spec.problems``) and a run's value or the line it stops
on (``spec.settings``). These tests fail if a check or a run's settings decode a value again: a
bad value's finding appears exactly once in ``run_checks``, each decoder is called once per spec
however many readers follow, and no module but ``specs`` calls a decoder.
"""

from __future__ import annotations

import ast
import copy
import json
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import pytest

from conftest import ROOT
from dflash_ckpt.checks import run_checks
from dflash_ckpt.draftspec import specs
from dflash_ckpt.draftspec.draft_settings import DraftSettings
from dflash_ckpt.draftspec.target_settings import TargetSettings
from dflash_ckpt.errors import InputError

PACKAGE = ROOT / "dflash_ckpt"
BASE = json.loads((ROOT / "fixtures/published/configs/Qwen3-8B-DFlash-b16.json").read_text())
TARGET = json.loads((ROOT / "fixtures/tiny-pair/target/config.json").read_text())

#: One bad value per decoded setting: the config's change, and the (code, key) inspect reports.
MUTANTS: dict[str, tuple[dict[str, Any], tuple[str, str]]] = {
    "hidden_size a string": ({"hidden_size": "4096"}, ("DF142", "hidden_size")),
    "head_dim zero": ({"head_dim": 0}, ("DF142", "head_dim")),
    "vocab_size beyond bounds": ({"vocab_size": 10**12}, ("DF145", "vocab_size")),
    "rope_theta NaN": ({"rope_theta": float("nan")}, ("DF147", "rope_theta")),
    "rope_scaling a list": ({"rope_scaling": [2]}, ("DF147", "rope_scaling")),
    "rope_theta beyond a double": ({"rope_theta": 10**400}, ("DF147", "rope_theta")),
    "layer_types too short": ({"layer_types": ["full_attention"] * 2}, ("DF130", "layer_types")),
    "layer_types a string": ({"layer_types": "full_attention"}, ("DF131", "layer_types")),
    "sliding without a window": ({"layer_types": ["sliding_attention"] * 5, "sliding_window": None},
                                 ("DF132", "sliding_window")),
}


def mutant(change: dict[str, Any]) -> dict[str, Any]:
    cfg = copy.deepcopy(BASE)
    cfg.update(change)
    return cfg


@pytest.mark.parametrize("name", list(MUTANTS))
def test_a_bad_value_is_one_finding_made_when_the_spec_is_built(name: str) -> None:
    change, (code, key) = MUTANTS[name]
    spec = specs.build_spec(mutant(change), label="draft", where="draft/config.json")
    made = [(f.code, f.key) for found in spec.problems.values() for f in found]
    assert (code, key) in made, made
    reported = Counter((f.code, f.key) for f in run_checks(spec))
    assert reported[(code, key)] == 1, reported
    # every finding on a decoded value comes from spec.problems, once, and nothing else reports one
    decoded_codes = {"DF142", "DF147", "DF130", "DF131", "DF132", "DF133"}
    others = [f for f in run_checks(spec) if f.code in decoded_codes]
    assert sorted(map(repr, others)) == sorted(repr(f) for found in spec.problems.values() for f in found
                                               if f.code in decoded_codes)


def count_calls(monkeypatch: pytest.MonkeyPatch, names: list[str]) -> Counter[str]:
    """Wrap each decoder ``specs`` calls so the test can count its calls."""
    calls: Counter[str] = Counter()

    def wrap(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            calls[name] += 1
            return fn(*args, **kwargs)
        return counted

    for name in names:
        monkeypatch.setattr(specs, name, wrap(name, getattr(specs, name)))
    return calls


DECODERS = ["read_dims", "rope_specs", "derive_layer_kinds", "draft_layer_types", "dims_findings", "rope_findings",
            "layer_kind_findings"]


@pytest.mark.parametrize("change", [{}, {"rope_scaling": {"rope_type": "yarn", "factor": "big"}}, {"hidden_size": 0}],
                         ids=["good", "bad rope", "bad dims"])
def test_each_decoder_runs_once_per_draft_however_many_readers_follow(monkeypatch: pytest.MonkeyPatch,
                                                                     change: dict[str, Any]) -> None:
    calls = count_calls(monkeypatch, DECODERS)
    spec = specs.build_spec(mutant(change), label="draft", where="draft/config.json")
    for _ in range(2):
        run_checks(spec)
        try:
            DraftSettings.from_spec(spec)
        except InputError as err:
            assert err.code == "DF142", err  # the run's severity of the same decoding
    # with bad dims a run stops on them, so a draft's layer kinds are not decoded for it
    skipped = {"derive_layer_kinds", "draft_layer_types"} if "hidden_size" in change else set()
    assert calls == Counter(d for d in DECODERS if d not in skipped), calls


def test_each_decoder_runs_once_per_target(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = count_calls(monkeypatch, ["read_dims", "rope_specs", "derive_layer_kinds"])  # a target's layers: not derived
    target = specs.target_from_config(TARGET, label="target", where="target/config.json")
    first, second = TargetSettings.from_spec(target), TargetSettings.from_spec(target)
    assert first == second and target.dims.hidden_size == first.dims.hidden_size
    assert calls == Counter(read_dims=1, rope_specs=1), calls


@pytest.mark.parametrize("method", ["fp8", "no-such-format"])
def test_a_targets_quantization_scheme_is_read_once(monkeypatch: pytest.MonkeyPatch, method: str) -> None:
    """Read when the spec is built: the run's validator, the backend and the memory estimate all
    take the same scheme (or the same DF180 line)."""
    from dflash_ckpt.checks.target_config import require_target_config
    from dflash_ckpt.draftspec import quant

    calls = Counter()
    real = quant.read_scheme

    def counted(*args: Any) -> Any:
        calls["read_scheme"] += 1
        return real(*args)

    monkeypatch.setattr(quant, "read_scheme", counted)
    cfg = json.loads((ROOT / "fixtures/tiny-quant/fp8-block/config.json").read_text())
    cfg["quantization_config"]["quant_method"] = method
    target = specs.target_from_config(cfg, label="target", where="target/config.json")
    if method == "fp8":
        assert target.quant_scheme() is target.quant_scheme() is not None
        require_target_config(target)
    else:
        for _ in range(2):
            with pytest.raises(InputError, match="DF180|quant_method") as err:
                require_target_config(target)
            assert err.value.code == "DF180"
    assert calls == Counter(read_scheme=1), calls
    plain = specs.target_from_config(TARGET, label="target", where="target/config.json")
    assert plain.quant_scheme() is None and calls == Counter(read_scheme=1)  # not read: no quantization_config


def test_a_run_raises_the_line_the_spec_decoded() -> None:
    """One decoding, two severities: inspect's DF142 finding and the run's DF142 error name the
    same key, from the same ``Dims``."""
    spec = specs.build_spec(mutant({"num_attention_heads": -1}), label="draft", where="draft/config.json")
    assert [f.key for f in spec.problems["dims"]] == ["num_attention_heads"]
    with pytest.raises(InputError) as err:
        DraftSettings.from_spec(spec)
    assert err.value is spec.settings.run_dims.refusal
    assert "num_attention_heads" in str(err.value) and err.value.code == "DF142"


#: Decoders only ``specs`` calls (once per spec), and the modules that may call one besides, with why.
DECODER_NAMES = {"read_dims", "rope_specs", "derive_layer_kinds", "draft_layer_types", "from_config", "dims_findings",
                 "rope_findings", "layer_kind_findings", "read_scheme"}
ALLOWED = {
    "draftspec/specs.py": "decode_settings: the one decoding per spec",
    "draftspec/target_settings.py": "TargetSettings.from_config, a target spec built from a dict (scripts, tests)",
    "canonical/plan.py": "normalize plans the document it is about to write, not a spec's settings",
}


def test_no_module_but_specs_calls_a_decoder() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        text = path.read_text(encoding="utf-8")
        if rel in ALLOWED or not any(name + "(" in text for name in DECODER_NAMES):  # parse only candidates
            continue
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Call):
                name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
                if name in DECODER_NAMES:
                    found.append(f"{rel}:{node.lineno}: {name}")
    assert found == [], f"decoded again outside specs.decode_settings (read spec.settings / spec.problems): {found}"
    assert all((PACKAGE / rel).exists() for rel in ALLOWED), "an allow-listed module is gone: drop its line"


@pytest.mark.parametrize("key", ["rms_norm_eps", "rope_theta"])
def test_a_number_no_double_holds_is_one_line_for_inspect_and_a_run(key: str) -> None:
    """10**400 is a valid JSON integer that no float holds: inspect reports it (or ignores it) without
    a traceback, and a run stops on one DF142 line naming the key (it was an OverflowError)."""
    spec = specs.build_spec(mutant({key: 10**400}), label="draft", where="draft/config.json")
    run_checks(spec)
    with pytest.raises(InputError, match=key) as err:
        DraftSettings.from_spec(spec)
    assert err.value.code == "DF142"
    target = specs.target_from_config({**TARGET, key: 10**400}, label="target", where="target/config.json")
    with pytest.raises(InputError, match=key):
        TargetSettings.from_spec(target)
