"""-q and --json silence the download progress bars (they write to stderr).

Downloads are our own streamed GETs (``sources.hub.download``), whose tqdm bar shows on a terminal
for a file of at least ``BAR_MIN_BYTES``: here stderr is a pseudo-terminal and the threshold is
lowered in the child, so the fixture repo's small files get bars that the flags must silence.
"""

from __future__ import annotations

import pytest

import fcntl
import os
import pty
import select
import struct
import subprocess
import sys
import termios
from pathlib import Path

from hub_server import HubServer, hub_env

#: The CLI with every download's bar due (the repo's files are far below 16 MiB).
LOW_THRESHOLD = (
    "import sys; import dflash_ckpt.sources.hub.download as d; d.BAR_MIN_BYTES = 0; "
    "from dflash_ckpt.cli import run; sys.exit(run(sys.argv[1:]))"
)


def _normalize(hub: HubServer, home: Path, out: Path, *flags: str) -> tuple[int, str]:
    """Exit code and everything written to stderr (a terminal) by ``normalize tiny/draft OUT FLAGS``."""
    env = {**os.environ, **hub_env(hub, home)}
    del env["HF_HUB_DISABLE_PROGRESS_BARS"]  # the user's default: bars on
    env.pop("COLUMNS", None)
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))  # tqdm draws nothing 0 wide
    try:
        proc = subprocess.Popen([sys.executable, "-c", LOW_THRESHOLD, "normalize", "tiny/draft", str(out), *flags],
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave, env=env)
        os.close(slave)
        err = bytearray()
        while True:  # read the terminal as the child writes it, until the child has closed it
            ready, _, _ = select.select([master], [], [], 120)
            assert ready, "the CLI wrote nothing and did not exit within 120 s"
            try:
                chunk = os.read(master, 1 << 16)
            except OSError:  # EIO: every writer has closed the terminal
                break
            if not chunk:
                break
            err += chunk
        proc.communicate(timeout=120)
    finally:
        os.close(master)
    return proc.returncode, err.decode("utf-8", "replace")


@pytest.mark.slow
def test_quiet_and_json_turn_the_bars_off(hub: HubServer, tmp_path: Path) -> None:
    code, loud = _normalize(hub, tmp_path / "hf1", tmp_path / "o1")
    assert code == 0, loud
    assert "%|" in loud, loud  # the bars exist to be silenced
    for flag, home in (("-q", "hf2"), ("--json", "hf3")):
        code, err = _normalize(hub, tmp_path / home, tmp_path / f"o{home}", flag)
        assert code == 0, err
        assert err == "", (flag, err)


def test_bars_obey_huggingface_hubs_switch(monkeypatch) -> None:
    """A program that turned huggingface_hub's bars off (``disable_progress_bars()``, whose state is
    global) gets none of ours either: ours are the library's tqdm."""
    import importlib
    import io

    from huggingface_hub.utils import disable_progress_bars, enable_progress_bars

    from dflash_ckpt.sources.hub import download

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    hf_tqdm = importlib.import_module("huggingface_hub.utils.tqdm")  # the module; the package's name is the class
    monkeypatch.setattr(download.sys, "stderr", Terminal())
    monkeypatch.setattr(hf_tqdm, "HF_HUB_DISABLE_PROGRESS_BARS", None)  # as if the variable were unset at import
    try:
        for off in (False, True):
            (disable_progress_bars if off else enable_progress_bars)()
            bar = download.progress_bar(download.BAR_MIN_BYTES, "model.safetensors")
            assert (bar is None) is off
            if bar is not None:
                bar.close()
        assert download.progress_bar(download.BAR_MIN_BYTES - 1, "small") is None
    finally:
        enable_progress_bars()
