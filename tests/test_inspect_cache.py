"""Hub repo ids resolved from the local Hugging Face cache, with no network (HF_HUB_OFFLINE=1)."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from conftest import run_cli


def sparse_copy(src: Path, dst: Path) -> None:
    """Copy ``src`` to ``dst`` keeping its holes: only the data extents are read and written.

    The published-draft fixtures are gigabytes on paper and kilobytes on disk; a plain
    ``shutil.copyfile`` (sendfile) would write every zero of the holes, 1.1 GB per Qwen3-4B draft.
    """
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        for start, end in extents(src):
            fin.seek(start)
            fout.seek(start)
            remaining = end - start
            while remaining:
                chunk = fin.read(min(remaining, 1 << 20))
                fout.write(chunk)
                remaining -= len(chunk)
        fout.truncate(src.stat().st_size)


def extents(path: Path) -> list[tuple[int, int]]:
    """The data extents of a file (everything else is a hole, which reads as zeros)."""
    out, pos, size = [], 0, path.stat().st_size
    with open(path, "rb") as fh:
        while pos < size:
            try:
                start = os.lseek(fh.fileno(), pos, os.SEEK_DATA)
            except OSError:  # ENXIO: only a hole is left
                break
            pos = os.lseek(fh.fileno(), start, os.SEEK_HOLE)
            out.append((start, pos))
    return out


def blocks_and_equal(src: Path, copy: Path) -> int:
    """Bytes ``copy`` takes on disk, after checking that it holds ``src``'s bytes: the same size,
    the same data extents with the same bytes, so the same holes."""
    assert copy.stat().st_size == src.stat().st_size
    assert extents(copy) == extents(src)
    with open(src, "rb") as a, open(copy, "rb") as b:
        for start, end in extents(src):
            a.seek(start)
            b.seek(start)
            assert a.read(end - start) == b.read(end - start)
    return copy.stat().st_blocks * 512


def populate_cache(hub_cache: Path, repo_id: str, folder: Path, *, ref: str = "main") -> str:
    """Lay ``folder`` out as huggingface_hub does: blobs by hash, snapshot links, a ref file."""
    repo = hub_cache / ("models--" + repo_id.replace("/", "--"))
    commit = hashlib.sha1(f"{repo_id}@{ref}".encode()).hexdigest()
    snap = repo / "snapshots" / commit
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    snap.mkdir(parents=True, exist_ok=True)
    for f in folder.iterdir():
        with open(f, "rb") as fh:
            head = fh.read(64)
        blob = repo / "blobs" / hashlib.sha256(f.name.encode() + head).hexdigest()
        sparse_copy(f, blob)
        os.symlink(os.path.relpath(blob, snap), snap / f.name)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / ref).write_text(commit)
    return commit


def test_repo_id_from_cache_with_hf_home(tmp_path: Path, fixtures_root: Path) -> None:
    home = tmp_path / "hf"
    draft = fixtures_root / "drafts/Qwen3-4B-DFlash-b16"
    commit = populate_cache(home / "hub", "z-lab/Qwen3-4B-DFlash-b16", draft)
    populate_cache(home / "hub", "Qwen/Qwen3-4B", fixtures_root / "targets/Qwen3-4B")
    weights = home / "hub/models--z-lab--Qwen3-4B-DFlash-b16/snapshots" / commit / "model.safetensors"
    assert blocks_and_equal(draft / "model.safetensors", weights.resolve()) < 1 << 20
    env = {"HF_HOME": str(home), "HF_HUB_OFFLINE": "1", "HF_ENDPOINT": "http://127.0.0.1:9"}
    res = run_cli("inspect", "z-lab/Qwen3-4B-DFlash-b16", "--target", "Qwen/Qwen3-4B", "--json", env=env)
    assert res.code == 0, res.stderr
    doc = res.result()
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
    assert res.code == 0 and res.result()["draft"] == "org/name"
