"""normalize --in-place: atomic rewrite, backup, and Hugging Face cache snapshots (links to blobs)."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest

from conftest import no_traceback
from normalize_support import read_json, resolved, tree_state

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def copy_draft(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


@pytest.mark.slow
def test_in_place_rewrites_with_backup(cli, fixtures_root: Path, tmp_path: Path) -> None:
    draft = copy_draft(fixtures_root / "mutants" / "DF134-softcap-top-level", tmp_path / "d")
    old = (draft / "config.json").read_bytes()
    os.chmod(draft / "config.json", 0o640)
    weights = tree_state(draft)["model.safetensors"]
    res = cli("normalize", str(draft), "--in-place", "--json")
    no_traceback(res)
    assert res.code == 0, res.stdout + res.stderr
    doc = res.merged()
    assert doc["written"] is True and doc["backup"] == str(draft / "config.json.orig")
    assert (draft / "config.json.orig").read_bytes() == old
    new = read_json(draft / "config.json")
    assert new["dflash_config"]["final_logit_softcapping"] == 30.0 and new["final_logit_softcapping"] == 30.0
    assert resolved(new) == resolved(read_json(draft / "config.json.orig"))
    assert oct(os.stat(draft / "config.json").st_mode & 0o777) == oct(0o640)
    assert tree_state(draft)["model.safetensors"] == weights
    assert sorted(p.name for p in draft.iterdir()) == ["config.json", "config.json.orig", "model.safetensors"]
    # a second run finds it canonical and writes nothing (the backup stays the original)
    again = cli("normalize", str(draft), "--in-place")
    assert again.code == 0 and "already canonical" in again.stdout
    assert (draft / "config.json.orig").read_bytes() == old


@pytest.mark.slow
def test_in_place_no_backup_and_existing_backup(cli, fixtures_root: Path, tmp_path: Path) -> None:
    draft = copy_draft(fixtures_root / "mutants" / "base", tmp_path / "d")
    (draft / "config.json.orig").write_text("an older backup\n")
    res = cli("normalize", str(draft), "--in-place")
    no_traceback(res)
    assert res.code == 2 and "config.json.orig exists" in res.stderr and "--no-backup" in res.stderr
    assert (draft / "config.json.orig").read_text() == "an older backup\n"
    assert "block_size" not in read_json(draft / "config.json")["dflash_config"]
    assert cli("normalize", str(draft), "--in-place", "--no-backup").code == 0
    assert (draft / "config.json.orig").read_text() == "an older backup\n"
    assert read_json(draft / "config.json")["dflash_config"]["block_size"] == 8
    assert not [p for p in draft.iterdir() if p.name.endswith(".tmp")]


def test_in_place_refusal_changes_nothing(cli, fixtures_root: Path, tmp_path: Path) -> None:
    draft = copy_draft(fixtures_root / "mutants" / "DF103-block-size-conflict", tmp_path / "d")
    state = tree_state(draft)
    res = cli("normalize", str(draft), "--in-place")
    assert res.code == 1 and "--prefer" in res.stderr
    assert tree_state(draft) == state


def make_cache(cache: Path, draft: Path, repo: str = "org/draft") -> Path:
    """A Hugging Face cache holding ``draft`` as huggingface_hub lays it out: snapshot links to blobs."""
    repo_dir = cache / ("models--" + repo.replace("/", "--"))
    (repo_dir / "refs").mkdir(parents=True)
    (repo_dir / "refs" / "main").write_text(COMMIT)
    snap = repo_dir / "snapshots" / COMMIT
    snap.mkdir(parents=True)
    (repo_dir / "blobs").mkdir()
    for f in sorted(draft.iterdir()):
        data = f.read_bytes()
        blob = repo_dir / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        os.symlink(os.path.relpath(blob, snap), snap / f.name)
    return snap


def test_in_place_in_cache_snapshot_replaces_the_link(cli, fixtures_root: Path, tmp_path: Path) -> None:
    snap = make_cache(tmp_path / "hub", fixtures_root / "mutants" / "base")
    link = snap / "config.json"
    blob = link.resolve()
    blob_bytes = blob.read_bytes()
    blobs_before = tree_state(blob.parent)
    snap_before = tree_state(snap)
    # refused unless forced: every other tool loads from the cache, and `hf cache verify` would fail
    res = cli("normalize", str(snap), "--in-place")
    assert res.code == 2 and "Hugging Face cache snapshot" in res.stderr and "`dflash-ckpt normalize org/draft OUT`" in res.stderr
    assert "--force" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert tree_state(snap) == snap_before and link.is_symlink()
    res = cli("normalize", str(snap), "--in-place", "--force")
    no_traceback(res)
    assert res.code == 0, res.stdout + res.stderr
    assert not link.is_symlink() and link.is_file()
    assert read_json(link)["dflash_config"]["block_size"] == 8
    # the shared blob was not written through
    assert blob.read_bytes() == blob_bytes and tree_state(blob.parent) == blobs_before
    assert (snap / "config.json.orig").read_bytes() == blob_bytes
    assert (snap / "model.safetensors").is_symlink()


def test_repo_id_from_cache_offline(cli, fixtures_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    snap = make_cache(tmp_path / "hub", fixtures_root / "mutants" / "base")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    out = tmp_path / "out"
    res = cli("normalize", "org/draft", str(out), "--json")
    no_traceback(res)
    assert res.code == 0, res.stdout + res.stderr
    assert res.merged()["draft"] == "org/draft"
    assert read_json(out / "config.json")["dflash_config"]["block_size"] == 8
    # the weights are linked to the cache's blob, not to the snapshot's symlink
    assert os.stat(out / "model.safetensors").st_ino == os.stat((snap / "model.safetensors").resolve()).st_ino
    assert not (out / "model.safetensors").is_symlink()
    assert (snap / "config.json").is_symlink()


def test_repo_id_check_and_in_place_offline(cli, fixtures_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    snap = make_cache(tmp_path / "hub", fixtures_root / "mutants" / "base")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    blob = (snap / "config.json").resolve()
    blob_bytes = blob.read_bytes()
    res = cli("normalize", "org/draft", "--check")
    no_traceback(res)
    assert res.code == 1 and "not canonical" in res.stdout
    assert cli("normalize", f"org/draft@{COMMIT}", "--dry-run").code == 0
    assert (snap / "config.json").is_symlink()
    refused = cli("normalize", "org/draft", "--in-place", "--no-backup")
    assert refused.code == 2 and "`dflash-ckpt normalize org/draft OUT`" in refused.stderr
    assert (snap / "config.json").is_symlink()
    res = cli("normalize", "org/draft", "--in-place", "--no-backup", "--force")
    assert res.code == 0, res.stdout + res.stderr
    assert not (snap / "config.json").is_symlink()
    assert read_json(snap / "config.json")["dflash_config"]["block_size"] == 8
    assert blob.read_bytes() == blob_bytes
    assert cli("normalize", "org/draft", "--check").code == 0
    res = cli("normalize", "org/missing", "--check")
    no_traceback(res)
    assert res.code == 2 and res.stderr.startswith("org/missing: DF001 error: ")
