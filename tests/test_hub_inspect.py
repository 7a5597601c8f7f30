"""``inspect`` of Hub repo ids against a loopback Hub: same verdicts as the local folders, headers
only over the wire, the cache before the network, and one-line errors for every way the Hub fails.

Every command runs in its own process with ``HF_ENDPOINT`` at the loopback server and the cache in
a temporary folder: nothing here can reach huggingface.co.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import CliResult, no_traceback, one_error_line, run_cli
from hub_server import HubServer, hub_env




def cli(hub: HubServer, home: Path, *args: str, **env: str) -> CliResult:
    res = run_cli(*args, env=hub_env(hub, home, **env), timeout=120)
    no_traceback(res)
    return res


def one_line_error(res: CliResult, *needles: str) -> str:
    """The one coded error line; the Hub's retry notes may come before it."""
    return one_error_line(res, *needles, alone=False)


def as_local(doc: Any, repo: str, folder: Path) -> Any:
    """A hub result with the repo's names replaced by the folder's, to compare with a local run
    (less DF314, the pin advice only a Hub draft named without a commit gets)."""
    if isinstance(doc, dict) and any(f["code"] == "DF314" for f in doc.get("findings", [])):
        doc = {**doc, "findings": [f for f in doc["findings"] if f["code"] != "DF314"],
               "counts": {**doc["counts"], "info": doc["counts"]["info"] - 1}}
    text = re.sub(re.escape(repo) + r":(?=[\w.-])", f"{folder}/", json.dumps(doc))
    return json.loads(text.replace(repo, str(folder)))


def header_bytes(path: Path) -> int:
    with open(path, "rb") as fh:
        return 8 + struct.unpack("<Q", fh.read(8))[0]


# -- what inspect finds over the Hub is what it finds on disk --------------------------------


@pytest.mark.parametrize("repo, folder", [
    ("z-lab/Qwen3-4B-DFlash-b16", "drafts/Qwen3-4B-DFlash-b16"),
    ("z-lab/Qwen3-8B-DFlash-b16-sharded", "drafts/Qwen3-8B-DFlash-b16-sharded"),
])
@pytest.mark.slow
def test_published_draft_same_as_local(hub: HubServer, home: Path, fixtures_root: Path, repo: str, folder: str) -> None:
    local = fixtures_root / folder
    res = cli(hub, home, "inspect", repo, "--json")
    assert res.code == 0, res.stderr
    assert as_local(res.result(), repo, local) == run_cli("inspect", str(local), "--json").result()

    cdn = [r for r in hub.requests if r.server == "cdn"]
    shards = sorted(local.glob("*.safetensors"))
    assert len(cdn) == len(shards)  # one ranged request per weights file: the prefetch holds each header
    assert all(r.method == "GET" and r.status == 206 and r.headers.get("range", "").startswith("bytes=0-") for r in cdn)
    assert not any("authorization" in r.headers for r in cdn)
    small = sum((local / n).stat().st_size for n in ("config.json", "model.safetensors.index.json") if (local / n).exists())
    headers = sum(header_bytes(p) for p in shards)
    body = hub.body_bytes()
    assert headers + small <= body <= headers + small + 16 * 1024 + 8 * 1024  # prefetch slack + repo info
    assert body * 10_000 < sum(p.stat().st_size for p in shards)


@pytest.mark.slow
def test_sixteen_shards_cost_headers_not_gigabytes(hub: HubServer, home: Path, fixtures_root: Path) -> None:
    local = fixtures_root / "drafts/Qwen3.6-27B-DFlash-sharded"
    res = cli(hub, home, "inspect", "z-lab/Qwen3.6-27B-DFlash-sharded", "--json")
    assert res.code == 0, res.stderr
    shards = sorted(local.glob("*.safetensors"))
    ranged = [r for r in hub.requests if r.server == "cdn"]
    assert len(ranged) == 16
    # After the first shard the prefetch follows the headers seen (2 kB floor), not a fixed 100 kB.
    assert sum(r.body_bytes for r in ranged) <= 16 * 4096 + 16 * 1024
    assert res.result()["bytes_read"] == run_cli("inspect", str(local), "--json").result()["bytes_read"]
    assert sum(p.stat().st_size for p in shards) > 3 * 2**30


@pytest.mark.slow
def test_mutants_same_findings_as_local(hub: HubServer, home: Path, fixtures_root: Path) -> None:
    """Truncated files, broken indexes, bad headers: every verdict matches the local run."""
    names = ["DF203-header-not-json", "DF205-index-missing-shard", "DF206-index-missing-tensor", "DF212-missing-k-norm", "DF201-no-safetensors"]
    res = cli(hub, home, "inspect", *[f"mutant-org/{n}" for n in names], "--json")
    local = run_cli("inspect", *[str(fixtures_root / "mutants" / n) for n in names], "--json").json()
    assert res.code == local["exit_code"] == 1
    for name, got, want in zip(names, res.json()["results"], local["results"]):
        assert as_local(got, f"mutant-org/{name}", fixtures_root / "mutants" / name) == want
        assert name.split("-")[0] in {f["code"] for f in got["findings"]}


@pytest.mark.slow
def test_draft_and_target_both_from_the_hub(hub: HubServer, home: Path, fixtures_root: Path) -> None:
    draft, local = "z-lab/Qwen3-4B-DFlash-b16", fixtures_root / "drafts/Qwen3-4B-DFlash-b16"
    good = cli(hub, home, "inspect", draft, "--target", "Qwen/Qwen3-4B", "--json")
    assert good.code == 0, good.stderr
    assert good.result()["target"] == {"label": "Qwen/Qwen3-4B", "model_type": "qwen3", "num_hidden_layers": 36,
                                     "hidden_size": 2560, "vocab_size": 151936, "pad_token_id": None, "text_config": False}
    wrong = cli(hub, home, "inspect", draft, "--target", "Qwen/Qwen3-8B", "--json")
    want = run_cli("inspect", str(local), "--target", str(fixtures_root / "targets/Qwen3-8B"), "--json").result()
    assert wrong.code == 1
    got = as_local(wrong.result(), draft, local)
    assert [f["code"] for f in got["findings"]] == [f["code"] for f in want["findings"]]
    assert {f["code"] for f in got["findings"]} & {"DF301", "DF302"}
    # The target needs only its config: no weights of the target were asked for.
    target_paths = [r.path for r in hub.requests if "Qwen/Qwen3-8B" in r.path]
    assert target_paths and all(p.endswith(("config.json", "/Qwen/Qwen3-8B")) for p in target_paths)


@pytest.mark.slow
def test_revision_at_and_flag(hub: HubServer, home: Path) -> None:
    main = cli(hub, home, "inspect", "tiny/draft", "--json")
    assert main.code == 0
    at = cli(hub, home, "inspect", "tiny/draft@broken", "--json")
    flag = cli(hub, home, "inspect", "tiny/draft", "--revision", "broken", "--json")
    assert at.code == flag.code == 1
    assert "DF204" in {f["code"] for f in at.result()["findings"]}
    assert at.result() == flag.result() and at.result()["draft"] == "tiny/draft@broken"
    commit = hub.commit_of("tiny/draft", "broken")
    assert (home / "hub/models--tiny--draft/refs/broken").read_text() == commit
    pinned = cli(hub, home, "inspect", f"tiny/draft@{commit}", "--json")
    assert pinned.code == 1 and "DF204" in {f["code"] for f in pinned.result()["findings"]}
    one_line_error(cli(hub, home, "inspect", "tiny/draft@broken", "--revision", "main"), "revision given twice")


# -- the cache before the network -------------------------------------------------------------


@pytest.mark.slow
def test_second_run_reads_the_cache(hub: HubServer, home: Path) -> None:
    first = cli(hub, home, "inspect", "z-lab/Qwen3-8B-DFlash-b16-sharded", "--json")
    hub.reset()
    again = cli(hub, home, "inspect", "z-lab/Qwen3-8B-DFlash-b16-sharded", "--json")
    assert again.json() == first.json()
    # A branch is looked up once (it may have moved); everything else comes from the cache.
    assert [r.path for r in hub.requests if r.path != "/api/agent-harnesses"] == ["/api/models/z-lab/Qwen3-8B-DFlash-b16-sharded"]
    hub.reset()
    commit = hub.commit_of("z-lab/Qwen3-8B-DFlash-b16-sharded")
    pinned = cli(hub, home, "inspect", f"z-lab/Qwen3-8B-DFlash-b16-sharded@{commit}", "--json")
    assert pinned.code == 0
    assert [r for r in hub.requests if r.path != "/api/agent-harnesses"] == []  # a commit never moves


@pytest.mark.slow
def test_offline_after_an_online_run(hub: HubServer, home: Path) -> None:
    """HF_HOME alone places the cache (HF_HUB_CACHE unset); offline, not one request is made."""
    args = ("inspect", "z-lab/Qwen3-4B-DFlash-b16", "--target", "Qwen/Qwen3-4B", "--json")
    online = cli(hub, home, *args, HF_HUB_CACHE="")
    assert online.code == 0
    assert (home / "hub/models--z-lab--Qwen3-4B-DFlash-b16/snapshots").is_dir()
    hub.reset()
    offline = cli(hub, home, *args, HF_HUB_CACHE="", HF_HUB_OFFLINE="1")
    assert offline.code == 0 and offline.json() == online.json()
    assert hub.requests == []


@pytest.mark.slow
@pytest.mark.parametrize("keep", ["ours", "hf-tree", "snapshot-only"])
def test_offline_with_a_downloaded_snapshot(hub: HubServer, home: Path, fixtures_root: Path, keep: str) -> None:
    """A cache filled by a download (ours, or another tool's) serves an offline inspect."""
    code = "from dflash_ckpt.sources.hub.repo import download_snapshot; from dflash_ckpt.sources.repo_ref import RepoRef; print(download_snapshot(RepoRef('tiny/draft', None)))"
    proc = subprocess.run([sys.executable, "-c", code], env={**os.environ, **hub_env(hub, home)}, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    repo_dir = home / "hub/models--tiny--draft"
    if keep != "ours":
        shutil.rmtree(repo_dir / "dflash-ckpt")
    if keep == "snapshot-only":
        shutil.rmtree(repo_dir / "trees")
    hub.reset()
    res = cli(hub, home, "inspect", "tiny/draft", "--json", HF_HUB_OFFLINE="1")
    assert res.code == 0, res.stderr
    local = run_cli("inspect", str(fixtures_root / "mutants/base"), "--json").result()
    assert [f["code"] for f in res.result()["findings"] if f["code"] != "DF314"] == [f["code"] for f in local["findings"]]
    assert res.result()["resolved"] == local["resolved"] and res.result()["bytes_read"] == local["bytes_read"]
    assert hub.requests == []


def test_offline_and_not_cached(hub: HubServer, home: Path) -> None:
    res = cli(hub, home, "inspect", "z-lab/Qwen3-4B-DFlash-b16", HF_HUB_OFFLINE="1")
    one_line_error(res, "z-lab/Qwen3-4B-DFlash-b16", "not in the local Hugging Face cache", "HF_HUB_OFFLINE")
    assert hub.requests == []


@pytest.mark.slow
def test_offline_with_config_but_no_headers(hub: HubServer, home: Path) -> None:
    """Offline, a weights header that was never fetched is an input error, not a broken checkpoint."""
    cli(hub, home, "inspect", "tiny/draft", "--json")
    for head in (home / "hub/models--tiny--draft/dflash-ckpt").rglob("*.head"):
        head.unlink()
    hub.reset()
    one_line_error(cli(hub, home, "inspect", "tiny/draft", HF_HUB_OFFLINE="1"), "tiny/draft:model.safetensors", "HF_HUB_OFFLINE")
    assert hub.requests == []


# -- tokens -------------------------------------------------------------------------------------


def auth_seen(hub: HubServer) -> set[str]:
    return {r.headers.get("authorization", "") for r in hub.requests if r.server == "hub" and r.path != "/api/agent-harnesses"}


def test_gated_without_token(hub: HubServer, home: Path) -> None:
    line = one_line_error(cli(hub, home, "inspect", "gated-org/draft"), "gated-org/draft", "gated", "--token", "HF_TOKEN", "hf auth login")
    assert hub.endpoint + "/gated-org/draft" in line


@pytest.mark.slow
def test_gated_with_token_and_precedence(hub: HubServer, home: Path) -> None:
    assert cli(hub, home, "inspect", "gated-org/draft", "--token", "hf_reader").code == 0
    assert auth_seen(hub) == {"Bearer hf_reader"}
    hub.reset()
    assert cli(hub, home, "inspect", "gated-org/draft", HF_TOKEN="hf_reader").code == 0
    (home / "token").parent.mkdir(parents=True, exist_ok=True)
    (home / "token").write_text("hf_reader")
    hub.reset()
    assert cli(hub, home, "inspect", "gated-org/draft").code == 0  # the saved login
    assert auth_seen(hub) == {"Bearer hf_reader"}
    # --token beats HF_TOKEN, which beats the saved login.
    hub.reset()
    assert cli(hub, home, "inspect", "gated-org/draft", "--token", "hf_reader", HF_TOKEN="hf_bogus").code == 0
    assert auth_seen(hub) == {"Bearer hf_reader"}
    hub.reset()
    one_line_error(cli(hub, home, "inspect", "gated-org/draft", HF_TOKEN="hf_bogus"), "rejected the token from HF_TOKEN", "--token")
    assert auth_seen(hub) == {"Bearer hf_bogus"}


def test_no_implicit_token_when_huggingface_hub_is_told_so(hub: HubServer, home: Path) -> None:
    """``HF_HUB_DISABLE_IMPLICIT_TOKEN``: HF_TOKEN and the saved login stay home, ``--token`` is sent."""
    (home / "token").parent.mkdir(parents=True, exist_ok=True)
    (home / "token").write_text("hf_reader")
    one_line_error(cli(hub, home, "inspect", "gated-org/draft", HF_TOKEN="hf_reader", HF_HUB_DISABLE_IMPLICIT_TOKEN="1"),
                   "gated", "no token was sent")
    assert auth_seen(hub) == {""}
    hub.reset()
    assert cli(hub, home, "inspect", "gated-org/draft", "--token", "hf_reader", HF_HUB_DISABLE_IMPLICIT_TOKEN="1").code == 0
    assert auth_seen(hub) == {"Bearer hf_reader"}


def test_a_failed_oidc_exchange_is_one_line(hub: HubServer, home: Path) -> None:
    """``HF_OIDC_RESOURCE`` outside a CI that can mint an id token: huggingface_hub raises, we say so."""
    one_line_error(cli(hub, home, "inspect", "tiny/draft", HF_OIDC_RESOURCE="models/tiny/draft", HF_OIDC_ID_TOKEN="",
                       GITHUB_ACTIONS="", ACTIONS_ID_TOKEN_REQUEST_URL=""),
                   "tiny/draft", "no token to send", "HF_OIDC_RESOURCE", "--token")


def test_gated_with_a_token_without_access(hub: HubServer, home: Path) -> None:
    one_line_error(cli(hub, home, "inspect", "gated-org/draft", "--token", "hf_outsider"), "gated", "--token has no access", "request access")


@pytest.mark.slow
def test_private_repo(hub: HubServer, home: Path) -> None:
    one_line_error(cli(hub, home, "inspect", "private-org/draft"), "not found", "private", "--token")
    one_line_error(cli(hub, home, "inspect", "private-org/draft", "--token", "hf_outsider"), "not found", "cannot read it")
    assert cli(hub, home, "inspect", "private-org/draft", "--token", "hf_reader").code == 0


# -- what the Hub can answer instead --------------------------------------------------------------


@pytest.mark.slow
def test_missing_repo_and_revision(hub: HubServer, home: Path) -> None:
    one_line_error(cli(hub, home, "inspect", "nobody/nothing"), "nobody/nothing", "repo not found on " + hub.endpoint)
    one_line_error(cli(hub, home, "inspect", "tiny/draft@nope"), "revision 'nope' not found in tiny/draft")
    one_line_error(cli(hub, home, "inspect", "tiny/draft", "--target", "nobody/target"), "target repo not found")


def test_fails_twice_then_answers(hub: HubServer, home: Path) -> None:
    hub.fail(r"^/api/models/tiny/draft", status=503, times=2)
    hub.fail(r"^/blobs/", status=502, times=2, server="cdn")
    res = cli(hub, home, "inspect", "tiny/draft", "--json")
    assert res.code == 0, res.stderr
    assert sum(r.path == "/api/models/tiny/draft" for r in hub.requests) == 3
    assert [r.status for r in hub.requests if r.server == "cdn"] == [502, 502, 206]
    assert "retry 1/3" in res.stderr and "retry 2/3" in res.stderr


def test_server_errors_are_retried_a_bounded_number_of_times(hub: HubServer, home: Path) -> None:
    hub.fail(r"^/api/models/tiny/draft", status=503, times=100)
    res = cli(hub, home, "inspect", "tiny/draft", DFLASH_CKPT_HUB_RETRIES="2")
    one_line_error(res, "HTTP 503", "after 3 attempts", "try again later")
    assert sum(r.path == "/api/models/tiny/draft" for r in hub.requests) == 3


@pytest.mark.slow
def test_timeouts(hub: HubServer, home: Path) -> None:
    hub.delay(r"^/api/models/tiny/draft", 2.5, times=2)
    res = cli(hub, home, "inspect", "tiny/draft", HF_HUB_ETAG_TIMEOUT="1", DFLASH_CKPT_HUB_RETRIES="1")
    one_line_error(res, "no answer from", "in time", "after 2 attempts", "HF_HUB_ETAG_TIMEOUT")
    hub.reset()
    hub.delay(r"^/blobs/", 2.5, times=1, server="cdn")
    assert cli(hub, home, "inspect", "tiny/draft", HF_HUB_DOWNLOAD_TIMEOUT="1").code == 0  # slow once, then fine


@pytest.mark.slow
def test_answers_that_are_not_what_they_should_be(hub: HubServer, home: Path) -> None:
    hub.corrupt(r"^/api/models/tiny/draft", "html")
    one_line_error(cli(hub, home / "1", "inspect", "tiny/draft"), "not JSON", "HF_ENDPOINT")
    hub.reset()
    hub.corrupt(r"^/blobs/", "bad-range", server="cdn", times=10)
    one_line_error(cli(hub, home / "2", "inspect", "tiny/draft"), "tiny/draft", "Content-Range", "bytes 0-")
    hub.reset()
    hub.corrupt(r"/resolve/.*/config.json$", "html", times=10)
    one_line_error(cli(hub, home / "3", "inspect", "tiny/draft"), "answered config.json with a response without the X-Repo-Commit header")
    hub.reset()
    hub.corrupt(r"^/blobs/", "drop", server="cdn", times=1)  # a dropped connection is retried
    assert cli(hub, home / "4", "inspect", "tiny/draft").code == 0


def test_unreachable_endpoint(hub: HubServer, home: Path) -> None:
    res = cli(hub, home, "inspect", "tiny/draft", HF_ENDPOINT="http://127.0.0.1:9", DFLASH_CKPT_HUB_RETRIES="1")
    one_line_error(res, "cannot reach http://127.0.0.1:9", "HF_HUB_OFFLINE=1")


@pytest.mark.slow
def test_unreachable_endpoint_falls_back_to_the_cache(hub: HubServer, home: Path) -> None:
    cli(hub, home, "inspect", "tiny/draft")
    res = cli(hub, home, "inspect", "tiny/draft", "--json", HF_ENDPOINT="http://127.0.0.1:9", DFLASH_CKPT_HUB_RETRIES="0")
    assert res.code == 0, res.stderr
    assert "using the cached commit" in res.stderr


# -- many repos at once -------------------------------------------------------------------------


@pytest.mark.slow
def test_many_repos_concurrently_in_order_worst_exit(hub: HubServer, home: Path, tmp_path: Path) -> None:
    repos = ["z-lab/Qwen3-4B-DFlash-b16", "tiny/draft@broken", "nobody/nothing", "z-lab/Qwen3-8B-DFlash-b16-sharded", "mutant-org/DF212-missing-k-norm"]
    for repo in repos:
        hub.delay("^/api/models/" + repo.split("@")[0] + "(/revision/.*)?$", 0.4)
    res = cli(hub, home, "inspect", *repos, "--json")
    doc = res.json()
    assert res.code == doc["exit_code"] == 2
    assert [r["draft"] for r in doc["results"]] == repos
    assert [r["exit_code"] for r in doc["results"]] == [0, 1, 2, 0, 1]
    assert "repo not found" in doc["results"][2]["error"]["message"]
    assert 2 <= hub.max_in_flight <= 8 + 1  # fetched side by side, by a bounded pool

    listing = tmp_path / "repos.txt"
    listing.write_text("# drafts to check\nz-lab/Qwen3-4B-DFlash-b16\n\ntiny/draft@broken  # the cut download\n")
    table = cli(hub, home, "inspect", "--from-file", str(listing))
    assert table.code == 1
    assert table.stdout.count("DFlash drafts") == 1
    assert "z-lab/Qwen3-4B-DFlash-b16" in table.stdout and "tiny/draft@broken" in table.stdout


def test_local_inspect_does_not_import_the_hub_client(fixtures_root: Path) -> None:
    code = (
        "import sys; from dflash_ckpt.cli import run; "
        f"rc = run(['inspect', {str(fixtures_root / 'drafts/Qwen3-4B-DFlash-b16')!r}, '-q']); "
        "bad = [m for m in ('huggingface_hub', 'httpx2', 'httpx', 'dflash_ckpt.sources.hub.repo') if m in sys.modules]; "
        "print('RC', rc, 'IMPORTED', bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "RC 0 IMPORTED []" in out.stdout, out.stdout + out.stderr
