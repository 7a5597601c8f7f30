"""``download_snapshot`` (what ``normalize`` and ``smoke-run`` call for a repo id), directly and
through ``source.local_folder``, against the loopback Hub. Each call runs in its own process with
``HF_ENDPOINT`` at the server and the cache in a temporary folder."""

from __future__ import annotations

import filecmp
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import no_traceback, run_cli
from hub_server import HubServer, hub_env

SCRIPT = """
import json, sys
from dflash_ckpt.errors import DFlashCkptError
from dflash_ckpt.sources.hub.repo import download_snapshot
from dflash_ckpt.sources.repo_ref import RepoRef
from dflash_ckpt.sources.resolve import local_folder
args = json.loads(sys.argv[1])
try:
    if args["via"] == "local_folder":
        path, label = local_folder(args["arg"], revision=args.get("revision"), token=args.get("token"), allow_patterns=args.get("allow"))
    else:
        repo, _, rev = args["arg"].partition("@")
        path, label = download_snapshot(RepoRef(repo, rev or None), token=args.get("token"), allow_patterns=args.get("allow")), None
    print(json.dumps({"path": str(path), "label": label}))
except DFlashCkptError as err:
    print(json.dumps({"error": str(err), "exit_code": err.exit_code}))
"""




def fetch(hub: HubServer, home: Path, arg: str, *, via: str = "download_snapshot", **kw: Any) -> dict[str, Any]:
    env = dict(kw.pop("env", {}))
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, json.dumps({"arg": arg, "via": via, **kw})],
        env={**os.environ, **hub_env(hub, home, **env)}, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_only_the_files_asked_for(hub: HubServer, home: Path, fixtures_root: Path) -> None:
    repo = "z-lab/Qwen3-8B-DFlash-b16-sharded"
    got = fetch(hub, home, repo, allow=["config.json", "*.safetensors.index.json"])
    commit = hub.commit_of(repo)
    path = Path(got["path"])
    assert path == home / "hub/models--z-lab--Qwen3-8B-DFlash-b16-sharded/snapshots" / commit
    assert sorted(p.name for p in path.iterdir()) == ["config.json", "model.safetensors.index.json"]
    assert filecmp.cmp(path / "config.json", fixtures_root / "drafts/Qwen3-8B-DFlash-b16-sharded/config.json", shallow=False)
    assert not [r for r in hub.requests if r.server == "cdn"]  # no weights moved
    assert (home / "hub/models--z-lab--Qwen3-8B-DFlash-b16-sharded/refs/main").read_text() == commit


def test_whole_repo_then_offline(hub: HubServer, home: Path, fixtures_root: Path) -> None:
    got = fetch(hub, home, "tiny/draft", allow=["*.json", "*.safetensors"])
    path = Path(got["path"])
    for name in ("config.json", "model.safetensors"):
        assert filecmp.cmp(path / name, fixtures_root / "mutants/base" / name, shallow=False)
    hub.reset()
    again = fetch(hub, home, "tiny/draft", via="local_folder", allow=["*.json", "*.safetensors"], env={"HF_HUB_OFFLINE": "1"})
    assert again == {"path": str(path), "label": "tiny/draft"}
    assert hub.requests == []
    commit = hub.commit_of("tiny/draft")
    pinned = fetch(hub, home, f"tiny/draft@{commit}", allow=["*.json", "*.safetensors"])
    assert pinned["path"] == str(path)
    assert [r for r in hub.requests if r.path != "/api/agent-harnesses"] == []  # a cached commit needs no request


def test_no_links_when_huggingface_hub_is_told_so(hub: HubServer, home: Path, fixtures_root: Path) -> None:
    """``HF_HUB_DISABLE_SYMLINKS``: the snapshot holds the files themselves, as huggingface_hub's
    own downloads then do, and a second run finds them there."""
    env = {"HF_HUB_DISABLE_SYMLINKS": "1"}
    path = Path(fetch(hub, home, "tiny/draft", allow=["*.json", "*.safetensors"], env=env)["path"])
    for name in ("config.json", "model.safetensors"):
        assert not (path / name).is_symlink() and (path / name).is_file()
        assert filecmp.cmp(path / name, fixtures_root / "mutants/base" / name, shallow=False)
    hub.reset()
    assert fetch(hub, home, "tiny/draft", allow=["*.json", "*.safetensors"], env=env)["path"] == str(path)
    assert not [r for r in hub.requests if r.server == "cdn" or "/resolve/" in r.path]


def test_revision_through_local_folder(hub: HubServer, home: Path, fixtures_root: Path) -> None:
    got = fetch(hub, home, "tiny/draft", via="local_folder", revision="broken")
    assert got["label"] == "tiny/draft@broken"
    path = Path(got["path"])
    assert path.name == hub.commit_of("tiny/draft", "broken")
    assert filecmp.cmp(path / "model.safetensors", fixtures_root / "mutants/DF204-truncated/model.safetensors", shallow=False)


def test_gated_needs_a_token(hub: HubServer, home: Path) -> None:
    err = fetch(hub, home, "gated-org/draft", allow=["config.json"])
    assert err["exit_code"] == 2 and "gated" in err["error"] and "--token" in err["error"] and "\n" not in err["error"]
    ok = fetch(hub, home, "gated-org/draft", allow=["config.json"], token="hf_reader")
    assert (Path(ok["path"]) / "config.json").is_file()


def test_errors_are_one_line(hub: HubServer, home: Path) -> None:
    missing = fetch(hub, home, "nobody/nothing")
    assert missing["exit_code"] == 2 and "repo not found" in missing["error"]
    rev = fetch(hub, home, "tiny/draft@nope")
    assert "revision 'nope' not found" in rev["error"]
    hub.reset()
    offline = fetch(hub, home, "tiny/draft", env={"HF_HUB_OFFLINE": "1"})
    assert offline["exit_code"] == 2 and "not in the local Hugging Face cache" in offline["error"]
    assert hub.requests == []


def test_fails_twice_then_answers(hub: HubServer, home: Path) -> None:
    hub.fail(r"^/api/models/tiny/draft$", status=503, times=2)
    got = fetch(hub, home, "tiny/draft", allow=["config.json"])
    assert (Path(got["path"]) / "config.json").is_file()
    assert sum(r.path == "/api/models/tiny/draft" for r in hub.requests) == 3


def test_normalize_a_repo_id(hub: HubServer, home: Path, tmp_path: Path) -> None:
    """``normalize`` of a repo id downloads it into the cache and writes OUT from there."""
    out = tmp_path / "out"
    res = run_cli("normalize", "tiny/draft", str(out), "--json", env=hub_env(hub, home), timeout=300)
    no_traceback(res)
    assert res.code == 0 and res.merged()["ok"], res.stderr
    assert (out / "config.json").is_file() and (out / "model.safetensors").is_file()
    snapshot = home / "hub/models--tiny--draft/snapshots" / hub.commit_of("tiny/draft")
    assert filecmp.cmp(out / "model.safetensors", snapshot / "model.safetensors", shallow=False)


@pytest.mark.parametrize("first", ["inspect", "download"])
def test_offline_refuses_a_partial_snapshot(hub: HubServer, home: Path, first: str) -> None:
    """Offline, a cache holding only the config (after an inspect or a config-only download) is no
    snapshot for a command that needs the weights."""
    if first == "inspect":
        assert run_cli("inspect", "tiny/draft", env=hub_env(hub, home)).code == 0
    else:
        fetch(hub, home, "tiny/draft", allow=["config.json"])
    hub.reset()
    got = fetch(hub, home, "tiny/draft", allow=["*.json", "*.safetensors"], env={"HF_HUB_OFFLINE": "1"})
    assert got.get("exit_code") == 2, got
    assert "model.safetensors" in got["error"] and "HF_HUB_OFFLINE" in got["error"]
    assert hub.requests == []
    ok = fetch(hub, home, "tiny/draft", allow=["config.json"], env={"HF_HUB_OFFLINE": "1"})
    assert (Path(ok["path"]) / "config.json").is_file()
