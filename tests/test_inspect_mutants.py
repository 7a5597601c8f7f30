"""Every mutated fixture fails (or warns) with exactly the rule code it was built to trigger."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import no_traceback, run_cli
from dflash_ckpt.rules import RULES, Severity

MANIFEST_ROOT = None


def _manifest(root: Path) -> dict[str, dict[str, str]]:
    return json.loads((root / "mutants/manifest.json").read_text())


def _names() -> list[str]:
    import make_fixtures

    names = [f"{code}" for code in make_fixtures.MUTANTS] + list(make_fixtures.PAIR_TARGETS) + ["DF307-tap-last-layer"]
    return names


@pytest.mark.slow
@pytest.mark.parametrize("name", _names())
def test_mutant_triggers_its_code(fixtures_root: Path, name: str) -> None:
    entry = _manifest(fixtures_root)[name]
    root = fixtures_root / "mutants"
    draft = root / entry.get("draft", name)
    code = entry["code"]
    res = run_cli("inspect", str(draft), "--target", str(root / entry["target"]), "--json")
    no_traceback(res)
    doc = res.result()
    codes = [f["code"] for f in doc["findings"]]
    assert code in codes, (code, doc["findings"])
    rule = RULES[code]
    if code.startswith("DF0"):
        assert res.code == 2 and doc["error"]["code"] == code
    elif rule.severity == Severity.ERROR:
        assert res.code == 1 and doc["ok"] is False
    else:
        assert res.code == 0 and doc["ok"] is True
        # --ignore DF148: the base keeps block_size at the top level, as z-lab publishes it (lmdeploy needs normalize)
        strict = run_cli("inspect", str(draft), "--target", str(root / entry["target"]), "--strict", "--json",
                         *(("--ignore", "DF148") if code != "DF148" else ()))
        assert strict.code == (1 if rule.severity == Severity.WARNING else 0)
    # a mutant carries one defect: no unrelated error rides along
    unrelated_errors = {f["code"] for f in doc["findings"] if f["severity"] == "error"} - {code}
    allowed = {"DF114": {"DF306"}, "DF122": {"DF304"}, "DF304": {"DF303"}, "DF306": {"DF301"},
               "DF224": {"DF212"}}  # a renamed codebook is also missing under its published name
    assert unrelated_errors <= allowed.get(code, set()), unrelated_errors


def test_base_mutant_is_clean(fixtures_root: Path) -> None:
    root = fixtures_root / "mutants"
    res = run_cli("inspect", str(root / "base"), "--target", str(root / "targets/small"), "--json", "--strict",
                  "--ignore", "DF148")  # block_size at the top level, as z-lab publishes it: lmdeploy needs normalize
    assert res.code == 0, res.stdout
    assert {f["code"] for f in res.result()["findings"]} == {"DF220"}


def test_base2_mutant_is_clean(fixtures_root: Path) -> None:
    """The small DFlash2 draft every DFlash2 mutant starts from passes strict inspect."""
    root = fixtures_root / "mutants"
    res = run_cli("inspect", str(root / "base2"), "--target", str(root / "targets/small"), "--json", "--strict")
    assert res.code == 0, res.stdout
    doc = res.result()
    assert doc["generation"] == "DFlash2"
    assert {f["code"] for f in doc["findings"]} == {"DF220"}


@pytest.mark.slow
def test_dflash2_shape_findings_name_the_tensor(fixtures_root: Path) -> None:
    root = fixtures_root / "mutants"
    cases = {
        "DF213-dflash2-base-kernel-taps": "layers.0.attention_conv.base_kernel is [2, 3, 64], expected [2, 2, 64]",
        "DF213-dflash2-projection-per-channel":
            "layers.1.attention_conv.kernel_projection.weight is [256, 64], expected [16, 64]",
        "DF213-dflash2-codebook-rank": "candidate_selector.successor_codebook is [1024, 16], expected [1024, 8]",
        "DF212-dflash2-missing-mlp-conv": "layers.1.mlp_conv.kernel_projection.weight",
        "DF146-dflash2-group-not-dividing": "does not divide hidden_size 64",
        "DF224-dflash2-codebook-weight-suffix": "'candidate_selector.predecessor_codebook.weight' should be named",
    }
    for name, text in cases.items():
        doc = run_cli("inspect", str(root / name), "--json").result()
        messages = [f["message"] for f in doc["findings"] if f["code"] == name[:5]]
        assert any(text in m for m in messages), (name, messages)


def test_every_rule_below_df400_has_a_fixture() -> None:
    """Each inspect rule can fire: a fixture exists for it (DF220 fires on every draft)."""
    covered = {n[:5] for n in _names()} | {"DF220"}
    # about the command line, not a checkpoint: test_cli_errors.py (DF004), test_normalize_cli.py
    # (DF005), test_inspect_gates.py (DF144), smoke-run's refusal (test_engines.py: DF151),
    # a Hub draft without a pinned commit (test_engines.py: DF314), normalize --check (DF020),
    # a Python API call of the wrong type (test_api_signatures.py: DF010),
    # a quantized target smoke-run / probe-taps refuses (test_quant_targets.py: DF180-DF182),
    # smoke-run's fp16 / pre-SM80 run and a cached older commit of a Hub repo (test_layouts.py: DF318, DF319),
    # the speculators-native format's own fixtures (fixtures/make_speculators.py, test_speculators_format.py: DF170-DF175),
    # the tiny pair's top-level draft and mask ids (test_newcomer_edges.py: DF148, DF320),
    # a target config naming Hub kernel code smoke-run refuses (test_hf_hostile_target_config.py: DF321)
    from_options = {"DF004", "DF005", "DF010", "DF020", "DF144", "DF151", "DF314", "DF180", "DF181", "DF182", "DF318", "DF319",
                    "DF170", "DF171", "DF172", "DF173", "DF174", "DF175", "DF148", "DF320", "DF321"}
    inspect_rules = {c for c in RULES if c < "DF400"} - from_options
    assert inspect_rules - covered == set()


def test_fc_mismatch_names_the_implied_k(fixtures_root: Path) -> None:
    res = run_cli("inspect", str(fixtures_root / "mutants/DF211-fc-four-taps"), "-q")
    assert res.code == 1
    line = res.stdout.strip()
    assert "\n" not in line
    assert "implies 4 tap layers" in line and "has 3" in line and "model.safetensors" in line


def test_plus_one_ids_get_the_convention_hint(fixtures_root: Path) -> None:
    res = run_cli("inspect", str(fixtures_root / "mutants/DF114-layer-ids-plus-one"), "--json")
    f = next(f for f in res.result()["findings"] if f["code"] == "DF114")
    assert "subtract 1" in f["message"] and "[1, 3, 7]" in f["message"]
    # the finding points at the file and the key, apart from the message
    assert f["path"] == str(fixtures_root / "mutants/DF114-layer-ids-plus-one/config.json")
    assert f["key"] == "dflash_config.target_layer_ids" and not f["message"].startswith(f["path"])


def test_conflict_names_both_values(fixtures_root: Path) -> None:
    res = run_cli("inspect", str(fixtures_root / "mutants/DF103-block-size-conflict"), "--json")
    doc = res.result()
    msg = next(f["message"] for f in doc["findings"] if f["code"] == "DF103")
    assert "16 in dflash_config" in msg and "8 at the top level" in msg
    assert doc["sources"]["block_size"] == "conflict"
    assert doc["resolved"]["block_size"] == 16
