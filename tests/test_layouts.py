"""Block layouts in inspect (issue 26): each declaration (and DeepSpec's, which declares nothing)
gets its layout named; no reader row says it loads, and no serve line is printed, for an engine
whose path would run the draft in the other layout; DSpark drafts get their engines' DSpark lines;
1+N drafts stay clean. Also: a reader verdict agrees with the weight findings that stop a load."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

import layout_fixtures
from conftest import run_cli
from dflash_ckpt import inspect as api_inspect
from dflash_ckpt.draftspec.layout import ANCHOR_FIRST, ONE_PLUS_N, resolve_layout

VARIANTS = list(layout_fixtures.VARIANTS)


def _doc(draft: Path, target: Path | None = None) -> dict[str, Any]:
    return api_inspect(draft, target).to_dict()


def _variant(root: Path, name: str) -> Path:
    return root / "drafts/layouts" / name


@pytest.mark.parametrize("name", VARIANTS)
def test_each_declaration_is_named_and_gates_readers_and_serve_lines(fixtures_root: Path, name: str) -> None:
    expected = layout_fixtures.VARIANTS[name][1]
    doc = _doc(_variant(fixtures_root, name), fixtures_root / "targets/Qwen3-4B")
    bl = doc["block_layout"]
    assert bl["layout"] == expected
    engines = bl["engines"]
    codes = [f["code"] for f in doc["findings"]]
    for key, verdict in doc["readers"].items():
        # a reader that loads it runs it in its trained layout; one that would not says why
        assert verdict["loads"] is False or engines[key] == "runs", (key, verdict)
        if engines[key] != "runs":
            assert "loads as is" not in verdict["reason"] and verdict["reason"].startswith("fails: "), (key, verdict)
    assert all(engines[e] == "runs" for e in doc["serve"]), doc["serve"]
    if expected == ANCHOR_FIRST:
        [df160] = [f for f in doc["findings"] if f["code"] == "DF160"]
        assert "block layout anchor-first" in df160["message"] and "misserved silently" in df160["message"]
        assert "sglang" not in doc["serve"] or doc["serve"]["sglang"][doc["serve"]["sglang"].index("--speculative-algorithm") + 1] == "DSPARK"
        for argv in doc["serve"].values():
            assert '"method": "dflash"' not in " ".join(argv) and "decoding_type: DFlash" not in " ".join(argv)
    else:
        # lmdeploy's line is left out: it reads block_size only nested (DF148 says so, with normalize)
        assert [f["code"] for f in doc["findings"] if f["severity"] != "info"] == ["DF148"]
        assert set(doc["serve"]) == {"vllm", "sglang", "tensorrt-llm"}


def test_declared_anchor_first_dflash_gets_no_misserving_row(fixtures_root: Path) -> None:
    """What a new user saw on 2026-12-02: 0 warnings, every row "loads as is", DFLASH serve lines."""
    doc = _doc(_variant(fixtures_root, "sample-from-anchor-nested"), fixtures_root / "targets/Qwen3-4B")
    assert doc["serve"] == {}
    assert not any(v["loads"] for v in doc["readers"].values())
    assert doc["block_layout"]["source"] == "dflash_config.sample_from_anchor"
    assert doc["block_layout"]["engines"]["vllm"] == "refuses"  # V2 raises on the nested key
    assert "not supported for DFlash" in doc["readers"]["vllm"]["reason"]
    assert doc["block_layout"]["engines"]["sglang"] == "misserves"
    top = _doc(_variant(fixtures_root, "sample-from-anchor-top"), fixtures_root / "targets/Qwen3-4B")
    # its converter writes no sample_from_anchor (convert/dflash/converter.py _build_config), so the
    # converted draft runs 1+N: tests/test_engine_parser_judges.py runs the converter on this variant
    assert top["block_layout"]["engines"]["speculators"] == "misserves"
    assert top["block_layout"]["engines"]["vllm"] == "misserves"  # not a speculators config: not copied


def test_deepspec_config_does_not_drown_in_dflash_v1_errors(fixtures_root: Path) -> None:
    doc = _doc(_variant(fixtures_root, "deepspec-dflash"), fixtures_root / "targets/Qwen3-4B")
    assert doc["ok"] is True and doc["generation"] == "DSpark"
    assert doc["block_layout"]["source"] == "architectures"
    codes = {f["code"] for f in doc["findings"]}
    assert codes == {"DF160", "DF220"}  # no DF140, no DF114 for the -1 tap, no DF215 for its embeddings
    assert set(doc["serve"]) == {"vllm", "tensorrt-llm"}  # SGLang's DSPARK needs markov_rank > 0
    vllm = doc["serve"]["vllm"]
    assert vllm[:2] == ["env", "VLLM_USE_V2_MODEL_RUNNER=1"]
    assert json.loads(vllm[vllm.index("--speculative-config") + 1])["method"] == "dspark"
    assert json.loads(vllm[vllm.index("--speculative-config") + 1])["num_speculative_tokens"] == 7  # B drafts
    assert "decoding_type: DSpark" in doc["serve"]["tensorrt-llm"][2]
    assert "max_draft_len: 7" in doc["serve"]["tensorrt-llm"][2]
    assert "markov_rank > 0" in doc["readers"]["sglang"]["reason"]


def test_dspark_with_markov_head_gets_sglang_dspark_and_its_heads_checked(fixtures_root: Path, tmp_path: Path) -> None:
    src = _variant(fixtures_root, "deepspec-dspark")
    doc = _doc(src, fixtures_root / "targets/Qwen3-4B")
    assert doc["ok"] is True, doc["findings"]
    sglang = doc["serve"]["sglang"]
    assert sglang[sglang.index("--speculative-algorithm") + 1] == "DSPARK"
    assert sglang[sglang.index("--speculative-num-draft-tokens") + 1] == "8"  # B drafts + the bonus token
    assert sglang[sglang.index("--speculative-dspark-block-size") + 1] == "7"
    # the Markov head is shape-checked from the header: a rank that is not the config's is DF213
    import make_fixtures

    cfg = json.loads((src / "config.json").read_text())
    tensors = layout_fixtures.variant_tensors(cfg, make_fixtures.draft_tensors(cfg))
    tensors["markov_w2.weight"] = ("BF16", [cfg["vocab_size"], 32])
    del tensors["confidence_proj.bias"]
    bad = tmp_path / "bad"
    make_fixtures.write_draft(bad, cfg, tensors=tensors)
    doc = _doc(bad, fixtures_root / "targets/Qwen3-4B")
    msgs = {f["code"]: f["message"] for f in doc["findings"]}
    assert "markov_w2.weight is [151936, 32], expected [151936, 64]" in msgs["DF213"]
    assert "confidence_proj.bias" in msgs["DF212"]
    assert doc["serve"] == {} and not any(v["loads"] for v in doc["readers"].values())


def test_speculators_dspark_export_without_a_key_is_ambiguous(fixtures_root: Path) -> None:
    doc = _doc(_variant(fixtures_root, "speculators-dspark-undeclared"), fixtures_root / "targets/Qwen3-4B")
    assert doc["block_layout"]["ambiguous"] is True
    [f] = [f for f in doc["findings"] if f["code"] == "DF163"]
    assert "vLLM assumes anchor-first" in f["message"] and "z-lab (main) assumes 1+N" in f["message"]


def test_conflicting_and_invalid_declarations(fixtures_root: Path) -> None:
    root = fixtures_root / "mutants"
    conflict = _doc(root / "DF161-layout-conflict", root / "targets/small")
    [f] = [f for f in conflict["findings"] if f["code"] == "DF161"]
    assert "dflash_config.sample_from_anchor is true but sample_from_anchor is false" in f["message"]
    assert conflict["ok"] is False and conflict["block_layout"]["conflict"]
    invalid = _doc(root / "DF162-sample-from-anchor-string", root / "targets/small")
    assert any(f["code"] == "DF162" and "'true', not true or false" in f["message"] for f in invalid["findings"])


def test_resolution_order() -> None:
    assert resolve_layout({}).layout == ONE_PLUS_N
    assert resolve_layout({"architectures": ["Gemma4DSparkModel"]}).source == "architectures"
    explicit = resolve_layout({"architectures": ["Qwen3DSparkModel"], "sample_from_anchor": False})
    assert (explicit.layout, explicit.source) == (ONE_PLUS_N, "sample_from_anchor")
    domino = resolve_layout({"dflash_config": {"shift_label": True}})
    assert (domino.layout, domino.source) == (ANCHOR_FIRST, "dflash_config.shift_label")


def test_fc_width_contradicting_taps_fails_every_reader(fixtures_root: Path) -> None:
    """Issue 31: DF211 (an fc width that contradicts target_layer_ids) and 11 readers saying
    "yes, loads as is"; a verdict must agree with the findings that stop the load."""
    root = fixtures_root / "mutants"
    doc = _doc(root / "DF211-fc-four-taps", root / "targets/small")
    assert any(f["code"] == "DF211" for f in doc["findings"])
    for key, verdict in doc["readers"].items():
        assert verdict["loads"] is False and "DF211" in verdict["reason"], key
    clean = _doc(root / "base", root / "targets/small")
    assert all(v["loads"] for k, v in clean["readers"].items() if k != "lmdeploy")


@pytest.mark.slow
def test_report_names_the_block_layout(fixtures_root: Path) -> None:
    res = run_cli("inspect", str(_variant(fixtures_root, "domino-shift-label")), env={"COLUMNS": "200"})
    assert "block anchor-first (dflash_config.shift_label)" in res.stdout
    plain = run_cli("inspect", str(fixtures_root / "drafts/Qwen3-4B-DFlash-b16"), env={"COLUMNS": "200"})
    assert "block 1+N (default)" in plain.stdout


def test_muse_glimmer_names_are_dflash_names(fixtures_root: Path, tmp_path: Path) -> None:
    import make_fixtures

    cfg = json.loads((fixtures_root / "mutants/base/config.json").read_text())
    cfg["architectures"] = ["MuseGlimmerAssistantModel"]
    tensors = make_fixtures.draft_tensors(cfg)
    tensors["encoder.fc.weight"] = tensors.pop("fc.weight")
    tensors["encoder.output_norm_enc.weight"] = tensors.pop("hidden_norm.weight")
    make_fixtures.write_draft(tmp_path / "mg", cfg, tensors=tensors)
    doc = _doc(tmp_path / "mg", fixtures_root / "mutants/targets/small")
    assert doc["generation"] == "DFlash"
    assert {f["code"] for f in doc["findings"]} == {"DF220"}


def test_layout_fixture_expectations_are_written(fixtures_root: Path) -> None:
    written = json.loads((fixtures_root / "drafts/layouts/expected.json").read_text())
    assert written == {k: v[1] for k, v in layout_fixtures.VARIANTS.items()}


def test_fp16_and_pre_ampere_runs_are_named() -> None:
    from dflash_ckpt.checks.precision import precision_findings

    assert precision_findings("d", "cpu", None, "bfloat16", "float16") == []
    assert precision_findings("d", "cuda:0", (9, 0), "bfloat16", "bfloat16") == []
    [fp16] = precision_findings("d", "cpu", None, "float16", "bfloat16")
    assert fp16.code == "DF318" and "draft runs in float16" in fp16.message
    [v100] = precision_findings("d", "cuda:0", (7, 0), "bfloat16", "bfloat16")
    assert "compute capability 7.0" in v100.message


@pytest.mark.slow
@pytest.mark.parametrize("draft, head", [("drafts/layouts/deepspec-dspark", "DSpark's Markov head ('markov_rank' 64)"),
                                         ("mutants/DF167-lilicorr", "LiLiCorr's candidate-lattice head")])
def test_smoke_run_refuses_a_head_it_cannot_run(fixtures_root: Path, draft: str, head: str) -> None:
    res = run_cli("smoke-run", str(fixtures_root / draft), "--target", str(fixtures_root / "mutants/targets/small"))
    assert res.code == 2 and "DF151" in res.stderr and head in res.stderr, res.stderr


def test_vllm_qwen3_omni_dspark_needs_a_markov_head(fixtures_root: Path, tmp_path: Path) -> None:
    import make_fixtures

    cfg = json.loads((_variant(fixtures_root, "deepspec-dflash") / "config.json").read_text())
    cfg["architectures"] = ["Qwen3OmniDSparkModel"]
    make_fixtures.write_draft(tmp_path / "omni", cfg, tensors=layout_fixtures.variant_tensors(
        {**cfg, "architectures": ["Qwen3DSparkModel"]}, make_fixtures.draft_tensors(cfg)))
    doc = _doc(tmp_path / "omni", fixtures_root / "targets/Qwen3-4B")
    assert doc["block_layout"]["engines"]["vllm"] == "refuses"
    assert "markov_head_type 'vanilla'" in doc["readers"]["vllm"]["reason"] and "vllm" not in doc["serve"]


def test_vllm_reader_corrections(fixtures_root: Path, tmp_path: Path) -> None:
    """vLLM 0.32.0: a top-level mask id is read when dflash_config has none; aux layer ids from
    eagle_aux_hidden_state_layer_ids or an eagle_config dict override the taps."""
    from dflash_ckpt.checks.engines.verdicts import judge_readers
    from dflash_ckpt.draftspec.specs import build_spec

    cfg = json.loads((fixtures_root / "mutants/base/config.json").read_text())
    top_mask = {**cfg, "mask_token_id": cfg["dflash_config"]["mask_token_id"],
                "dflash_config": {"target_layer_ids": [1, 3, 5]}}
    assert judge_readers(build_spec(top_mask, label="d"))["vllm"].loads
    right = judge_readers(build_spec({**cfg, "eagle_aux_hidden_state_layer_ids": [2, 4, 6]}, label="d"))["vllm"]
    assert right.loads
    wrong = judge_readers(build_spec({**cfg, "eagle_aux_hidden_state_layer_ids": [1, 3, 5]}, label="d"))["vllm"]
    assert not wrong.loads and "target_layer_ids + 1 = [2, 4, 6]" in wrong.reason
    empty = judge_readers(build_spec({**cfg, "eagle_config": {"use_aux_hidden_state": True}}, label="d"))["vllm"]
    assert not empty.loads and "replaces the taps by none" in empty.reason


def test_lmdeploy_has_no_dflash2_and_mlx_vlm_fills_defaults(fixtures_root: Path) -> None:
    from dflash_ckpt.checks.engines.verdicts import judge_readers
    from dflash_ckpt.draftspec.specs import build_spec

    v2 = json.loads((fixtures_root / "mutants/base2/config.json").read_text())
    assert "no dflash2" in judge_readers(build_spec(v2, label="d"))["lmdeploy"].reason
    cfg = json.loads((fixtures_root / "mutants/base/config.json").read_text())
    del cfg["dflash_config"]["mask_token_id"]
    mlx = judge_readers(build_spec(cfg, label="d"))["mlx-vlm"]
    assert not mlx.loads and "its default 248070 (Qwen3.5-9B's) without a word" in mlx.reason


def test_a_cached_older_commit_that_is_another_draft_is_named(fixtures_root: Path, tmp_path: Path) -> None:
    """z-lab/dflash#152: the repo changed layers and taps in place; the old snapshot is still cached."""
    from test_inspect_cache import populate_cache

    home = tmp_path / "hf"
    repo = "z-lab/Qwen3-4B-DFlash-b16"
    commit = populate_cache(home / "hub", repo, fixtures_root / "drafts/Qwen3-4B-DFlash-b16")
    old = json.loads((fixtures_root / "drafts/Qwen3-4B-DFlash-b16/config.json").read_text())
    old.update(num_hidden_layers=4, layer_types=["full_attention"] * 4)
    old["dflash_config"]["target_layer_ids"] = [1, 12, 23, 33]
    old_commit = "0" * 40
    snap = home / "hub/models--z-lab--Qwen3-4B-DFlash-b16/snapshots" / old_commit
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps(old))
    env = {"HF_HOME": str(home), "HF_HUB_OFFLINE": "1", "HF_ENDPOINT": "http://127.0.0.1:9"}
    doc = run_cli("inspect", repo, "--json", env=env).result()
    [f] = [f for f in doc["findings"] if f["code"] == "DF319"]
    assert f"commit {old_commit}" in f["message"] and "num_hidden_layers 4 (here 5)" in f["message"]
    assert "target_layer_ids [1, 12, 23, 33] (here [1, 9, 17, 25, 33])" in f["message"]
    assert f"pin {repo}@{commit}" in f["message"]
    # the same config under another commit is no finding; a local folder never is
    (snap / "config.json").write_text((fixtures_root / "drafts/Qwen3-4B-DFlash-b16/config.json").read_text())
    assert "DF319" not in {f["code"] for f in run_cli("inspect", repo, "--json", env=env).result()["findings"]}


def test_layout_documents_hold_the_schema(fixtures_root: Path) -> None:
    import jsonschema

    from dflash_ckpt.schema import load_schema

    docs = api_inspect([str(_variant(fixtures_root, n)) for n in VARIANTS], fixtures_root / "targets/Qwen3-4B").envelope()
    jsonschema.Draft202012Validator(load_schema()).validate(docs)
    assert [r["block_layout"]["layout"] for r in docs["results"]] == [v[1] for v in layout_fixtures.VARIANTS.values()]


def test_dspark_names_of_the_dflash_keys_are_not_missing_keys(fixtures_root: Path) -> None:
    from dflash_ckpt.checks import run_checks
    from dflash_ckpt.checks.engines.verdicts import judge_readers
    from dflash_ckpt.draftspec.specs import build_spec

    cfg = json.loads((_variant(fixtures_root, "deepspec-dflash") / "config.json").read_text())
    cfg["dspark_block_size"] = cfg.pop("block_size")
    spec = build_spec(cfg, label="d")
    assert "DF101" not in {f.code for f in run_checks(spec)}
    assert judge_readers(spec)["vllm"].loads
    cfg.pop("dspark_block_size")
    assert "DF101" in {f.code for f in run_checks(build_spec(cfg, label="d"))}


def test_tokenizer_ids_past_the_embedding_rows(fixtures_root: Path, tmp_path: Path) -> None:
    target = tmp_path / "t"
    shutil.copytree(fixtures_root / "mutants/targets/small", target)
    (target / "tokenizer_config.json").write_text(json.dumps({"added_tokens_decoder": {"1000": {}, "1024": {}}}))
    doc = _doc(fixtures_root / "mutants/base", target)
    [f] = [f for f in doc["findings"] if f["code"] == "DF316"]
    assert "names token id 1024, not below the embedding's 1024 rows" in f["message"]
    (target / "tokenizer_config.json").write_text("{not json")  # best effort: no finding, no error
    doc = _doc(fixtures_root / "mutants/base", target)
    assert doc["error"] is None and "DF316" not in {f["code"] for f in doc["findings"]}
