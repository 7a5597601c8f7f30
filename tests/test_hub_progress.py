"""-q and --json silence huggingface_hub's download progress bars (they write to stderr)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from hub_server import HubServer, hub_env


def _normalize(hub: HubServer, home: Path, out: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **hub_env(hub, home)}
    del env["HF_HUB_DISABLE_PROGRESS_BARS"]  # the user's default: bars on
    env.pop("COLUMNS", None)
    return subprocess.run([sys.executable, "-m", "dflash_ckpt", "normalize", "tiny/draft", str(out), *flags],
                          capture_output=True, text=True, env=env, timeout=120)


def test_quiet_and_json_turn_the_bars_off(hub: HubServer, tmp_path: Path) -> None:
    loud = _normalize(hub, tmp_path / "hf1", tmp_path / "o1")
    assert loud.returncode == 0, loud.stderr
    assert "Fetching" in loud.stderr or "%|" in loud.stderr, loud.stderr  # the bars exist to be silenced
    for flag, home in (("-q", "hf2"), ("--json", "hf3")):
        res = _normalize(hub, tmp_path / home, tmp_path / f"o{home}", flag)
        assert res.returncode == 0, res.stderr
        assert res.stderr == "", (flag, res.stderr)
