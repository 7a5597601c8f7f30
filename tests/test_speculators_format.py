"""Speculators-native drafts (issue 41 item 1): the tiny pair's drafts as speculators 0.9.0 wrote
them (fixtures/make_speculators.py; configs committed in fixtures/speculators/) inspect with the
right taps, block, mask and layout and say where each came from; the two layout keys are held
against each other; the converters' traps and vLLM's causal override are caught; normalize writes
the z-lab form every reader of the z-lab draft loads; smoke-run runs the converted draft as its
z-lab form."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "fixtures"))

import make_speculators  # noqa: E402

PAIR = ROOT / "fixtures" / "tiny-pair"
TARGET = str(PAIR / "target")
#: variant -> (the z-lab draft it stands for, the layout it declares).
VARIANTS = {
    "dflash": ("draft", "1+N"),
    "dflash-anchor-first": ("draft-anchor-first", "anchor-first"),
    "dflash-anchor-first-converted": ("draft", "1+N"),  # speculators 0.9.0 lost the layout (trap 1)
    "dflash-anchor-first-pre760": ("draft-anchor-first", "anchor-first"),
    "dflash-reduced-vocab": ("draft", "1+N"),
    "dflash2": ("draft2", "1+N"),
    "dspark": ("draft-anchor-first", "anchor-first"),
}
NATIVE_READERS = {"vllm", "speculators"}


@pytest.fixture(scope="module")
def drafts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_speculators.build_speculators(tmp_path_factory.mktemp("speculators"))


def inspect(cli: Any, draft: Path | str, *more: str) -> dict[str, Any]:
    res = cli("inspect", str(draft), "--target", TARGET, "--json", *more)
    assert "Traceback" not in res.stderr
    return res.result()


def codes(result: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for f in result["findings"]:
        out.setdefault(f["code"], []).append(f)
    return out


def edited(drafts: dict[str, Path], tmp_path: Path, name: str, edit: Any) -> Path:
    """A copy of variant ``name`` whose config ``edit`` changed."""
    folder = tmp_path / name
    folder.mkdir()
    cfg = json.loads((drafts[name] / "config.json").read_text())
    edit(cfg)
    (folder / "config.json").write_text(json.dumps(cfg, indent=2))
    (folder / "model.safetensors").symlink_to(drafts[name] / "model.safetensors")
    return folder


def test_fixtures_are_speculators_own_output() -> None:
    """The stored configs came from speculators 0.9.0 itself, and its converter copied the z-lab
    tensors byte for byte (so re-creating the weights from the z-lab draft is exact)."""
    manifest = json.loads((ROOT / "fixtures" / "speculators" / "MANIFEST.json").read_text())
    assert manifest["speculators_version"] == make_speculators.PINNED == "0.9.0"
    for name in make_speculators.CONVERTED:
        entry = manifest["variants"][name]
        assert entry["command"].startswith("speculators convert fixtures/tiny-pair/")
        assert entry["same_as_source"] is True
        cfg = json.loads((ROOT / "fixtures" / "speculators" / name / "config.json").read_text())
        assert cfg["speculators_version"] == "0.9.0" and "dflash_config" not in cfg


@pytest.mark.parametrize("name", list(VARIANTS))
def test_inspect_resolves_each_variant(cli: Any, drafts: dict[str, Path], name: str) -> None:
    res = inspect(cli, drafts[name])
    found = codes(res)
    assert res["exit_code"] == 0 and res["counts"]["error"] == 0, res["findings"]
    assert res["layout"] == "speculators"
    assert res["generation"] == {"dflash2": "DFlash2", "dspark": "DSpark"}.get(name, "DFlash")
    assert res["resolved"]["target_layer_ids"] == [1, 3, 5]  # aux [2, 4, 6] - 1
    assert res["resolved"]["block_size"] == 8 and res["resolved"]["mask_token_id"] == 725
    assert res["sources"]["target_layer_ids"] == "aux_hidden_state_layer_ids - 1"
    assert res["block_layout"]["layout"] == VARIANTS[name][1]
    assert not {"DF101", "DF102", "DF142", "DF214", "DF215"} & set(found), found.keys()
    # a converter's or exporter's values, never measured: the one command that measures them
    (info,) = found["DF170"]
    assert f"`dflash-ckpt probe-taps {drafts[name]} --target {TARGET}`" in info["message"]
    for key, verdict in res["readers"].items():
        if key in NATIVE_READERS and (VARIANTS[name][1] == "1+N" or name == "dspark"):
            assert verdict["loads"], (key, verdict)
        elif key not in NATIVE_READERS:
            assert not verdict["loads"] and "no reader of the speculators-native format" in verdict["reason"]
    vllm = res["readers"]["vllm"]
    assert "speculators adapter" in vllm["reason"] if vllm["loads"] else VARIANTS[name][1] == "anchor-first"


def test_reduced_vocabulary_is_checked_against_draft_vocab_size(cli: Any, drafts: dict[str, Path], tmp_path: Path) -> None:
    res = inspect(cli, drafts["dflash-reduced-vocab"])
    assert "DF153" in codes(res) and "DF225" not in codes(res) and "DF213" not in codes(res)

    def smaller(cfg: dict[str, Any]) -> None:
        cfg["draft_vocab_size"] = 256  # the lm_head and d2t hold 512 rows

    bad = inspect(cli, edited(drafts, tmp_path, "dflash-reduced-vocab", smaller))
    found = codes(bad)
    assert "DF225" in found and "DF213" in found and "lm_head.weight is [512, 128], expected [256, 128]" in found["DF213"][0]["message"]


def test_layout_keys_that_disagree_are_a_conflict(cli: Any, drafts: dict[str, Path], tmp_path: Path) -> None:
    def seven(cfg: dict[str, Any]) -> None:
        cfg["speculators_config"]["proposal_methods"][0]["speculative_tokens"] = 7  # 1+N, against sample_from_anchor true

    res = inspect(cli, edited(drafts, tmp_path, "dflash-anchor-first", seven))
    (conflict,) = codes(res)["DF161"]
    assert "sample_from_anchor is true" in conflict["message"] and "speculative_tokens is 7 (1+N)" in conflict["message"]
    assert res["exit_code"] == 1
    out = cli("normalize", str(tmp_path / "dflash-anchor-first"), str(tmp_path / "out"), "--target", TARGET)
    assert out.code == 1 and "DF161" in out.stderr and not (tmp_path / "out").exists()


def test_layout_declared_only_by_speculative_tokens(cli: Any, drafts: dict[str, Path]) -> None:
    res = inspect(cli, drafts["dflash-anchor-first-pre760"])
    (warn,) = codes(res)["DF171"]
    assert "speculative_tokens 8" in warn["message"] and '"sample_from_anchor": true' in warn["message"]
    assert res["block_layout"]["source"] == "speculators_config.proposal_methods[0].speculative_tokens"
    assert res["block_layout"]["engines"]["vllm"] == "misserves"  # its adapter reads sample_from_anchor alone


def test_converter_drops_anchor_first_silently(cli: Any, drafts: dict[str, Path]) -> None:
    """Trap 1, as speculators 0.9.0 wrote it: the anchor-first draft's config is the 1+N draft's,
    byte for byte, so only a measurement tells them apart, and the report gives that command."""
    store = ROOT / "fixtures" / "speculators"
    assert (store / "dflash-anchor-first-converted" / "config.json").read_text().replace(
        "draft-anchor-first", "draft") == (store / "dflash" / "config.json").read_text().replace("draft-anchor-first", "draft")
    res = inspect(cli, drafts["dflash-anchor-first-converted"])
    (info,) = codes(res)["DF170"]
    assert "sample_from_anchor false for an anchor-first draft" in info["message"] and "probe-taps" in info["message"]


@pytest.mark.parametrize(("name", "code", "needle"), [
    ("trap-aux-copied", "DF175", "holds 0, a tap on the embedding output"),
    ("trap-last-layer", "DF172", "drops an aux id equal to the verifier's depth (8: the verifier's last layer)"),
    ("trap-aux-beyond", "DF172", "holds [9] above the verifier's depth 8"),
])
def test_converter_tap_traps(cli: Any, drafts: dict[str, Path], name: str, code: str, needle: str) -> None:
    res = inspect(cli, drafts[name])
    assert any(needle in f["message"] for f in codes(res).get(code, [])), res["findings"]
    assert res["exit_code"] == (0 if code == "DF175" else 1)


def test_vllm_causal_override_is_named(cli: Any, drafts: dict[str, Path]) -> None:
    res = inspect(cli, drafts["dflash"])
    (warn,) = codes(res)["DF173"]
    assert "dflash_config.causal: true" in warn["message"] and "2 full-attention layer(s)" in warn["message"]
    vllm = res["readers"]["vllm"]
    assert vllm["loads"] and "runs all its layers causal" in vllm["reason"] and "DF173" in vllm["reason"]
    # DFlash2 exports write sliding_window_non_causal true: nothing is overridden; DSpark's adapter sets no causality
    assert "DF173" not in codes(inspect(cli, drafts["dflash2"])) and "DF173" not in codes(inspect(cli, drafts["dspark"]))


def test_vllm_reads_an_absent_causality_key_otherwise(cli: Any, drafts: dict[str, Path], tmp_path: Path) -> None:
    """An export without sliding_window_non_causal: speculators trained its sliding layers causal
    (its default), vLLM's adapter reads the key as true and runs them bidirectional."""
    def sliding_no_key(cfg: dict[str, Any]) -> None:
        del cfg["sliding_window_non_causal"]
        layer = cfg["transformer_layer_config"]
        layer.update(layer_types=["sliding_attention", "full_attention"], sliding_window=64, use_sliding_window=True)

    res = inspect(cli, edited(drafts, tmp_path, "dflash", sliding_no_key))
    (warn,) = codes(res)["DF173"]
    assert "is absent" in warn["message"] and "1 sliding layer(s)" in warn["message"]
    assert "sliding layer(s) trained causal bidirectional" in res["readers"]["vllm"]["reason"]


def test_verifier_other_than_target(cli: Any, drafts: dict[str, Path], tmp_path: Path) -> None:
    def llama(cfg: dict[str, Any]) -> None:
        cfg["speculators_config"]["verifier"]["architectures"] = ["LlamaForCausalLM"]

    res = inspect(cli, edited(drafts, tmp_path, "dflash", llama))
    (warn,) = codes(res)["DF174"]
    assert "['LlamaForCausalLM']" in warn["message"] or '["LlamaForCausalLM"]' in warn["message"]
    assert "DF174" not in codes(inspect(cli, drafts["dflash"]))

    def wider(cfg: dict[str, Any]) -> None:
        cfg["target_hidden_size"] = 256

    (warn,) = codes(inspect(cli, edited(drafts, tmp_path, "dspark", wider)))["DF174"]
    assert "target_hidden_size is 256" in warn["message"] and "hidden_size is 128" in warn["message"]


@pytest.mark.parametrize("name", ["dflash", "dflash-anchor-first", "dflash-anchor-first-pre760", "dflash2", "dspark"])
def test_normalize_writes_the_zlab_form(cli: Any, drafts: dict[str, Path], tmp_path: Path, name: str) -> None:
    out = tmp_path / "out"
    res = cli("normalize", str(drafts[name]), str(out), "--target", TARGET)
    assert res.code == 0, res.stderr
    cfg = json.loads((out / "config.json").read_text())
    assert not {"speculators_config", "aux_hidden_state_layer_ids", "transformer_layer_config", "auto_map"} & set(cfg)
    assert cfg["dflash_config"]["target_layer_ids"] == [1, 3, 5] and cfg["dflash_config"]["num_target_layers"] == 8
    assert cfg["dflash_config"].get("sample_from_anchor", False) is (VARIANTS[name][1] == "anchor-first")
    after = inspect(cli, out)
    zlab = inspect(cli, PAIR / VARIANTS[name][0])
    assert after["layout"] == "nested" and after["exit_code"] == 0 and after["counts"]["error"] == 0
    assert (after["resolved"], after["block_layout"]["layout"]) == (zlab["resolved"], zlab["block_layout"]["layout"])
    zlab_yes = {k for k, v in zlab["readers"].items() if v["loads"]}
    after_yes = {k for k, v in after["readers"].items() if v["loads"]}
    assert zlab_yes <= after_yes, zlab_yes - after_yes
    assert "DF173" not in codes(after)  # the z-lab form runs its full-attention layers bidirectional in vLLM


def test_inspect_names_the_normalize_command(cli: Any, drafts: dict[str, Path]) -> None:
    res = inspect(cli, drafts["dflash"])
    assert res["normalize_command"] == f"dflash-ckpt normalize {drafts['dflash']} OUT --target {TARGET}"
    assert all(v["fixed_by_normalize"] for k, v in res["readers"].items() if k not in NATIVE_READERS)


def test_every_engine_record_says_what_it_does_with_the_format() -> None:
    from dflash_ckpt.checks.engines.registry import ENGINES

    by_key = {e.key: e for e in ENGINES}
    assert {e.key for e in ENGINES if e.speculators_reader} == NATIVE_READERS
    assert "algos.py" in by_key["vllm"].speculators_reader
    assert "exllamav3 1.6.5" in by_key["exllamav3"].speculators_fact
    assert all(e.speculators_fact for e in ENGINES)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["dflash", "dflash2", "dspark"])
def test_smoke_run_matches_the_zlab_form(cli: Any, drafts: dict[str, Path], one_thread: None, name: str) -> None:
    """Each speculators draft runs as its z-lab form: same tau, same tokens; the converted DFlash
    draft's precheck names vLLM's causal override (what `--engine both` prints before the engine runs)."""
    args = ("--target", TARGET, "--json", "-n", "24")
    native = cli("smoke-run", str(drafts[name]), *args)
    zlab = cli("smoke-run", str(PAIR / VARIANTS[name][0]), *args)
    assert native.code == zlab.code == 0, native.stderr
    a, b = native.result(), zlab.result()
    assert a["overall"]["tau"] == b["overall"]["tau"] and a["overall"]["steps"] == b["overall"]["steps"]
    assert [p["output_ids"] for p in a["prompts"]] == [p["output_ids"] for p in b["prompts"]]
    assert ("DF173" in {f["code"] for f in a["precheck"]}) is (name == "dflash")


@pytest.mark.slow
def test_probe_taps_catches_the_lost_anchor_first_layout(cli: Any, drafts: dict[str, Path], tmp_path: Path,
                                                         one_thread: None) -> None:
    """Trap 1 is invisible in the files; the command DF170 gives measures it (DF416), and --write
    records it in the z-lab form."""
    out = tmp_path / "measured"
    res = cli("probe-taps", str(drafts["dflash-anchor-first-converted"]), "--target", TARGET, "-n", "48",
              "--budget", "4", "--write", str(out), "--json")
    assert "Traceback" not in res.stderr
    assert res.code == 1 and "DF416" in {f["code"] for f in res.result()["findings"]}, res.stdout[-2000:]
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["dflash_config"]["sample_from_anchor"] is True and cfg["dflash_config"]["target_layer_ids"] == [1, 3, 5]
    assert "speculators_config" not in cfg and "sample_from_anchor" not in cfg


@pytest.mark.slow
@pytest.mark.vllm
def test_engine_both_loads_it_as_it_is_and_names_the_override(drafts: dict[str, Path]) -> None:
    """vLLM loads the converted draft as it is (its speculators adapter), gives its own target's
    tokens, and `--engine both` prints vLLM's causal override before the engine runs."""
    from conftest import run_cli
    from vllm_installed import vllm_available

    if not vllm_available():
        pytest.skip("the engine's python has no vLLM with DFlash")
    res = run_cli("smoke-run", str(drafts["dflash"]), "--target", TARGET, "--engine", "both", "-n", "32", "--json",
                  timeout=900)
    assert res.code == 0, (res.stdout[-2000:], res.stderr[-2000:])
    out = res.result()
    assert "DF173" in {f["code"] for f in out["precheck"]}
    run = out["engine_run"]
    assert run["vllm_metrics"]["drafts"] > 0 and run["vllm_tau"] > 2.0
    assert all(p["lossless"]["status"] in ("identical", "tie") for p in run["runs"])
