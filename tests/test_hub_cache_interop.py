"""What the project's own Hub client (dflash_ckpt/sources/hub/) writes into the Hugging Face
cache is a cache huggingface_hub itself accepts: ``scan_cache_dir`` lists the repo, its revision,
its refs and its files without a warning, and ``hf_hub_download(..., local_files_only=True)``
finds every file, by commit and by branch, at the same path with the same bytes, without a
request. The files are fetched from the loopback Hub (tests/hub_server.py) into a temporary
cache, by ``download_snapshot`` (normalize, smoke-run) and by ``inspect`` (config and index only)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import no_traceback, run_cli
from hub_server import HubServer, hub_env
from test_hub_download import fetch

hub_api = pytest.importorskip("huggingface_hub")


def _scanned(cache: Path, repo_id: str) -> tuple[object, object]:
    """huggingface_hub's view of the cache: the repo's entry, and its one revision."""
    info = hub_api.scan_cache_dir(cache)
    assert info.warnings == [], info.warnings
    repos = {r.repo_id: r for r in info.repos}
    assert repo_id in repos, sorted(repos)
    repo = repos[repo_id]
    assert repo.repo_type == "model" and len(repo.revisions) == 1, repo
    return repo, next(iter(repo.revisions))


def _same_through_hf_hub_download(cache: Path, repo_id: str, snapshot: Path, names: set[str], revisions: list[str]) -> None:
    """Every file, asked of huggingface_hub offline by each revision, is our snapshot's file."""
    for revision in revisions:
        for name in sorted(names):
            got = hub_api.hf_hub_download(repo_id, name, revision=revision, cache_dir=cache, local_files_only=True)
            assert Path(got) == snapshot / name, (revision, name, got)
            assert Path(got).read_bytes() == (snapshot / name).read_bytes()


@pytest.mark.slow
def test_a_downloaded_snapshot_is_one_huggingface_hub_reads(hub: HubServer, home: Path) -> None:
    repo_id = "tiny/draft"
    commit = hub.commit_of(repo_id)
    snapshot = Path(fetch(hub, home, repo_id)["path"])
    cache = home / "hub"
    assert snapshot == cache / "models--tiny--draft/snapshots" / commit
    served = set(hub.repos[repo_id].commits[commit].files)

    repo, revision = _scanned(cache, repo_id)
    assert repo.repo_path == cache / "models--tiny--draft"
    assert revision.commit_hash == commit and revision.refs == frozenset({"main"})
    assert revision.snapshot_path == snapshot
    assert {f.file_name for f in revision.files} == served
    for f in revision.files:
        assert f.file_path == snapshot / f.file_name and f.blob_path.parent == repo.repo_path / "blobs"
        assert f.size_on_disk == (snapshot / f.file_name).stat().st_size
    assert repo.nb_files == len(served)

    before = len(hub.requests)
    _same_through_hf_hub_download(cache, repo_id, snapshot, served, [commit, "main"])
    assert len(hub.requests) == before  # local_files_only: the cache alone answered


def test_a_revision_other_than_main_is_recorded_as_huggingface_hub_records_it(hub: HubServer, home: Path) -> None:
    repo_id = "tiny/draft"
    commit = hub.commit_of(repo_id, "broken")
    snapshot = Path(fetch(hub, home, f"{repo_id}@broken", allow=["config.json"])["path"])
    _, revision = _scanned(home / "hub", repo_id)
    assert revision.commit_hash == commit and revision.refs == frozenset({"broken"})
    assert {f.file_name for f in revision.files} == {"config.json"}
    _same_through_hf_hub_download(home / "hub", repo_id, snapshot, {"config.json"}, [commit, "broken"])


@pytest.mark.slow
def test_what_inspect_caches_is_one_huggingface_hub_reads(hub: HubServer, home: Path) -> None:
    """inspect fetches only the config and the shard index (headers are range reads, not files)."""
    repo_id = "z-lab/Qwen3-8B-DFlash-b16-sharded"
    res = run_cli("inspect", repo_id, env=hub_env(hub, home), timeout=300)
    no_traceback(res)
    assert res.code == 0, (res.stdout, res.stderr)
    commit = hub.commit_of(repo_id)
    cache = home / "hub"
    snapshot = cache / "models--z-lab--Qwen3-8B-DFlash-b16-sharded/snapshots" / commit
    _, revision = _scanned(cache, repo_id)
    names = {f.file_name for f in revision.files}
    assert names == {"config.json", "model.safetensors.index.json"}
    assert revision.commit_hash == commit and revision.refs == frozenset({"main"})
    _same_through_hf_hub_download(cache, repo_id, snapshot, names, [commit, "main"])
    # a shard whose header alone was read (kept beside, in dflash-ckpt/) is no file to huggingface_hub
    with pytest.raises(hub_api.errors.LocalEntryNotFoundError):
        hub_api.hf_hub_download(repo_id, "model-00001-of-00003.safetensors", revision=commit, cache_dir=cache,
                                local_files_only=True)
