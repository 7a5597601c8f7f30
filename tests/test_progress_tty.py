"""Progress on a terminal: smoke-run and probe-taps say what loads before torch is imported, and
probe-taps shows a bar over its candidates; off a terminal, or with -q/--json, none of it.

stderr is a pseudo-terminal here (``os.openpty``), as in a user's shell; stdout stays a pipe.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAIR = ROOT / "fixtures" / "tiny-pair"
TARGET, DRAFT = PAIR / "target", PAIR / "draft"

pytest.importorskip("torch")
pytest.importorskip("tokenizers")


def run_on_tty(*args: str) -> tuple[int, str, str]:
    """``python -m dflash_ckpt ARGS`` with stderr on a pseudo-terminal: (exit code, stdout, what the terminal got)."""
    master, slave = os.openpty()
    env = {**os.environ, "COLUMNS": "120", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen([sys.executable, "-m", "dflash_ckpt", *args], stdout=subprocess.PIPE, stderr=slave,
                            stdin=subprocess.DEVNULL, env=env)
    os.close(slave)
    chunks: list[bytes] = []
    while True:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                data = os.read(master, 65536)
            except OSError:  # the child closed its end
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    out = proc.stdout.read().decode() if proc.stdout else ""
    code = proc.wait(timeout=600)
    os.close(master)
    return code, out, b"".join(chunks).decode(errors="replace")


@pytest.mark.slow
def test_smoke_run_says_what_loads_before_torch_then_erases_it() -> None:
    code, out, term = run_on_tty("smoke-run", str(DRAFT), "--target", str(TARGET), "-n", "8", "-p", "2+2=")
    assert code == 0 and "DF408" in out, term  # 8 tokens of one prompt: too little evidence for a verdict
    note = f"smoke-run: loading torch and the reference runtime for {DRAFT} on {TARGET} ..."
    assert term.startswith(note), term[:300]
    assert term[len(note):].startswith("\r\x1b[K"), "the note is erased before the command's own lines"
    assert "loading target" in term and "smoke-run" in out


@pytest.mark.slow
def test_probe_taps_shows_a_bar_over_the_candidates() -> None:
    code, out, term = run_on_tty("probe-taps", str(DRAFT), "--target", str(TARGET), "-n", "8", "--budget", "3")
    assert code == 0, term
    assert term.startswith("probe-taps: loading torch and the reference runtime")
    assert "measuring tap sets (3 of 8 layers)" in term and "3/3" in term, term[-2000:]
    assert "measuring tap sets (3 of 8 layers)" not in out, "the bar is on stderr"


@pytest.mark.slow
def test_quiet_and_json_stay_silent_on_a_terminal() -> None:
    code, out, term = run_on_tty("smoke-run", str(DRAFT), "--target", str(TARGET), "-n", "8", "-p", "2+2=", "--json")
    assert code == 0 and term == "", term  # one prompt: DF408, a warning
    assert out.lstrip().startswith("{")
    code, _, term = run_on_tty("probe-taps", str(DRAFT), "--target", str(TARGET), "-n", "8", "--budget", "2", "-q")
    assert code == 0 and "loading torch" not in term and "measuring" not in term, term
