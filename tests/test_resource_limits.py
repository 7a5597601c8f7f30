"""Issue 32, bounds: chat templates compiled and rendered only in the limited child, waited for
no longer than a deadline; address-space limits as one DF407 line; ``~nosuchuser`` paths as one
DF001 line. Every hostile input is built here, at test time."""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ERROR_LINE, ROOT, CliResult, no_traceback, run_cli

PAIR = ROOT / "fixtures" / "tiny-pair"
DRAFT, TARGET = PAIR / "draft", PAIR / "target"
MiB = 1 << 20
#: One C call that runs for minutes: ``sum`` of 4,000 lists concatenates quadratically (8e9 copies).
ONE_C_CALL = "{{ ([[1]*1000]*4000)|sum(start=[]) }}"


def _tokenizer_folder(tmp_path: Path, template: str) -> Path:
    folder = tmp_path / "tok"
    folder.mkdir()
    shutil.copy(TARGET / "tokenizer.json", folder)
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": template}))
    return folder


def _python(code: str, *args: str, timeout: float = 120, preexec=None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, preexec_fn=preexec)


ENCODE = """
import resource, sys
from pathlib import Path
from dflash_ckpt.errors import DFlashCkptError
from dflash_ckpt.sources.prompts import Prompt, PromptEncoder
try:
    PromptEncoder(Path(sys.argv[1])).encode(Prompt("p", "hello"))
    print("rendered")
except DFlashCkptError as err:
    print(err.line())
# VmHWM, not RUSAGE_SELF: that keeps the high-water mark of the pytest process this was forked from
print(next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM:')) // 1024)
"""


@pytest.mark.slow
def test_a_huge_template_is_compiled_in_the_limited_child_not_here(tmp_path: Path) -> None:
    """512 KiB of ``{{x}}``: jinja2 needs about 1 GiB to compile it; this process stays small."""
    folder = _tokenizer_folder(tmp_path, "{{x}}" * 104857)
    proc = _python(ENCODE, str(folder))
    line, peak = proc.stdout.strip().splitlines()
    # The child stops on its memory limit (about 4 s of CPU here) or, on a slower or busier machine,
    # on its 5 s of CPU time first: either way while compiling, said as the limit it hit.
    assert "DF002" in line and "stopped while compiling" in line, proc.stdout + proc.stderr
    assert "needed more than 256 MiB of memory" in line or "5 s of CPU time" in line, line
    assert int(peak) < 300, f"this process peaked at {peak} MiB: the template was compiled here"


def test_a_good_template_still_renders_after_the_child_compiles_it(tmp_path: Path) -> None:
    from dflash_ckpt.errors import DFlashCkptError
    from dflash_ckpt.sources.prompts import Prompt, PromptEncoder

    enc = PromptEncoder(_tokenizer_folder(tmp_path, "<{{ messages[0]['content'] }}>"))
    assert enc.render(Prompt("p", "hi")) == "<hi>"
    (tmp_path / "bad").mkdir()
    with pytest.raises(DFlashCkptError, match="jinja syntax error at line 1") as err:
        PromptEncoder(_tokenizer_folder(tmp_path / "bad", "{% for %}")).render(Prompt("p", "x"))
    assert err.value.code == "DF002"


def _children() -> str:
    pid = os.getpid()
    return Path(f"/proc/{pid}/task/{pid}/children").read_text().strip()


@pytest.mark.slow
def test_sigxcpu_ignored_and_one_c_call_still_end_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """A shell that ignores SIGXCPU passes that to the child; the child restores it, and its hard
    CPU limit kills it whatever it ignores."""
    from dflash_ckpt import limits
    from dflash_ckpt.errors import DFlashCkptError
    from dflash_ckpt.sources.template_process import render_all

    monkeypatch.setattr(limits, "TEMPLATE_CPU_SECONDS", 0.5)
    previous = signal.signal(signal.SIGXCPU, signal.SIG_IGN)
    start = time.monotonic()
    try:
        with pytest.raises(DFlashCkptError) as err:
            render_all(ONE_C_CALL, [{}], ["tok: the chat template fails on prompt 'p'"], "tok: chat template")
    finally:
        signal.signal(signal.SIGXCPU, previous)
    assert err.value.code == "DF002" and "stopped: it passed its limit of 0.5 s of CPU time" in err.value.message
    assert time.monotonic() - start < 15
    assert _children() == ""


def test_a_child_that_could_not_answer_is_named_by_how_it_ended() -> None:
    """The parent reads the limit a silent child hit from its wait status (raw statuses as
    waitpid gives them: a signal number, or an exit code shifted by 8)."""
    from dflash_ckpt.sources.template_process import _OUT_OF_MEMORY, _which_limit

    assert _which_limit(signal.SIGXCPU) == "it passed its limit of 5 s of CPU time"
    assert _which_limit(signal.SIGKILL) == "it passed its limit of 5 s of CPU time"
    assert _which_limit(_OUT_OF_MEMORY << 8) == "it needed more than 256 MiB of memory"
    assert _which_limit(1 << 8) == _which_limit(None) == "it passed its limits of 256 MiB of memory or 5 s of CPU time"


def test_the_wait_has_a_wall_clock_deadline_and_the_child_is_killed(monkeypatch: pytest.MonkeyPatch) -> None:
    from dflash_ckpt import limits
    from dflash_ckpt.errors import DFlashCkptError
    from dflash_ckpt.sources.template_process import render_all

    monkeypatch.setattr(limits, "TEMPLATE_CPU_SECONDS", 120.0)
    monkeypatch.setattr(limits, "TEMPLATE_WALL_SECONDS", 1.0)
    start = time.monotonic()
    with pytest.raises(DFlashCkptError) as err:
        render_all(ONE_C_CALL, [{}], ["tok: the chat template fails on prompt 'p'"], "tok: chat template")
    assert err.value.code == "DF002" and "1 s of wall-clock time" in err.value.message
    assert time.monotonic() - start < 6
    assert _children() == "", "the child still runs"


def test_ctrl_c_while_waiting_kills_the_child(monkeypatch: pytest.MonkeyPatch) -> None:
    from dflash_ckpt import limits
    from dflash_ckpt.sources import template_process

    monkeypatch.setattr(limits, "TEMPLATE_CPU_SECONDS", 120.0)
    real_select = template_process.select.select
    calls = []

    def interrupted(*args, **kwargs):
        calls.append(1)
        if len(calls) > 1:
            raise KeyboardInterrupt
        return real_select(*args, **kwargs)

    monkeypatch.setattr(template_process.select, "select", interrupted)
    with pytest.raises(KeyboardInterrupt):
        template_process.render_all(ONE_C_CALL, [{}], ["w"])
    assert _children() == ""


CLAMPED = """
import resource, sys
from pathlib import Path
from dflash_ckpt.errors import DFlashCkptError
from dflash_ckpt.sources.prompts import Prompt, PromptEncoder
enc = PromptEncoder(Path(sys.argv[1]))
now = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
room = int(sys.argv[2]) * 2**20
resource.setrlimit(resource.RLIMIT_AS, (now + room, now + room))
try:
    print(repr(enc.render(Prompt("p", "hello"))))
except DFlashCkptError as err:
    print(err.line())
"""


def test_the_childs_memory_limit_is_clamped_to_the_hard_limit(tmp_path: Path) -> None:
    """Under a hard RLIMIT_AS with less room than the child's 256 MiB margin, a good template
    renders (the child asked for more than the hard limit, and setrlimit failed)."""
    good = _tokenizer_folder(tmp_path, "<{{ messages[0]['content'] }}>")
    assert _python(CLAMPED, str(good), "100").stdout.strip() == "'<hello>'"


def test_a_template_past_the_clamped_room_is_the_limit_not_the_template(tmp_path: Path) -> None:
    hungry = _tokenizer_folder(tmp_path, "{% set ns = namespace(l=[]) %}{% for i in range(40) %}"
                                         "{% set ns.l = ns.l + [('x' * 4000000) ~ i] %}{% endfor %}ok")  # 160 MB
    line = _python(CLAMPED, str(hungry), "30").stdout.strip()
    assert "DF407" in line and "RLIMIT_AS" in line and "raise the limit" in line, line


def _limited(mib: int):
    def set_limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (mib * MiB, mib * MiB))
    return set_limit


def _cli_limited(mib: int, *args: str, timeout: float = 300) -> CliResult:
    proc = subprocess.run([sys.executable, "-m", "dflash_ckpt", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"},
                          preexec_fn=_limited(mib))
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


@pytest.mark.parametrize("mib", [300, 400, 500, 600])
@pytest.mark.parametrize("command", ["smoke-run", "probe-taps"])
def test_an_address_space_limit_too_small_for_torch_is_one_df407_line(command: str, mib: int) -> None:
    res = _cli_limited(mib, command, str(DRAFT), "--target", str(TARGET))
    no_traceback(res)
    assert res.code == 2, (res.code, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and ERROR_LINE.match(lines[0]), res.stderr
    assert "DF407" in lines[0] and f"{mib} MiB" in lines[0] and "raise the limit" in lines[0]


@pytest.mark.slow
def test_a_limit_above_the_floor_runs_the_good_pair_past_its_template() -> None:
    """800 MiB: the child's limit is clamped, so the good template renders; the run passes (or,
    on a machine whose libraries map more, is refused by the floor), never a DF002."""
    res = _cli_limited(800, "smoke-run", str(DRAFT), "--target", str(TARGET), "-n", "8", "--json")
    no_traceback(res)
    assert "DF002" not in res.stderr and "chat template" not in res.stderr, res.stderr
    assert res.code == 0 or (res.code == 2 and "DF407" in res.stderr), (res.code, res.stderr[-500:])


def test_an_import_that_fails_for_memory_is_one_df407_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from dflash_ckpt.errors import DFlashCkptError
    from dflash_ckpt.runtime import address_space

    monkeypatch.setattr(address_space, "soft_limit", lambda: 700 * MiB)
    with pytest.raises(DFlashCkptError) as err:
        with address_space.torch_import_guard("smoke-run"):
            raise ImportError("libtorch_cpu.so: failed to map segment from shared object")
    assert err.value.code == "DF407" and "700 MiB" in err.value.message
    with pytest.raises(ImportError, match="No module named"):  # not a memory failure: as it was
        with address_space.torch_import_guard("smoke-run"):
            raise ImportError("No module named 'torch'")


NO_USER = "~nosuchuser-i32b/x"


@pytest.mark.parametrize("args", [
    ["inspect", NO_USER],
    ["inspect", NO_USER, "--output-format", "sarif"],
    ["inspect", NO_USER, "--json"],
    ["normalize", NO_USER, "OUT_DIR"],
    ["normalize", str(DRAFT), NO_USER],
    ["smoke-run", NO_USER, "--target", str(TARGET)],
    ["smoke-run", str(DRAFT), "--target", NO_USER],
    ["smoke-run", str(DRAFT), "--target", str(TARGET), "--tokenizer", NO_USER, "-n", "2"],
    ["probe-taps", NO_USER, "--target", str(TARGET)],
], ids=["inspect", "inspect-sarif", "inspect-json", "normalize-draft", "normalize-out", "smoke-draft",
        "smoke-target", "smoke-tokenizer", "probe-taps"])
@pytest.mark.slow
def test_a_tilde_user_that_does_not_exist_is_one_df001_line(args: list[str], tmp_path: Path) -> None:
    args = [str(tmp_path / "out") if a == "OUT_DIR" else a for a in args]
    res = run_cli(*args, cwd=tmp_path)
    no_traceback(res)
    assert res.code == 2, (res.code, res.stderr)
    assert "please report" not in res.stderr + res.stdout
    if "--output-format" in args or "--json" in args:
        assert "~nosuchuser-i32b" in res.stdout and "DF001" in res.stdout
        return
    lines = res.stderr.strip().splitlines()
    assert lines and ERROR_LINE.match(lines[-1]), res.stderr
    assert "DF001" in lines[-1] and "nosuchuser-i32b" in lines[-1] and "no user" in lines[-1], lines[-1]


def test_a_folder_literally_named_tilde_user_is_taken_as_is(tmp_path: Path) -> None:
    """A shell leaves ``~nosuchuser`` unexpanded; so does this tool, where such a folder exists."""
    shutil.copytree(DRAFT, tmp_path / "~nosuchuser-i32b" / "x")
    res = run_cli("inspect", NO_USER, cwd=tmp_path)
    no_traceback(res)
    assert "no user" not in res.stderr and res.code == 0, res.stderr


def test_a_hub_cache_under_a_tilde_user_that_does_not_exist_is_one_line(tmp_path: Path) -> None:
    res = run_cli("inspect", "org/name", env={"HF_HOME": "~nosuchuser-i32b/hf", "HF_HUB_OFFLINE": "1"}, cwd=tmp_path)
    no_traceback(res)
    line = res.stderr.strip().splitlines()[-1]
    assert res.code == 2 and "DF001" in line and "HF_HOME" in line and "please report" not in line, res.stderr
