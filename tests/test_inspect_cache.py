"""Hub repo ids resolved from the local Hugging Face cache, with no network (HF_HUB_OFFLINE=1)."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from conftest import run_cli


def populate_cache(hub_cache: Path, repo_id: str, folder: Path, *, ref: str = "main") -> str:
    """Lay ``folder`` out as huggingface_hub does: blobs by hash, snapshot links, a ref file."""
    repo = hub_cache / ("models--" + repo_id.replace("/", "--"))
    commit = hashlib.sha1(f"{repo_id}@{ref}".encode()).hexdigest()
    snap = repo / "snapshots" / commit
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    snap.mkdir(parents=True, exist_ok=True)
    for f in folder.iterdir():
        blob = repo / "blobs" / hashlib.sha256(f.name.encode() + f.read_bytes()[:64]).hexdigest()
        shutil.copyfile(f, blob)
        os.symlink(os.path.relpath(blob, snap), snap / f.name)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / ref).write_text(commit)
    return commit


def test_repo_id_from_cache_with_hf_home(tmp_path: Path, fixtures_root: Path) -> None:
    home = tmp_path / "hf"
    commit = populate_cache(home / "hub", "z-lab/Qwen3-4B-DFlash-b16", fixtures_root / "drafts/Qwen3-4B-DFlash-b16")
    populate_cache(home / "hub", "Qwen/Qwen3-4B", fixtures_root / "targets/Qwen3-4B")
    env = {"HF_HOME": str(home), "HF_HUB_OFFLINE": "1", "HF_ENDPOINT": "http://127.0.0.1:9"}
    res = run_cli("inspect", "z-lab/Qwen3-4B-DFlash-b16", "--target", "Qwen/Qwen3-4B", "--json", env=env)
    assert res.code == 0, res.stderr
    doc = res.json()
    assert doc["draft"] == "z-lab/Qwen3-4B-DFlash-b16"
    assert doc["resolved"]["target_layer_ids"] == [1, 9, 17, 25, 33]
    assert doc["target"]["num_hidden_layers"] == 36
    # the same by commit, and with HF_HUB_CACHE instead of HF_HOME
    env2 = {"HF_HUB_CACHE": str(home / "hub"), "HF_HUB_OFFLINE": "1", "HF_ENDPOINT": "http://127.0.0.1:9"}
    assert run_cli("inspect", f"z-lab/Qwen3-4B-DFlash-b16@{commit}", "-q", env=env2).code == 0
    assert run_cli("inspect", "z-lab/Qwen3-4B-DFlash-b16", "--revision", commit, "-q", env=env2).code == 0


def test_revision_not_cached_is_a_clear_error(tmp_path: Path, fixtures_root: Path) -> None:
    home = tmp_path / "hf"
    populate_cache(home / "hub", "z-lab/Qwen3-4B-DFlash-b16", fixtures_root / "drafts/Qwen3-4B-DFlash-b16")
    env = {"HF_HOME": str(home), "HF_HUB_OFFLINE": "1", "HF_ENDPOINT": "http://127.0.0.1:9"}
    res = run_cli("inspect", "z-lab/Qwen3-4B-DFlash-b16@v2", env=env)
    assert res.code == 2
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert "z-lab/Qwen3-4B-DFlash-b16@v2" in res.stderr


def test_revision_given_twice_must_agree(tmp_path: Path) -> None:
    res = run_cli("inspect", "org/name@a", "--revision", "b", env={"HF_HOME": str(tmp_path), "HF_HUB_OFFLINE": "1"})
    assert res.code == 2 and "revision given twice" in res.stderr


def test_local_folder_wins_over_repo_id(tmp_path: Path, fixtures_root: Path) -> None:
    """A relative path that looks like org/name is a folder when it exists, as from_pretrained does."""
    shutil.copytree(fixtures_root / "mutants/base", tmp_path / "org" / "name")
    res = run_cli("inspect", "org/name", "--json", cwd=tmp_path, env={"HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"})
    assert res.code == 0 and res.json()["draft"] == "org/name"
