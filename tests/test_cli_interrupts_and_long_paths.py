"""The CLI's own edges against the issue-18 attacker: Ctrl-C while the CLI is still importing,
and 5,000-character paths (ENAMETOOLONG) wherever a path is taken."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, error_line, no_traceback

PAIR = ROOT / "fixtures" / "tiny-pair"

#: Raises KeyboardInterrupt when the CLI imports ``module`` (a Ctrl-C landing mid-import), then
#: runs the installed entry point as the ``dflash-ckpt`` script does.
INTERRUPT_DURING_IMPORT = """
import sys
class Interrupt:
    def find_spec(self, name, path=None, target=None):
        if name == {module!r}:
            raise KeyboardInterrupt
        return None
sys.meta_path.insert(0, Interrupt())
sys.argv = ["dflash-ckpt", "inspect", {draft!r}]
from dflash_ckpt.entry import main
main()
"""


@pytest.mark.parametrize("module", ["typer", "rich", "dflash_ckpt.cli", "dflash_ckpt.commands.inspect_cmd"])
def test_ctrl_c_during_start_up_imports_is_one_line(module: str) -> None:
    code = INTERRUPT_DURING_IMPORT.format(module=module, draft=str(PAIR / "draft"))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 130, (proc.returncode, proc.stderr)
    assert proc.stderr.strip() == "interrupted", proc.stderr
    assert "Traceback" not in proc.stderr


def before_our_code(err: str) -> bool:
    """A KeyboardInterrupt traceback in which no frame is a file of ours: the signal landed while
    runpy was still finding and loading the package (``<frozen runpy>`` frames only), before the
    first line of ``dflash_ckpt`` ran. A frame in the package is ours to handle, and fails."""
    frames = re.findall(r'^\s*File "([^"]+)"', err, re.MULTILINE)
    ours = str(ROOT / "dflash_ckpt")
    return err.rstrip().endswith("KeyboardInterrupt") and bool(frames) and not any(f.startswith(ours) for f in frames)


def test_before_our_code_tells_python_start_up_from_ours() -> None:
    runpy_only = ('Traceback (most recent call last):\n  File "<frozen runpy>", line 189, in _run_module_as_main\n'
                  '  File "<frozen runpy>", line 112, in _get_module_details\nKeyboardInterrupt\n')
    assert before_our_code(runpy_only)
    ours = runpy_only.replace('KeyboardInterrupt', f'  File "{ROOT}/dflash_ckpt/__main__.py", line 4, in <module>\nKeyboardInterrupt')
    assert not before_our_code(ours)
    assert not before_our_code(runpy_only.replace("KeyboardInterrupt", "ValueError: x"))


def test_real_sigint_at_any_moment_of_start_up_is_never_a_traceback() -> None:
    """SIGINT sent at several moments of ``python -m dflash_ckpt inspect`` (imports included)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    seen = set()
    for delay in (0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5):
        proc = subprocess.Popen([sys.executable, "-m", "dflash_ckpt", "inspect", str(PAIR / "draft")],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
        if "init_import_site" in err or (proc.returncode == -signal.SIGINT and not err) or before_our_code(err):
            continue  # Python itself was still starting (no handler, no code of ours yet)
        assert "Traceback" not in err, (delay, err)
        # -SIGINT: CPython re-raises SIGINT at exit after some interrupted imports; a shell shows 130 either way
        assert proc.returncode in (0, 130, -signal.SIGINT), (delay, proc.returncode, err)
        if proc.returncode != 0:
            assert err.strip().splitlines()[-1] == "interrupted"
        seen.add(proc.returncode)
    assert seen - {0}  # at least one signal landed before the run finished


LONG = "a" * 5000


@pytest.mark.parametrize("args", [
    ("inspect", f"/tmp/{LONG}"),
    ("inspect", f"{PAIR}/draft", "--target", f"/tmp/{LONG}"),
    ("normalize", f"{PAIR}/draft", f"/tmp/{LONG}"),
    ("normalize", f"{PAIR}/draft", f"/tmp/{LONG}/sub"),
    ("normalize", f"/tmp/{LONG}", "--in-place"),
    ("smoke-run", f"{PAIR}/draft", "--target", f"{PAIR}/target", "--tokenizer", f"/tmp/{LONG}"),
    ("smoke-run", f"{PAIR}/draft", "--target", f"{PAIR}/target", "--prompts", f"/tmp/{LONG}"),
], ids=["inspect", "inspect-target", "normalize-out", "normalize-out-parent", "normalize-in-place", "smoke-tokenizer", "smoke-prompts"])
def test_a_5000_character_path_is_one_line(cli: Any, tmp_path: Path, args: tuple[str, ...]) -> None:
    args = tuple(a.replace("/tmp/", f"{tmp_path}/") for a in args)
    res = cli(*args)
    no_traceback(res)
    assert res.code == 2, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    line = error_line(res)
    assert "DF001" in line or "DF004" in line
    assert len(line.splitlines()[0]) < 400  # the path is shortened, not printed whole
    assert not any(p.name.startswith("a" * 100) for p in tmp_path.iterdir())
