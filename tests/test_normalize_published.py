"""normalize on every published draft (one file and sharded): canonical, lossless, idempotent.

Through the CLI: each draft is normalized into OUT with its target, then OUT is checked with
``inspect`` and normalized again. The drafts are the published configs with sparse weights of
their real size, so hard links (not copies) are what keeps this fast.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from conftest import no_traceback
from normalize_support import files_under, read_json, resolved, tree_state

from dflash_ckpt.draftspec.specs import DFLASH_KEYS, SCALING_KEYS

PUBLISHED_NAMES = list(json.loads((Path(__file__).parents[1] / "fixtures/published/index.json").read_text()))
CANONICAL_NESTED = ("block_size", "mask_token_id", "num_target_layers", "target_layer_ids")


def _target_dir(root: Path, entry: dict[str, Any]) -> Path:
    return root / "targets" / entry["target"].split("/")[-1]


@pytest.mark.parametrize("sharded", [False, True], ids=["single", "sharded"])
@pytest.mark.parametrize("name", PUBLISHED_NAMES)
def test_published_draft_normalizes_losslessly(cli, fixtures_root: Path, published: dict[str, Any], tmp_path: Path, name: str, sharded: bool) -> None:
    draft = fixtures_root / "drafts" / (name + ("-sharded" if sharded else ""))
    target = _target_dir(fixtures_root, published[name])
    before_state = tree_state(draft)
    original_bytes = (draft / "config.json").read_bytes()
    original = json.loads(original_bytes)
    out = tmp_path / "out"

    res = cli("normalize", str(draft), str(out), "--target", str(target), "--json")
    no_traceback(res)
    assert res.code == 0, res.stdout + res.stderr
    doc = res.merged()
    assert doc["ok"] and doc["written"] and doc["changed"], doc
    # every published draft lacks something of the canonical form
    assert doc["diff"].startswith("---") and doc["changes"]
    # every reader, the TensorRT-LLM, MLX and exllamav3 ones included, loads the canonical form
    assert {"tensorrt-llm", "zlab-mlx", "mlx-vlm", "exllamav3-legacy", "exllamav3"} <= set(doc["readers_after"])
    # (lmdeploy 0.18 has no dflash2 algorithm: a DFlash2 draft is not its to load, canonical or not)
    dflash2 = "DFlash2DraftModel" in original["architectures"]
    assert {k: v["loads"] for k, v in doc["readers_after"].items()} == {
        k: not (dflash2 and k == "lmdeploy") for k in doc["readers_after"]}
    assert doc["resolved_before"] == doc["resolved_after"]

    new = read_json(out / "config.json")
    # resolved values identical, computed independently of the command's report
    assert resolved(new) == resolved(original)
    nested = new["dflash_config"]
    for key in CANONICAL_NESTED:
        assert nested[key] == resolved(original)[key], key
    assert new["block_size"] == nested["block_size"] and new["num_target_layers"] == nested["num_target_layers"]
    assert isinstance(new["layer_types"], list) and len(new["layer_types"]) == new["num_hidden_layers"]
    rope = original.get("rope_parameters") or {}
    assert new.get("rope_theta") == original.get("rope_theta", rope.get("rope_theta"))  # the MLX loaders' mirror
    for key in SCALING_KEYS:
        if original.get(key) is not None:
            assert nested[key] == original[key]
    # nothing lost: every other key with its value, in its order
    for key, value in original.items():
        assert key in new, key
        if key not in (*DFLASH_KEYS, "dflash_config"):
            assert json.dumps(new[key]) == json.dumps(value), key
    assert [k for k in new if k in original] == list(original)
    for key, value in original["dflash_config"].items():
        assert json.dumps(nested[key]) == json.dumps(value)
    assert [k for k in nested if k in original["dflash_config"]] == list(original["dflash_config"])
    # the text keeps its style: 2-space indent, trailing newline, unchanged lines kept
    text = (out / "config.json").read_text()
    assert text.endswith("}\n") and text.startswith('{\n  "')
    kept = [line for line in original_bytes.decode().splitlines() if line.strip() not in ("{", "}", "},", "],")]
    assert all(line in text.splitlines() for line in kept)

    # a complete draft folder: the same files; weights hard-linked, so byte-identical
    assert files_under(out) == files_under(draft)
    for rel in files_under(draft):
        src, dst = draft / rel, out / rel
        if rel.endswith(".safetensors"):
            assert os.stat(src).st_ino == os.stat(dst).st_ino, rel
        elif rel != "config.json":
            assert src.read_bytes() == dst.read_bytes(), rel
    assert doc["files"]["bytes_copied"] < 1 << 20
    assert sorted(doc["files"]["linked"]) == sorted(f for f in files_under(draft) if f.endswith(".safetensors"))

    # inspect agrees: no errors, every reader loads it
    ins = cli("inspect", str(out), "--target", str(target), "--json")
    assert ins.code == 0, ins.stdout
    idoc = ins.result()
    assert idoc["layout"] == "nested"
    assert all(v["loads"] for k, v in idoc["readers"].items() if not (dflash2 and k == "lmdeploy")), idoc["readers"]
    assert [f for f in idoc["findings"] if f["severity"] == "error"] == []

    # idempotent: canonical for --check, and a second normalize changes no byte
    check = cli("normalize", str(out), "--check")
    assert check.code == 0, check.stdout + check.stderr
    again = tmp_path / "again"
    res2 = cli("normalize", str(out), str(again), "--json")
    assert res2.code == 0 and res2.merged()["changed"] is False and res2.merged()["diff"] == ""
    assert (again / "config.json").read_bytes() == (out / "config.json").read_bytes()

    # DRAFT untouched, every file hashed (content, mode, mtime, inode)
    assert tree_state(draft) == before_state


@pytest.mark.parametrize("name", PUBLISHED_NAMES)
def test_published_draft_check_fails_before_normalize(cli, fixtures_root: Path, name: str) -> None:
    draft = fixtures_root / "drafts" / name
    res = cli("normalize", str(draft), "--check")
    no_traceback(res)
    assert res.code == 1
    assert "not canonical" in res.stdout and "+++ " in res.stdout


@pytest.mark.parametrize("name", PUBLISHED_NAMES)
def test_published_draft_no_mirrors(cli, fixtures_root: Path, tmp_path: Path, name: str) -> None:
    draft = fixtures_root / "drafts" / name
    original = read_json(draft / "config.json")
    res = cli("normalize", str(draft), str(tmp_path / "out"), "--no-mirrors", "--json")
    assert res.code == 0, res.stdout + res.stderr
    new = read_json(tmp_path / "out" / "config.json")
    assert not any(k in new for k in DFLASH_KEYS)
    assert ("rope_theta" in new) == ("rope_theta" in original)  # no mirrors of any kind
    assert resolved(new) == resolved(original)
    doc = res.merged()
    # readers that look only at the top level are told, not silently broken
    assert doc["readers_after"]["lmdeploy"]["loads"] is False
    assert cli("normalize", str(tmp_path / "out"), "--check", "--no-mirrors").code == 0
    assert cli("normalize", str(tmp_path / "out"), "--check").code == 1
