"""normalize against what the issue-10 attacker tried: leftovers of killed runs, two runs into one
OUT, links that leave DRAFT, a full disk (simulated), and the free-space margin."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, no_traceback
from normalize_support import leftovers
from test_normalize_cli import refused, small_draft

from dflash_ckpt.limits import FREE_SPACE_MARGIN, human_bytes


def test_partial_folder_of_a_killed_run_is_removed(cli: Any, tmp_path: Path) -> None:
    draft = small_draft(tmp_path / "d")
    out = tmp_path / "o"
    partial = tmp_path / ".o.partial-k1ll3d"  # what build_out's mkdtemp leaves when SIGKILLed
    (partial / "sub").mkdir(parents=True)
    (partial / "model.safetensors").write_bytes(b"half")
    res = cli("normalize", str(draft), str(out))
    no_traceback(res)
    assert res.code == 0, res.stderr
    assert f"removed {partial}, a partial OUT left by an interrupted run" in res.stderr
    assert not partial.exists() and leftovers(tmp_path) == []
    assert (out / "config.json").is_file()


def test_old_out_moved_aside_by_a_killed_swap_is_restored(cli: Any, tmp_path: Path) -> None:
    """Killed between moving the old OUT aside and renaming the new one in: OUT is missing and the
    user's folder sits in ``.o.old-*/out``. The next run puts it back and, without --force,
    refuses to replace it."""
    draft = small_draft(tmp_path / "d")
    out = tmp_path / "o"
    aside = tmp_path / ".o.old-k1ll3d" / "out"
    aside.mkdir(parents=True)
    (aside / "mine.txt").write_text("the user's")
    refused(cli("normalize", str(draft), str(out)), 2, "exists and is not empty")
    assert (out / "mine.txt").read_text() == "the user's"
    assert leftovers(tmp_path) == []


def test_a_run_killed_by_sigkill_leaves_nothing_the_next_run_keeps(tmp_path: Path) -> None:
    draft = small_draft(tmp_path / "d")
    with open(draft / "filler.dat", "wb") as fh:  # copied with --copy: takes a moment
        fh.write(b"\1" * (64 << 20))
    out = tmp_path / "o"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for _ in range(3):
        proc = subprocess.Popen([sys.executable, "-m", "dflash_ckpt", "normalize", str(draft), str(out), "--copy", "-q"],
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while not leftovers(tmp_path) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        proc.kill()
        proc.wait()
        if leftovers(tmp_path):
            break
    if not leftovers(tmp_path):
        pytest.skip("the run always finished before it could be killed")
    shutil.rmtree(out, ignore_errors=True)
    done = subprocess.run([sys.executable, "-m", "dflash_ckpt", "normalize", str(draft), str(out), "-q"],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "left by an interrupted run" in done.stderr
    assert leftovers(tmp_path) == [] and (out / "config.json").is_file()


def test_a_run_while_another_holds_out_fails_clearly(cli: Any, tmp_path: Path) -> None:
    draft = small_draft(tmp_path / "d")
    out = tmp_path / "o"
    holder = subprocess.Popen(
        [sys.executable, "-c", (
            "import fcntl, os, sys, time\n"
            f"fd = os.open({str(tmp_path / '.o.dflash-ckpt.lock')!r}, os.O_RDWR | os.O_CREAT)\n"
            "fcntl.flock(fd, fcntl.LOCK_EX); os.write(fd, b'%d\\n' % os.getpid())\n"
            "print('locked', flush=True); time.sleep(60)\n"
        )],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        line = refused(cli("normalize", str(draft), str(out)), 2, "being written by another dflash-ckpt normalize",
                       f"process {holder.pid}")
        assert str(out) in line
        assert not out.exists()
    finally:
        holder.kill()
        holder.wait()
    assert cli("normalize", str(draft), str(out)).code == 0  # the kernel dropped the dead holder's lock


def test_two_concurrent_runs_never_both_succeed(tmp_path: Path) -> None:
    draft = small_draft(tmp_path / "d")
    with open(draft / "filler.dat", "wb") as fh:
        fh.write(b"\1" * (16 << 20))
    out = tmp_path / "o"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "dflash_ckpt", "normalize", str(draft), str(out), "--copy", "-q"]
    procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [(p.wait(timeout=120), p.stderr.read()) for p in procs]  # type: ignore[union-attr]
    codes = sorted(code for code, _ in results)
    assert codes == [0, 2], results
    loser = next(err for code, err in results if code == 2)
    assert "being written by another" in loser or "exists and is not empty" in loser
    assert "Traceback" not in loser and leftovers(tmp_path) == []


def _outside(tmp_path: Path) -> Path:
    ext = tmp_path / "elsewhere"
    (ext / "shared").mkdir(parents=True)
    (ext / "tokenizer.json").write_text('{"model": {}}')
    (ext / "shared" / "notes.txt").write_text("outside")
    return ext


def test_file_link_outside_draft_is_warned_and_copied(cli: Any, tmp_path: Path) -> None:
    draft = small_draft(tmp_path / "d")
    ext = _outside(tmp_path)
    os.symlink(ext / "tokenizer.json", draft / "tokenizer.json")
    res = cli("normalize", str(draft), str(tmp_path / "o"))
    assert res.code == 0, res.stderr
    assert f"warning: {draft / 'tokenizer.json'} links to {ext / 'tokenizer.json'}, outside DRAFT" in res.stderr
    got = tmp_path / "o" / "tokenizer.json"
    assert not got.is_symlink() and got.read_text() == '{"model": {}}'


def test_file_link_outside_draft_kept_as_a_link_when_asked(cli: Any, tmp_path: Path) -> None:
    draft = small_draft(tmp_path / "d")
    ext = _outside(tmp_path)
    os.symlink(os.path.relpath(ext / "tokenizer.json", draft), draft / "tokenizer.json")
    res = cli("normalize", str(draft), str(tmp_path / "o"), "--external-links", "link")
    assert res.code == 0, res.stderr
    assert "outside DRAFT; OUT gets a link to it" in res.stderr
    got = tmp_path / "o" / "tokenizer.json"
    assert got.is_symlink() and os.readlink(got) == str(ext / "tokenizer.json")


def test_relative_folder_link_never_resolves_elsewhere(cli: Any, tmp_path: Path) -> None:
    draft = small_draft(tmp_path / "models" / "d")
    ext = _outside(tmp_path)
    os.symlink(os.path.relpath(ext / "shared", draft), draft / "shared")  # ../../elsewhere/shared
    (draft / "sub").mkdir()
    (draft / "sub" / "a.txt").write_text("inside")
    os.symlink("sub", draft / "alias")
    out = tmp_path / "o"  # one level higher than DRAFT: the same relative text would miss
    res = cli("normalize", str(draft), str(out))
    assert res.code == 0, res.stderr
    assert f"{draft / 'shared'} links to the folder {ext / 'shared'}, outside DRAFT" in res.stderr
    assert os.path.realpath(out / "shared") == os.path.realpath(ext / "shared")
    assert (out / "shared" / "notes.txt").read_text() == "outside"
    # a link inside DRAFT names OUT's own copy
    assert os.readlink(out / "alias") == "sub" and os.path.realpath(out / "alias") == os.path.realpath(out / "sub")
    assert "alias" not in res.stderr


@pytest.mark.parametrize("where, err", [
    ("copy_file", errno.ENOSPC), ("copy_file", errno.EDQUOT), ("link", errno.ENOSPC), ("config", errno.ENOSPC),
], ids=["copy-full", "copy-quota", "no-inodes-for-link", "config-full"])
def test_full_disk_while_writing_out_names_out(cli: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, where: str, err: int) -> None:
    import dflash_ckpt.canonical.build as build
    import dflash_ckpt.canonical.fsops as fsops

    draft = small_draft(tmp_path / "d", extra={"README.md": b"# draft\n"})
    out = tmp_path / "o"

    def fail(*args: Any, **kwargs: Any) -> None:
        raise OSError(err, os.strerror(err))

    if where == "copy_file":
        monkeypatch.setattr(build, "copy_file", fail)
    elif where == "link":
        monkeypatch.setattr(fsops.os, "link", fail)
    else:  # fchmod is called on the new config.json only
        monkeypatch.setattr(fsops.os, "fchmod", fail)
    line = refused(cli("normalize", str(draft), str(out)), 2, f"OUT {out}:")
    assert ("no space (or no free inodes)" if err == errno.ENOSPC else "quota") in line
    assert str(draft) not in line  # the source is not to blame
    assert not out.exists() and leftovers(tmp_path) == []


def test_free_space_message_states_the_margin(cli: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import dflash_ckpt.canonical.fsops as fsops

    draft = small_draft(tmp_path / "d")
    real = shutil.disk_usage
    monkeypatch.setattr(fsops.shutil, "disk_usage", lambda p: type(real(p))(real(p).total, 0, FREE_SPACE_MARGIN))
    line = refused(cli("normalize", str(draft), str(tmp_path / "o"), "--copy"), 2, "free, but copying the draft needs")
    assert f"plus a margin of {human_bytes(FREE_SPACE_MARGIN)} left free" in line


@pytest.mark.parametrize("text, needle", [
    ('{"a": ' + "[" * 500 + "]" * 500 + "}", "nested too deep"),
    ('{"block_size": ' + "9" * 5000 + "}", "over 4300 digits"),
], ids=["nested-500", "int-5000-digits"])
def test_normalize_of_a_deep_or_long_int_config_is_one_line(cli: Any, tmp_path: Path, text: str, needle: str) -> None:
    draft = small_draft(tmp_path / "d")
    (draft / "config.json").write_text(text)
    refused(cli("normalize", str(draft), str(tmp_path / "o")), 2, str(draft / "config.json"), needle)
    assert not (tmp_path / "o").exists() and leftovers(tmp_path) == []


def test_normalize_of_a_block_size_million_writes_nothing(cli: Any, tmp_path: Path) -> None:
    import json

    draft = small_draft(tmp_path / "d")
    cfg = json.loads((draft / "config.json").read_text())
    cfg["block_size"] = 1_000_000
    (draft / "config.json").write_text(json.dumps(cfg))
    res = cli("normalize", str(draft), str(tmp_path / "o"))
    no_traceback(res)
    assert res.code == 1 and "DF145" in res.stderr + res.stdout
    assert not (tmp_path / "o").exists()


def test_layer_types_repeat_is_bounded(cli: Any, tmp_path: Path) -> None:
    draft = small_draft(tmp_path / "d")
    refused(cli("normalize", str(draft), "--dry-run", "--layer-types", "full*1000000000"), 2, "more than 4096 layers")
