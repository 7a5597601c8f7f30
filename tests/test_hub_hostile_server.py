"""A hostile Hub and a hostile cache (issue 18): ids that would build paths outside the
cache, listings too big to parse, Retry-After of any bytes, a deadline for the whole command, and
downloads as good as ``hf download`` (verified, 0644, swept). Every hostile input is built here."""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import CliResult, no_traceback, one_error_line, run_cli
from hub_server import HubServer, hub_env

VICTIM_BYTES = b"the user's own file, not the cache's\n"


def cli(hub: HubServer, home: Path, *args: str, **env: str) -> CliResult:
    res = run_cli(*args, env=hub_env(hub, home, **env), timeout=180)
    no_traceback(res)
    return res


def one_line(res: CliResult, *needles: str) -> str:
    """The one coded error line; the Hub's retry notes may come before it."""
    return one_error_line(res, *needles, alone=False)


def incomplete(home: Path) -> list[Path]:
    return [p for p in home.rglob("*") if p.name.endswith(".incomplete")]


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A file of the user's outside the cache, which no hostile id may reach."""
    path = tmp_path / "victim"
    path.write_bytes(VICTIM_BYTES)
    return path


def escape_to(home: Path, victim: Path, repo: str) -> str:
    """A relative path that, joined to the repo's ``blobs/`` folder, names ``victim``."""
    blobs = home / "hub" / ("models--" + repo.replace("/", "--")) / "blobs"
    return os.path.relpath(victim, blobs)


def weights_and_config(siblings: list[dict[str, Any]], **change: Any) -> list[dict[str, Any]]:
    out = []
    for s in siblings:
        s = json.loads(json.dumps(s))
        if s["rfilename"] == "model.safetensors" and "lfs_oid" in change:
            s["lfs"]["sha256"] = change["lfs_oid"]
        if s["rfilename"] == "config.json" and "blob_id" in change:
            s["blobId"] = change["blob_id"]
        out.append(s)
    return out


# -- 1. ids that build paths --------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("field", ["lfs_oid", "blob_id"])
def test_a_hostile_oid_from_the_hub_writes_nothing_outside(hub: HubServer, home: Path, tmp_path: Path, victim: Path,
                                                          field: str) -> None:
    repo = "tiny/draft"
    hub.tamper[repo] = lambda sib: weights_and_config(sib, **{field: escape_to(home, victim, repo)})
    try:
        commit = hub.commit_of(repo)
        res = cli(hub, home, "normalize", f"{repo}@{commit}", str(tmp_path / "out"))
        one_line(res, "tiny/draft", "not 64 hex digits" if field == "lfs_oid" else "not 40 hex digits")
        assert victim.read_bytes() == VICTIM_BYTES
        res = cli(hub, home, "smoke-run", f"{repo}@{commit}", "--target", str(tmp_path / "no-target"))
        assert res.code == 2 and victim.read_bytes() == VICTIM_BYTES, res.stderr
        assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
    finally:
        del hub.tamper[repo]


def seed_cache(home: Path, hub: HubServer, repo: str, kind: str, bad: dict[str, str]) -> Path:
    """A cache holding a listing for the repo's commit (huggingface_hub's tree file or ours) with
    the ids in ``bad`` instead of the real ones; returns the listing's path."""
    commit = hub.commit_of(repo)
    folder = home / "hub" / ("models--" + repo.replace("/", "--"))
    served = hub.repos[repo].commits[commit].files
    files: dict[str, Any] = {}
    for name, f in served.items():
        entry: dict[str, Any] = {"size": f.size, "blob_id": bad.get(f"blob:{name}", f.blob_id)}
        if f.sha256:
            entry["lfs_sha256"] = bad.get(f"lfs:{name}", f.sha256)
            if kind == "hf":
                entry["lfs_size"] = f.size
        files[name] = entry
    if kind == "hf":
        path, doc = folder / "trees" / f"{commit}.json", {"format_version": 1, "files": files}
    else:
        path, doc = folder / "dflash-ckpt" / commit / "files.json", {"format": 1, "repo_id": repo, "commit": commit, "files": files}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))
    (folder / "refs").mkdir(parents=True, exist_ok=True)
    (folder / "refs" / "main").write_text(commit)
    return path


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["hf", "own"])
@pytest.mark.parametrize("which", ["lfs:model.safetensors", "blob:config.json"])
def test_a_hostile_cached_listing_writes_nothing_outside(hub: HubServer, home: Path, tmp_path: Path, victim: Path,
                                                         kind: str, which: str) -> None:
    repo = "tiny/draft"
    listing = seed_cache(home, hub, repo, kind, {which: escape_to(home, victim, repo)})
    commit = hub.commit_of(repo)
    res = cli(hub, home, "normalize", f"{repo}@{commit}", str(tmp_path / "out"))
    one_line(res, str(listing), "not a listing this tool trusts", "hex digits", "hf cache rm")
    assert victim.read_bytes() == VICTIM_BYTES
    res = cli(hub, home, "smoke-run", f"{repo}@{commit}", "--target", str(tmp_path / "no-target"))
    one_line(res, str(listing))
    assert victim.read_bytes() == VICTIM_BYTES
    res = cli(hub, home, "inspect", f"{repo}@{commit}")
    one_line(res, str(listing))


@pytest.mark.slow
def test_a_cached_listing_naming_a_path_outside_is_refused(hub: HubServer, home: Path, tmp_path: Path) -> None:
    repo = "tiny/draft"
    listing = seed_cache(home, hub, repo, "hf", {})
    doc = json.loads(listing.read_text())
    doc["files"]["../../../../escape.json"] = {"size": 2, "blob_id": "0" * 40}
    listing.write_text(json.dumps(doc))
    res = cli(hub, home, "normalize", f"{repo}@{hub.commit_of(repo)}", str(tmp_path / "out"))
    one_line(res, "a path that leaves the repo")
    assert not list(tmp_path.rglob("escape.json"))


@pytest.mark.slow
def test_a_snapshot_folder_linked_outside_the_cache_is_refused(hub: HubServer, home: Path, tmp_path: Path) -> None:
    repo = "tiny/draft"
    commit = hub.commit_of(repo)
    outside = tmp_path / "users-folder"
    outside.mkdir()
    (outside / "config.json").write_bytes(VICTIM_BYTES)
    snaps = home / "hub/models--tiny--draft/snapshots"
    snaps.mkdir(parents=True)
    (snaps / commit).symlink_to(outside)
    res = cli(hub, home, "normalize", f"{repo}@{commit}", str(tmp_path / "out"))
    one_line(res, "leads outside the Hugging Face cache folder")
    assert sorted(p.name for p in outside.iterdir()) == ["config.json"]
    assert (outside / "config.json").read_bytes() == VICTIM_BYTES


@pytest.mark.slow
def test_a_blobs_folder_linked_outside_the_cache_is_refused(hub: HubServer, home: Path, tmp_path: Path) -> None:
    outside = tmp_path / "users-folder"
    outside.mkdir()
    folder = home / "hub/models--tiny--draft"
    folder.mkdir(parents=True)
    (folder / "blobs").symlink_to(outside)
    res = cli(hub, home, "normalize", "tiny/draft", str(tmp_path / "out"))
    one_line(res, "leads outside")
    assert list(outside.iterdir()) == []


@pytest.mark.slow
def test_a_hostile_ref_is_not_followed(hub: HubServer, home: Path) -> None:
    refs = home / "hub/models--tiny--draft/refs"
    refs.mkdir(parents=True)
    (refs / "main").write_text("../../../../etc")
    res = cli(hub, home, "inspect", "tiny/draft", HF_HUB_OFFLINE="1")
    one_line(res, "not in the local Hugging Face cache")
    assert cli(hub, home, "inspect", "tiny/draft").code == 0
    assert (refs / "main").read_text() == hub.commit_of("tiny/draft")


# -- 6. names no file system holds --------------------------------------------------------------


@pytest.mark.slow
def test_a_5000_character_file_name_is_refused(hub: HubServer, home: Path, tmp_path: Path) -> None:
    repo = "tiny/draft"
    long = "a" * 5000 + ".json"
    hub.tamper[repo] = lambda sib: [*sib, {"rfilename": long, "size": 2, "blobId": "1" * 40}]
    try:
        one_line(cli(hub, home, "inspect", repo), "longer than file systems allow", "at most 255")
        res = cli(hub, home, "normalize", repo, str(tmp_path / "out"))
        line = one_line(res, "longer than file systems allow")
        assert len(line) < 700
    finally:
        del hub.tamper[repo]


# -- 2. Retry-After of any bytes ----------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("value", ["\u00b2", "garbage", "-5", "1.5", "0x10", "9" * 5000, "Fri, 31 Dec 9999 23:59:59 GMT",
                                   "Thu, 01 Jan 1970 00:00:00 GMT", "Mon, 99 Foo 2026 99:99:99 GMT", "\u00ff" * 300])
def test_retry_after_of_any_bytes_is_no_traceback(hub: HubServer, home: Path, value: str) -> None:
    hub.fail(r"^/api/models/tiny/draft$", status=503, times=1, retry_after=value)
    res = cli(hub, home, "inspect", "tiny/draft")
    if res.code == 0:  # not understood, or in the past: the usual backoff
        assert "retry 1/3 in" in res.stderr
    else:  # asks for more than the bound: one line at once
        one_line(res, "asks to retry after", "DFLASH_CKPT_HUB_MAX_RETRY_AFTER")


def test_retry_after_parsing() -> None:
    from dflash_ckpt.sources.hub.retry import retry_after

    class Exc(Exception):
        def __init__(self, value: Any) -> None:
            self.response = type("R", (), {"headers": {"Retry-After": value}})()

    assert retry_after(Exc("7")) == 7
    assert retry_after(Exc("\u00b2")) is None and retry_after(Exc(b"\xb2")) is None
    assert retry_after(Exc("-1")) is None and retry_after(Exc("nan")) is None and retry_after(Exc(None)) is None
    assert retry_after(Exc("9" * 5000)) == float("inf")
    assert retry_after(Exc("Thu, 01 Jan 1970 00:00:00 GMT")) == 0
    assert retry_after(Exc("Fri, 31 Dec 9999 23:59:59 GMT")) > 1e9


# -- 3. one deadline for the whole command ------------------------------------------------------


@pytest.mark.slow
def test_a_dripped_99_mb_header_ends_within_the_command_deadline(hub: HubServer, home: Path, tmp_path: Path,
                                                                 fixtures_root: Path) -> None:
    """The header length says 99,000,000 bytes and the server drips them, cutting the connection
    after each 400 bytes: retries and reconnects all draw on one DFLASH_CKPT_HUB_DEADLINE."""
    folder = tmp_path / "slow"
    folder.mkdir()
    (folder / "config.json").write_bytes((fixtures_root / "mutants/base/config.json").read_bytes())
    with open(folder / "model.safetensors", "wb") as fh:
        fh.write(struct.pack("<Q", 99_000_000) + b'{"__metadata__":{}')
        fh.truncate(99_000_100)
    hub.add_repo("slow/header", folder)
    hub.corrupt(r"^/blobs/", "drip", interval=0.02, times=1000, server="cdn")
    deadline = 4.0
    start = time.monotonic()
    res = cli(hub, home, "inspect", "slow/header", DFLASH_CKPT_HUB_DEADLINE=str(deadline), HF_HUB_DOWNLOAD_TIMEOUT="2")
    elapsed = time.monotonic() - start
    one_line(res, "did not finish answering", "DFLASH_CKPT_HUB_DEADLINE", "retries included")
    assert elapsed < deadline + 10, elapsed  # start-up of the process is the slack
    assert len([r for r in hub.requests if r.server == "cdn"]) < 10


@pytest.mark.slow
def test_a_refused_connection_is_not_retried(home: Path) -> None:
    env = {"HF_ENDPOINT": "http://127.0.0.1:9", "HF_HOME": str(home), "HF_HUB_CACHE": str(home / "hub"),
           "HF_TOKEN": "", "DFLASH_CKPT_HUB_RETRIES": "3", "DFLASH_CKPT_HUB_BACKOFF": "5",
           "HTTP_PROXY": "", "HTTPS_PROXY": "", "ALL_PROXY": "", "NO_PROXY": "127.0.0.1"}
    start = time.monotonic()
    res = run_cli("inspect", "tiny/draft", env=env, timeout=120)
    no_traceback(res)
    assert time.monotonic() - start < 15  # three retries would pause 5 + 10 + 20 s
    assert "retry" not in res.stderr
    one_line(res, "cannot reach http://127.0.0.1:9")


# -- 4. counts capped before parsing ------------------------------------------------------------


@pytest.mark.slow
def test_a_60_mib_listing_of_empty_objects_is_refused_unparsed(hub: HubServer, home: Path) -> None:
    hub.raw_info["tiny/draft"] = b"[" + b"{}," * (20 * 1024 * 1024) + b"{}]"
    try:
        # VmHWM, not ru_maxrss: a child's ru_maxrss keeps the high-water mark of the process it was
        # forked from (this pytest process, hundreds of MiB once torch is loaded); VmHWM is its own.
        code = ("import sys\nfrom dflash_ckpt.cli import run\nrc = run(['inspect', 'tiny/draft'])\n"
                "print(next(l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM:')), file=sys.stderr)\n"
                "sys.exit(rc)")
        proc = subprocess.run([sys.executable, "-c", code], env={**os.environ, **hub_env(hub, home)},
                              capture_output=True, text=True, timeout=120)
        res = CliResult(proc.returncode, proc.stdout, proc.stderr)
        no_traceback(res)
        assert res.code == 2, res.stderr
        assert "JSON objects, more than the 400,000 a listing may hold" in res.stderr
        assert int(res.stderr.strip().splitlines()[-1]) < 600 * 1024  # KiB: the body, never 20M dicts (1.6 GB)
    finally:
        del hub.raw_info["tiny/draft"]


@pytest.mark.slow
def test_600k_siblings_are_refused_and_nothing_large_is_cached(hub: HubServer, home: Path) -> None:
    repo = "tiny/draft"
    hub.tamper[repo] = lambda sib: sib + [{"rfilename": f"f{i}.json", "size": 1, "blobId": "2" * 40} for i in range(600_000)]
    try:
        one_line(cli(hub, home, "inspect", repo), "600,00", "files, more than the 100,000 a listing may name")
        cached = sum(p.stat().st_size for p in home.rglob("*") if p.is_file())
        assert cached < 64 * 1024
    finally:
        del hub.tamper[repo]


@pytest.mark.slow
def test_a_huge_cached_listing_is_refused(hub: HubServer, home: Path, tmp_path: Path) -> None:
    listing = seed_cache(home, hub, "tiny/draft", "own", {})
    doc = json.loads(listing.read_text())
    doc["files"].update({f"f{i}.json": {"size": 1} for i in range(100_001)})
    listing.write_text(json.dumps(doc))
    one_line(cli(hub, home, "inspect", f"tiny/draft@{hub.commit_of('tiny/draft')}"), "more than the 100,000")


# -- 5. downloads: verified, 0644, swept, cleaned on signals -----------------------------------

DOWNLOAD = """
import json, os, sys
os.umask(int(sys.argv[2], 8))
from dflash_ckpt.errors import DFlashCkptError
from dflash_ckpt.sources.hub.repo import download_snapshot
from dflash_ckpt.sources.repo_ref import RepoRef
try:
    print(json.dumps({"path": str(download_snapshot(RepoRef(sys.argv[1], None), allow_patterns=["*.json", "*.safetensors"]))}))
except DFlashCkptError as err:
    print(json.dumps({"error": err.line(), "exit_code": err.exit_code}))
"""


def download(hub: HubServer, home: Path, repo: str = "tiny/draft", umask: str = "022") -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-c", DOWNLOAD, repo, umask], env={**os.environ, **hub_env(hub, home)},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize(("umask", "mode"), [("022", 0o644), ("027", 0o640), ("002", 0o664)])
def test_blobs_are_world_readable_less_the_umask(hub: HubServer, home: Path, umask: str, mode: int) -> None:
    got = download(hub, home, umask=umask)
    blobs = list((home / "hub/models--tiny--draft/blobs").iterdir())
    assert len(blobs) == 2, got
    assert {oct(b.stat().st_mode & 0o777) for b in blobs} == {oct(mode)}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["model.safetensors", "config.json"])
def test_other_bytes_of_the_listed_size_are_refused(hub: HubServer, home: Path, name: str) -> None:
    pattern = r"^/blobs/" if name.endswith(".safetensors") else r"/resolve/[^/]+/config.json$"
    hub.corrupt(pattern, "flip", times=10, server="cdn" if name.endswith(".safetensors") else "hub")
    got = download(hub, home)
    assert got.get("exit_code") == 2, got
    assert name in got["error"] and "other content than the repo lists" in got["error"], got
    assert ("sha256" if name.endswith(".safetensors") else "git blob id") in got["error"]
    blobs = home / "hub/models--tiny--draft/blobs"
    kept = [p.name for p in blobs.iterdir()] if blobs.exists() else []
    served = hub.repos["tiny/draft"].commits[hub.commit_of("tiny/draft")].files[name]
    assert (served.sha256 or served.blob_id) not in kept and not [k for k in kept if k.startswith(".")], kept
    assert incomplete(home) == []
    assert not (home / "hub/models--tiny--draft/snapshots" / hub.commit_of("tiny/draft") / name).exists()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["model.safetensors", "config.json"])
def test_a_cut_download_is_resumed_with_a_range_request(hub: HubServer, home: Path, name: str) -> None:
    lfs = name.endswith(".safetensors")
    served = hub.repos["tiny/draft"].commits[hub.commit_of("tiny/draft")].files[name]
    cut = served.size // 3
    hub.corrupt(r"^/blobs/" if lfs else r"/resolve/[^/]+/config.json$", "cut", extra=cut, times=1, server="cdn" if lfs else "hub")
    got = download(hub, home)
    assert "path" in got, got
    assert (Path(got["path"]) / name).read_bytes() == served.path.read_bytes()
    gets = [r for r in hub.requests if r.method == "GET" and r.path.endswith(served.sha256 if lfs else "/config.json")]
    assert len(gets) == 2, gets
    assert "range" not in gets[0].headers and gets[1].headers.get("range") == f"bytes={cut}-"
    assert gets[1].status == 206 and gets[0].body_bytes + gets[1].body_bytes == served.size  # nothing fetched twice
    assert incomplete(home) == []


@pytest.mark.slow
def test_downloaded_blobs_match_what_hf_cache_verify_expects(hub: HubServer, home: Path) -> None:
    import hashlib

    download(hub, home)
    files = hub.repos["tiny/draft"].commits[hub.commit_of("tiny/draft")].files
    blobs = home / "hub/models--tiny--draft/blobs"
    for f in files.values():
        name = f.sha256 or f.blob_id
        data = (blobs / name).read_bytes()
        if f.sha256:
            assert hashlib.sha256(data).hexdigest() == name
        else:
            assert hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest() == name  # noqa: S324
    tree = json.loads((home / "hub/models--tiny--draft/trees" / f"{hub.commit_of('tiny/draft')}.json").read_text())
    assert tree["format_version"] == 1 and set(tree["files"]) == set(files)
    hf = Path(sys.executable).with_name("hf")
    if hf.exists():  # huggingface_hub's own check of the cache against the Hub's listing
        proc = subprocess.run([str(hf), "cache", "verify", "tiny/draft", "--cache-dir", str(home / "hub"),
                               "--fail-on-missing-files", "--json"], env={**os.environ, **hub_env(hub, home)},
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.slow
def test_stale_incomplete_files_of_dead_processes_are_swept(hub: HubServer, home: Path) -> None:
    blobs = home / "hub/models--tiny--draft/blobs"
    blobs.mkdir(parents=True)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True).stdout.strip()
    stale = blobs / f".dflash-ckpt-{dead}-abc.incomplete"
    old = blobs / ".dflash-ckpt-oldformat.incomplete"
    live = blobs / f".dflash-ckpt-{os.getpid()}-xyz.incomplete"
    theirs = blobs / "0123.incomplete"  # huggingface_hub's: not ours to touch
    for p in (stale, old, live, theirs):
        p.write_bytes(b"partial")
    os.utime(old, (time.time() - 2 * 86400, time.time() - 2 * 86400))
    download(hub, home)
    assert not stale.exists() and not old.exists()
    assert live.exists() and theirs.exists()


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_during_a_download_leaves_no_incomplete_file(hub: HubServer, home: Path, tmp_path: Path, sig: int) -> None:
    hub.corrupt(r"^/blobs/", "drip", interval=0.05, times=10, server="cdn")
    proc = subprocess.Popen([sys.executable, "-m", "dflash_ckpt", "normalize", "tiny/draft", str(tmp_path / "out")],
                            env={**os.environ, **hub_env(hub, home)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(600):
            if incomplete(home):
                break
            time.sleep(0.05)
        assert incomplete(home), "the download never started"
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "Traceback" not in err, err
    assert proc.returncode in (-signal.SIGTERM, 130, 143), (proc.returncode, err)
    assert incomplete(home) == []
