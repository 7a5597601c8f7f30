"""The served path's parts, without vLLM (fast): /metrics parsing and differencing, tau and
per-position acceptance, the argv that runs against the printed serve line, the port, the
readiness deadline and the completion request against a fake loopback server, the load phase's
intervals, and the option's refusals."""

from __future__ import annotations

import json
import shlex
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator

import pytest

from dflash_ckpt.checks.engine_compare import per_position as counts_per_position
from dflash_ckpt.engine_runners import vllm_serve as vs
from dflash_ckpt.engine_runners.serve_engine import lengths_from_counts, without_draft
from dflash_ckpt.engine_runners.serve_launch import version as launch_version
from dflash_ckpt.engine_runners.serve_load import compare_load, mean_interval, wave_requests

PRINTED = ["vllm", "serve", "fixtures/tiny-pair/target", "--speculative-config",
           '{"method": "dflash", "model": "fixtures/tiny-pair/draft", "num_speculative_tokens": 7}',
           "--max-num-seqs", "128", "--max-num-batched-tokens", "8192"]


def page(drafts: int, draft_tokens: int, accepted: int, per_pos: list[int], model: str = "m") -> str:
    """A /metrics page as vLLM 0.32 writes it (HELP/TYPE lines, model_name and engine labels)."""
    lines = ["# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.",
             "# TYPE vllm:spec_decode_num_drafts_total counter",
             f'vllm:spec_decode_num_drafts_total{{engine="0",model_name="{model}"}} {float(drafts)}',
             f'vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="{model}"}} {float(draft_tokens)}',
             f'vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="{model}"}} {float(accepted)}',
             'vllm:num_requests_running{engine="0",model_name="m"} 0.0',
             "vllm:spec_decode_num_drafts_created 1.7e9"]
    lines += [f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="{model}",position="{k}"}} '
              f"{float(v)}" for k, v in enumerate(per_pos)]
    return "\n".join(lines) + "\n"


def test_counters_are_read_from_a_metrics_page() -> None:
    got = vs.spec_counters(page(10, 70, 33, [9, 8, 6, 4, 3, 2, 1]))
    assert got == {"drafts": 10, "draft_tokens": 70, "accepted": 33, "accepted_per_pos": [9, 8, 6, 4, 3, 2, 1]}
    assert vs.spec_counters("") == {"drafts": 0, "draft_tokens": 0, "accepted": 0, "accepted_per_pos": []}
    other = vs.spec_counters(page(10, 70, 33, [9]) + page(5, 35, 5, [5], model="other"), model="m")
    assert other["drafts"] == 10 and other["accepted_per_pos"] == [9]


def test_a_request_is_the_difference_of_two_scrapes() -> None:
    before = vs.spec_counters(page(10, 70, 33, [9, 8, 6, 4, 3, 2, 1]))
    after = vs.spec_counters(page(16, 112, 50, [15, 12, 9, 6, 4, 3, 1]))
    d = vs.difference(after, before)
    assert d == {"drafts": 6, "draft_tokens": 42, "accepted": 17, "accepted_per_pos": [6, 4, 3, 2, 1, 1, 0]}
    assert vs.tau(d) == pytest.approx(1 + 17 / 6)
    assert vs.per_position(d) == pytest.approx([1, 4 / 6, 3 / 6, 2 / 6, 1 / 6, 1 / 6, 0])
    assert vs.tau({"drafts": 0, "accepted": 0}) is None
    with pytest.raises(ValueError, match="restarted"):
        vs.difference(before, after)
    assert vs.add(d, d)["accepted_per_pos"] == [12, 8, 6, 4, 2, 2, 0]


def test_acceptance_lengths_from_the_counters_give_the_counters_back() -> None:
    lengths = [8, 1, 3, 3, 5, 2, 1]
    per = counts_per_position(lengths, 8)
    got = lengths_from_counts(len(lengths), per)
    assert sorted(got) == sorted(lengths)
    assert counts_per_position(got, 8) == per and 1 + sum(per) / len(lengths) == pytest.approx(sum(got) / len(got))


def test_the_argv_that_runs_is_the_printed_line_plus_host_port_and_name() -> None:
    ran = vs.local_argv(PRINTED, 18000)
    assert ran == [*PRINTED, "--host", "127.0.0.1", "--port", "18000", "--served-model-name", vs.SERVED_NAME]
    assert vs.local_additions(ran, PRINTED) == ["--host", "127.0.0.1", "--port", "18000", "--served-model-name",
                                                vs.SERVED_NAME]
    assert shlex.join(ran).startswith(shlex.join(PRINTED) + " ")
    with pytest.raises(ValueError):
        vs.local_additions(ran[1:], PRINTED)
    env_line = ["env", "VLLM_USE_V2_MODEL_RUNNER=1", *PRINTED]
    assert vs.split_env(env_line) == ({"VLLM_USE_V2_MODEL_RUNNER": "1"}, PRINTED)
    assert vs.local_argv(env_line, 1)[:len(PRINTED)] == PRINTED
    with pytest.raises(ValueError):
        vs.local_argv(["sglang", "serve"], 1)


def test_the_plain_server_drops_only_the_speculative_config() -> None:
    plain = without_draft(PRINTED)
    assert plain == ["vllm", "serve", "fixtures/tiny-pair/target", "--max-num-seqs", "128",
                     "--max-num-batched-tokens", "8192"]
    assert without_draft([*PRINTED[:3], "--speculative-config={}"]) == PRINTED[:3]


def test_a_free_port_is_on_loopback_and_free() -> None:
    port = vs.free_port()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((vs.HOST, port))  # nobody holds it


def test_the_launcher_answers_only_the_vllm_lookup() -> None:
    import importlib.metadata

    assert launch_version("pytest") == importlib.metadata.version("pytest")
    with pytest.raises(importlib.metadata.PackageNotFoundError):
        launch_version("no-such-distribution-dflash")


class Fake(BaseHTTPRequestHandler):
    """/health answers 503 until ``ready_after`` polls, then 200; /metrics a page; /v1/completions
    the token ids and top log-probabilities vLLM gives with return_token_ids."""

    polls = 0
    ready_after = 3
    bodies: list[dict[str, Any]] = []

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path == "/health":
            type(self).polls += 1
            self._send(200 if self.polls > self.ready_after else 503, b"")
        elif self.path == "/metrics":
            self._send(200, page(3, 21, 9, [3, 3, 2, 1]).encode())
        else:
            self._send(404, b"")

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).bodies.append(body)
        out = {"choices": [{"text": "", "token_ids": [5, 6, 7],
                            "logprobs": {"top_logprobs": [{"token_id:5": -0.1, "token_id:9": -2.5}] * 3}}]}
        self._send(200, json.dumps(out).encode())


@pytest.fixture
def fake() -> Iterator[str]:
    Fake.polls, Fake.bodies = 0, []
    srv = ThreadingHTTPServer((vs.HOST, 0), Fake)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{vs.HOST}:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


def test_readiness_waits_for_health(fake: str) -> None:
    took = vs.wait_ready(fake, 10.0, lambda: True, poll_s=0.01)
    assert Fake.polls == Fake.ready_after + 1 and took < 10.0


def test_readiness_has_a_deadline(fake: str) -> None:
    Fake.ready_after = 10 ** 9
    try:
        t0 = time.monotonic()
        with pytest.raises(TimeoutError, match="within 0.3 s"):
            vs.wait_ready(fake, 0.3, lambda: True, poll_s=0.01)
        assert time.monotonic() - t0 < 5.0
    finally:
        Fake.ready_after = 3


def test_readiness_stops_when_the_server_exits() -> None:
    with pytest.raises(ChildProcessError):
        vs.wait_ready(f"http://{vs.HOST}:{vs.free_port()}", 60.0, lambda: False)


def test_a_completion_sends_ids_greedy_and_reads_ids_and_tops(fake: str) -> None:
    tokens, tops = vs.complete(fake, "m", [1, 2, 3], max_tokens=16, stop_token_ids=[2], top_logprobs=5,
                               with_tops=True)
    assert tokens == [5, 6, 7] and tops[0] == [[5, -0.1], [9, -2.5]]
    sent = Fake.bodies[-1]
    assert sent["prompt"] == [1, 2, 3] and sent["temperature"] == 0.0 and sent["max_tokens"] == 16
    assert sent["stop_token_ids"] == [2] and sent["return_token_ids"] and sent["return_tokens_as_token_ids"]
    assert vs.metrics(fake)["accepted_per_pos"] == [3, 3, 2, 1]


def test_requests_go_to_loopback_only() -> None:
    with pytest.raises(ValueError, match="loopback"):
        vs.http("http://example.com:80/health")


def test_the_load_phase_intervals() -> None:
    assert mean_interval([]) == {"mean": None, "ci95": None, "n": 0}
    one = mean_interval([2.0])
    assert one["mean"] == 2.0 and one["ci95"] is None
    three = mean_interval([1.0, 2.0, 3.0])
    low, high = three["ci95"]
    assert three["mean"] == 2.0 and low == pytest.approx(2 - 4.303 / 3 ** 0.5, abs=1e-3) and high > 3.0
    assert wave_requests([[1], [2]], 5) == [[1], [2], [1], [2], [1]]
    a = {"waves": [{"tok_s": 20.0}, {"tok_s": 30.0}], "outputs": [[[1], [2]], [[1], [2]]]}
    b = {"waves": [{"tok_s": 10.0}, {"tok_s": 10.0}], "outputs": [[[1], [2]], [[1], [3]]]}
    got = compare_load(a, b)
    assert got["speedup"]["mean"] == 2.5 and got["outputs_equal"] == 3 and got["outputs"] == 4


@pytest.mark.parametrize("args, needle", [
    (["--engine", "vllm", "--concurrency", "4"], "--concurrency: only with --engine vllm-serve"),
    (["--engine", "vllm-serve", "--concurrency", "0"], "--concurrency 0: must be 1 to 256"),
    (["--engine", "vllm-serve", "--temperature", "0.6"], "--temperature: not with --engine vllm-serve"),
    (["--engine", "vllm-serve", "--engine-arg", "gpu_memory_utilization=0.8"],
     "--engine-arg: not with --engine vllm-serve"),
    (["--engine", "vllm-serve", "--max-model-len", "512"], "--max-model-len: not with --engine vllm-serve"),
])
def test_concurrency_refusals(cli: Any, args: list[str], needle: str) -> None:
    from conftest import ROOT

    tiny = ROOT / "fixtures" / "tiny-pair"
    res = cli("smoke-run", str(tiny / "draft"), "--target", str(tiny / "target"), *args)
    assert res.code == 2 and needle in res.stderr and "Traceback" not in res.stderr


def test_tensor_parallel_binds_one_core_list_per_rank() -> None:
    from dflash_ckpt.engine_runners.tensor_parallel import cpu_bind
    from dflash_ckpt.errors import UsageError

    assert cpu_bind(1, [0, 1]) is None
    assert cpu_bind(2, [0, 1]) == "0|1"
    assert cpu_bind(2, [0, 1, 2, 3, 4]) == "0,1,2|3,4"
    with pytest.raises(UsageError, match="may use 1 core"):
        cpu_bind(2, [0])


def test_tensor_parallel_needs_heads_that_divide() -> None:
    from dflash_ckpt.engine_runners.tensor_parallel import refuse_heads
    from dflash_ckpt.errors import UsageError

    from dflash_ckpt.draftspec.specs import build_spec, target_from_config

    tiny = {"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2}
    wrapped = target_from_config({"text_config": tiny}, label="t", where="t").dims
    refuse_heads(2, [("t", wrapped), ("d", build_spec(tiny, label="d").dims)])
    with pytest.raises(UsageError, match="'num_key_value_heads' is 2, which 4 ranks"):
        refuse_heads(4, [("t", wrapped)])


# -- the server's processes, with a stand-in server (tests/fake_serve.py) ---------------------------

_TOOL = """
import sys, time
from pathlib import Path
import dflash_ckpt.engine_runners.vllm_serve as vs
vs.LAUNCH = Path({fake!r})
try:
    with vs.served({printed!r}, python=sys.executable, where="tgt", ready_timeout_s={ready!r}) as server:
        print("ready", server.base, flush=True)
        time.sleep(300)
except KeyboardInterrupt:
    print("interrupted", file=sys.stderr)
    sys.exit(130)
"""


def _alive(pid: int) -> bool:
    try:
        state = open(f"/proc/{pid}/stat", "rb").read().rpartition(b")")[2].split()[0]
    except OSError:
        return False
    return state != b"Z"


def _tool(tmp_path: Path, mode: str, ready: float) -> tuple[Any, Path, str]:
    import os
    import subprocess
    import sys
    import uuid

    from conftest import ROOT

    pids, token = tmp_path / "pids", uuid.uuid4().hex
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FAKE_SERVE_PIDS": str(pids), "FAKE_SERVE_MODE": mode,
           "SERVE_MARK": token, "TMPDIR": str(tmp_path)}  # a kept log stays in tmp_path
    code = _TOOL.format(fake=str(ROOT / "tests" / "fake_serve.py"), printed=PRINTED, ready=ready)
    tool = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    return tool, pids, token


def _wait_for(path: Path, timeout: float = 60.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return [int(p) for p in path.read_text().split()]
        time.sleep(0.05)
    raise AssertionError(f"{path} never written")


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGHUP", "SIGINT"])
def test_no_server_process_outlives_a_signal(tmp_path: Path, sig: str) -> None:
    import signal

    from own_processes import run_processes

    tool, pids, token = _tool(tmp_path, "ready", 60.0)
    try:
        started = _wait_for(pids)
        assert tool.stdout is not None and tool.stdout.readline().startswith("ready http://127.0.0.1:")
        assert all(map(_alive, started))
        tool.send_signal(getattr(signal, sig))
        _, err = tool.communicate(timeout=60)
    finally:
        tool.kill()
    assert tool.returncode == 130 and err.strip().splitlines()[-1] == "interrupted", (tool.returncode, err)
    assert [p for p in started if _alive(p)] == [] and run_processes(f"SERVE_MARK={token}") == []


def test_a_server_not_ready_by_the_deadline_is_one_line_with_its_log(tmp_path: Path) -> None:
    from own_processes import run_processes

    tool, pids, token = _tool(tmp_path, "never", 2.0)
    try:
        _, err = tool.communicate(timeout=120)
    finally:
        tool.kill()
    started = _wait_for(pids, 1.0)
    assert tool.returncode == 1 and "DF425" in err and "was not ready within 2 s" in err, err
    log = Path(err.split("kept in ")[1].split()[0])
    assert "fake server listening" in log.read_text()
    assert [p for p in started if _alive(p)] == [] and run_processes(f"SERVE_MARK={token}") == []


def test_the_report_line_names_the_additions_and_the_load_figures() -> None:
    from dflash_ckpt.commands.engine_report import served_line

    est = {"mean": 2.0, "ci95": [1.5, 2.5], "n": 5}
    line = served_line({"local_additions": ["--host", "127.0.0.1", "--port", "1", "--served-model-name", "n"],
                        "load": {"concurrency": 4, "with_draft": {"tau": est, "tok_s": est},
                                 "without_draft": {"tok_s": {"mean": None, "ci95": None, "n": 0}},
                                 "speedup": est, "outputs_equal": 19, "outputs": 20}})
    assert "+ --host 127.0.0.1 --port 1 --served-model-name n" in line and "concurrency 4: tau 2.00 [1.50, 2.50]" in line
    assert "— without" in line and "outputs equal 19/20" in line
