"""``smoke-run --engine vllm-serve`` on the tiny pair in the installed vLLM's OpenAI server (one
run for the module: the reference runtime, the server with the draft, the one without it): the
argv that ran is the printed serve line plus host, port and name only; tau is what the /metrics
counters give; the tokens are the reference runtime's (ties aside) and the plain server's; the
load phase reports tau, tokens/s and the speedup with intervals; no server outlives the run; a
server that cannot start is one coded line with its log kept."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, run_cli
from own_processes import new_marker, run_processes
from vllm_installed import vllm_available

pytestmark = [pytest.mark.vllm, pytest.mark.slow,
              pytest.mark.skipif(not vllm_available(), reason="the engine's python has no vLLM with DFlash")]

TINY = ROOT / "fixtures" / "tiny-pair"
MARK, TOKEN = new_marker()


def served_run(*args: str, timeout: float = 1500, env: dict[str, str] | None = None) -> Any:
    """``run_cli`` from the repository root with this module's marker (the printed line names the
    pair relative to it); a skip when vLLM dies by a signal on this machine (the machine, not the
    code under test)."""
    res = run_cli(*args, env={MARK: TOKEN, **(env or {})}, cwd=ROOT, timeout=timeout)
    died = re.search(r"DF425 error: vLLM's server (?:died by|exited with status \d+, as a shell reports) "
                     r"(\S+ \(signal \d+\)[^;]*)", res.stderr)
    if died:
        pytest.skip(f"vLLM cannot run on this CPU: its server died by {died.group(1)}")
    return res


#: The user's compiled-code caches as the environment names them; the run must neither read nor write them.
USER_CACHES = ("VLLM_CACHE_ROOT", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    draft, target = "fixtures/tiny-pair/draft", "fixtures/tiny-pair/target"
    printed = json.loads(run_cli("inspect", draft, "--target", target, "--json", cwd=ROOT).stdout)
    caches = tmp_path_factory.mktemp("user-caches")
    for var in USER_CACHES:
        (caches / var).mkdir()
        (caches / var / "planted").write_text("left by another run")
    res = served_run("smoke-run", draft, "--target", target, "--engine", "vllm-serve", "-n", "48",
                     "--concurrency", "4", "--json", env={var: str(caches / var) for var in USER_CACHES})
    assert res.code == 0, (res.stdout[-2000:], res.stderr[-2000:])
    doc = json.loads(res.stdout)
    return {"printed": printed["results"][0]["serve"]["vllm"], "result": doc["results"][0], "doc": doc,
            "caches": caches}


def test_the_server_compiles_into_a_cache_of_its_own(run: dict[str, Any]) -> None:
    """vLLM compiles the model (torch.compile) and saves it to ``VLLM_CACHE_ROOT``, loading what a
    previous start saved there: the run gives it an empty cache of its own and removes it after,
    so the user's caches are neither read nor written (before: the AOT-compiled graph was saved
    to, and loaded from, ``~/.cache/vllm/torch_compile_cache``)."""
    for var in USER_CACHES:
        assert sorted(p.name for p in (run["caches"] / var).iterdir()) == ["planted"], var


def test_the_argv_that_ran_is_the_printed_serve_line(run: dict[str, Any]) -> None:
    served = run["result"]["engine_run"]["served"]
    assert served["printed"] == run["printed"]
    ran = served["argv"]
    assert ran[:len(run["printed"])] == run["printed"]
    extra = ran[len(run["printed"]):]
    assert extra[:3] == ["--host", "127.0.0.1", "--port"] and extra[3].isdigit() and extra[4] == "--served-model-name"
    assert len(extra) == 6 and served["local_additions"] == extra
    assert "--speculative-config" not in served["argv_without_draft"]


def test_tau_is_what_the_metrics_counters_give(run: dict[str, Any]) -> None:
    eng = run["result"]["engine_run"]
    m = eng["vllm_metrics"]
    assert m["drafts"] > 0 and m["draft_tokens"] == 7 * m["drafts"]
    assert eng["vllm_tau"] == pytest.approx(1 + m["accepted"] / m["drafts"], abs=0.01)
    assert sum(m["accepted_per_pos"]) == m["accepted"]
    assert sum(p["vllm_metrics"]["drafts"] for p in eng["prompts"]) == m["drafts"]
    for c, r in zip(eng["comparison"], eng["runs"]):
        assert c["engine_tau"] == pytest.approx(r["tau"])
    assert eng["vllm_tau"] > 2.0  # the tiny pair's draft is good: the server reads it as trained


def test_served_tokens_are_the_references(run: dict[str, Any]) -> None:
    res = run["result"]
    eng = res["engine_run"]
    assert [c["name"] for c in eng["comparison"]] == [p["name"] for p in res["prompts"]]
    for c, ref, srv in zip(eng["comparison"], res["prompts"], eng["runs"]):
        assert srv["input_ids"] == ref["input_ids"]
        assert c["tokens_equal"] or c["difference"] == "tie", c
    for p in eng["prompts"]:
        assert p["target_only_equal"], p  # greedy: the draft changes nothing the plain server says
    assert not {f["code"] for f in res["findings"]} & {"DF426", "DF427", "DF401"}, res["findings"]


def test_the_load_phase_reports_tau_and_speedup_with_intervals(run: dict[str, Any]) -> None:
    load = run["result"]["engine_run"]["served"]["load"]
    assert load["concurrency"] == 4
    for side in ("with_draft", "without_draft"):
        assert load[side]["tok_s"]["mean"] > 0 and len(load[side]["tok_s"]["ci95"]) == 2
        assert len(load[side]["waves"]) == 5
    assert load["with_draft"]["tau"]["mean"] > 1.0 and load["without_draft"]["tau"]["n"] == 0
    assert load["speedup"]["mean"] > 0 and len(load["speedup"]["ci95"]) == 2
    assert load["outputs"] == 20 and load["outputs_equal"] == load["outputs"]  # lossless at temperature 0


def test_no_server_outlives_the_run(run: dict[str, Any]) -> None:
    assert run["result"]["engine_run"] is not None
    assert run_processes(f"{MARK}={TOKEN}") == []


def test_a_server_that_cannot_start_is_one_line_with_its_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tempfile

    from dflash_ckpt.engine_runners.vllm_facts import read_facts
    from dflash_ckpt.engine_runners.vllm_run import EngineFailed
    from dflash_ckpt.engine_runners.vllm_serve import served

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the kept log stays in tmp_path
    bad = ["vllm", "serve", str(tmp_path / "no-such-target"), "--max-num-seqs", "4"]
    with pytest.raises(EngineFailed) as info:
        with served(bad, python=read_facts().python, where="t", env={MARK: TOKEN}, ready_timeout_s=300):
            pass
    line = str(info.value)
    assert "vLLM's server" in line and "server's log is kept in" in line
    kept = re.search(r"kept in (\S+)", line)
    assert kept, line
    log = Path(kept.group(1))
    assert log.is_file() and log.stat().st_size > 0
    assert run_processes(f"{MARK}={TOKEN}") == []


def test_tensor_parallel_2_gives_the_tokens_of_tensor_parallel_1(run: dict[str, Any]) -> None:
    """The one multi-worker run a CPU machine can give: two ranks, each bound to its own cores
    (``VLLM_CPU_OMP_THREADS_BIND``, one list per rank); its tokens are TP 1's (ties aside)."""
    res = served_run("smoke-run", "fixtures/tiny-pair/draft", "--target", "fixtures/tiny-pair/target",
                     "--engine", "vllm-serve", "-n", "48", "--concurrency", "2", "--tensor-parallel-size", "2", "--json")
    assert res.code == 0, (res.stdout[-2000:], res.stderr[-2000:])
    tp2 = json.loads(res.stdout)["results"][0]["engine_run"]
    assert tp2["served"]["local_additions"][-2:] == ["--tensor-parallel-size", "2"]
    one = run["result"]["engine_run"]
    for a, b, c in zip(one["runs"], tp2["runs"], tp2["comparison"]):
        assert a["output_ids"] == b["output_ids"] or c["difference"] == "tie", (a["name"], c)
    assert tp2["served"]["load"]["outputs_equal"] == tp2["served"]["load"]["outputs"]
    assert run_processes(f"{MARK}={TOKEN}") == []
