"""normalize against the issue-18 attacker (local half): a planted lock-file link, a cache snapshot
reached through a link or ``..``, and a file written into OUT while the run builds it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from conftest import no_traceback
from normalize_support import leftovers, tree_state
from test_normalize_cli import refused, small_draft
from test_normalize_inplace import make_cache


@pytest.mark.parametrize("kind", ["symlink", "dangling-symlink", "hardlink", "foreign-content", "fifo", "folder"])
def test_a_planted_lock_file_is_refused_and_never_written(cli: Any, tmp_path: Path, kind: str) -> None:
    draft = small_draft(tmp_path / "d")
    victim = tmp_path / "precious.txt"
    victim.write_text("the user's own file\n")
    lock = tmp_path / ".o.dflash-ckpt.lock"
    if kind == "symlink":
        os.symlink(victim, lock)
    elif kind == "dangling-symlink":
        os.symlink(tmp_path / "created-through-the-link", lock)
    elif kind == "hardlink":
        os.link(victim, lock)
    elif kind == "foreign-content":
        lock.write_text("not a pid, the user's notes\n")
    elif kind == "fifo":
        os.mkfifo(lock)
    else:
        lock.mkdir()
    res = cli("normalize", str(draft), str(tmp_path / "o"))
    line = refused(res, 2, str(lock), "lock file")
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert victim.read_text() == "the user's own file\n"
    assert not (tmp_path / "created-through-the-link").exists()
    assert not (tmp_path / "o").exists()
    if kind == "foreign-content":
        assert lock.read_text() == "not a pid, the user's notes\n"
    assert "remove it" in line


def test_a_stale_lock_of_a_killed_run_is_reused(cli: Any, tmp_path: Path) -> None:
    """What a SIGKILLed run leaves (its pid, no holder) does not block the next run."""
    draft = small_draft(tmp_path / "d")
    (tmp_path / ".o.dflash-ckpt.lock").write_text("999999\n")
    res = cli("normalize", str(draft), str(tmp_path / "o"))
    assert res.code == 0, res.stderr
    assert (tmp_path / "o" / "config.json").is_file() and not (tmp_path / ".o.dflash-ckpt.lock").exists()


@pytest.mark.parametrize("how", ["symlink", "dotdot", "symlinked-parent"])
def test_in_place_on_a_cache_snapshot_by_another_path_is_refused(cli: Any, fixtures_root: Path, tmp_path: Path, how: str) -> None:
    snap = make_cache(tmp_path / "hub", fixtures_root / "mutants" / "base")
    if how == "symlink":
        path = tmp_path / "mydraft"
        os.symlink(snap, path)
    elif how == "dotdot":
        path = Path(f"{snap}/../{snap.name}")
    else:
        os.symlink(snap.parent, tmp_path / "snaps")
        path = tmp_path / "snaps" / snap.name
    before = tree_state(snap)
    res = cli("normalize", str(path), "--in-place")
    line = refused(res, 2, "Hugging Face cache snapshot", "`dflash-ckpt normalize org/draft OUT`", "--force")
    assert len(res.stderr.strip().splitlines()) == 1, line
    assert tree_state(snap) == before and (snap / "config.json").is_symlink()


@pytest.mark.parametrize("copy", [True, False], ids=["copy", "link"])
def test_a_file_written_into_empty_out_during_the_run_is_kept(cli: Any, monkeypatch: pytest.MonkeyPatch,
                                                              tmp_path: Path, copy: bool) -> None:
    import dflash_ckpt.canonical.build as build

    draft = small_draft(tmp_path / "d", extra={"README.md": b"# draft\n"})
    out = tmp_path / "o"
    out.mkdir()  # empty: normalize may fill it
    real = build._place

    def racing(*args: Any, **kwargs: Any) -> None:
        if not (out / "theirs.txt").exists():  # someone else writes into OUT mid-build
            (out / "theirs.txt").write_text("written by another process\n")
        real(*args, **kwargs)

    monkeypatch.setattr(build, "_place", racing)
    res = cli("normalize", str(draft), str(out), *(["--copy"] if copy else []))
    line = refused(res, 2, f"OUT {out}", "changed by someone else", "left as it is")
    assert len(res.stderr.strip().splitlines()) == 1, line
    assert sorted(p.name for p in out.iterdir()) == ["theirs.txt"]
    assert (out / "theirs.txt").read_text() == "written by another process\n"
    assert leftovers(tmp_path) == []


def test_out_replaced_by_a_file_during_the_run_is_kept(cli: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import dflash_ckpt.canonical.build as build

    draft = small_draft(tmp_path / "d")
    out = tmp_path / "o"
    real = build._place

    def racing(*args: Any, **kwargs: Any) -> None:
        if not out.exists():
            out.write_text("a file, not a folder\n")
        real(*args, **kwargs)

    monkeypatch.setattr(build, "_place", racing)
    refused(cli("normalize", str(draft), str(out), "--copy"), 2, "changed by someone else")
    assert out.read_text() == "a file, not a folder\n" and leftovers(tmp_path) == []


def test_force_still_replaces_a_non_empty_out(cli: Any, tmp_path: Path) -> None:
    draft = small_draft(tmp_path / "d")
    out = tmp_path / "o"
    out.mkdir()
    (out / "old.txt").write_text("old")
    res = cli("normalize", str(draft), str(out), "--force")
    no_traceback(res)
    assert res.code == 0, res.stderr
    assert not (out / "old.txt").exists() and (out / "config.json").is_file()
