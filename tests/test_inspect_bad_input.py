"""Malformed input: one line naming the file and the problem, a non-zero exit, never a traceback."""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, CliResult, no_traceback, one_error_line, run_cli


def _draft(tmp_path: Path, fixtures_root: Path) -> Path:
    """A writable copy of the clean small draft."""
    dst = tmp_path / "draft"
    shutil.copytree(fixtures_root / "mutants/base", dst)
    return dst


def test_missing_folder(tmp_path: Path) -> None:
    one_error_line(run_cli("inspect", str(tmp_path / "nope")), str(tmp_path / "nope"), "no such folder")


def test_folder_without_config(tmp_path: Path) -> None:
    one_error_line(run_cli("inspect", str(tmp_path)), str(tmp_path / "config.json"), "missing")


def test_draft_argument_is_a_file(tmp_path: Path) -> None:
    f = tmp_path / "config.json"
    f.write_text("{}")
    one_error_line(run_cli("inspect", str(f)), "is a file", "folder")


def test_bad_json_names_line_and_column(tmp_path: Path, fixtures_root: Path) -> None:
    d = _draft(tmp_path, fixtures_root)
    (d / "config.json").write_text('{\n  "block_size": 8,\n  "hidden_size": 64,,\n}\n')
    one_error_line(run_cli("inspect", str(d)), str(d / "config.json"), "line 3 column 21", "DF002")


def test_config_not_utf8(tmp_path: Path, fixtures_root: Path) -> None:
    d = _draft(tmp_path, fixtures_root)
    (d / "config.json").write_bytes(b'{"a": "\xff\xfe"}')
    one_error_line(run_cli("inspect", str(d)), "not UTF-8")


def test_config_not_an_object(tmp_path: Path, fixtures_root: Path) -> None:
    d = _draft(tmp_path, fixtures_root)
    (d / "config.json").write_text('"just a string"\n')
    one_error_line(run_cli("inspect", str(d)), "expected a JSON object", "a string", "DF003")


def test_wrong_types_are_findings_not_crashes(tmp_path: Path, fixtures_root: Path) -> None:
    d = _draft(tmp_path, fixtures_root)
    (d / "config.json").write_text(
        '{"architectures": "DFlashDraftModel", "block_size": [8], "dflash_config": 5, "hidden_size": null,'
        ' "num_hidden_layers": -2, "num_attention_heads": true, "layer_types": "full", "vocab_size": 1.5,'
        ' "target_layer_ids": {"a": 1}, "mask_token_id": "x", "num_target_layers": 8.0}\n'
    )
    res = run_cli("inspect", str(d), "-q")
    no_traceback(res)
    assert res.code == 1
    codes = {re.search(r": (DF\d{3}) error: ", line).group(1) for line in res.stdout.splitlines()}
    assert {"DF104", "DF110", "DF131", "DF142"} <= codes
    assert all(line.startswith(str(d)) for line in res.stdout.splitlines())


@pytest.mark.parametrize(
    "content, needle",
    [
        (b"\x01\x02\x03", "shorter than the 8-byte header length"),
        (struct.pack("<Q", 200 * 2**20) + b"{}", "exceeds the 100,000,000-byte cap"),
        (struct.pack("<Q", 12) + b"not json at!", "header is not JSON"),
        (struct.pack("<Q", 2) + b"[]", "not a JSON object"),
        (struct.pack("<Q", 60) + b'{"fc.weight": {"dtype": "BF16", "shape": [2], "data_offsets": [0, 9]}}'[:60], "header is not JSON"),
    ],
    ids=["short", "huge-header", "not-json", "not-object", "cut-header"],
)
def test_corrupt_safetensors(tmp_path: Path, fixtures_root: Path, content: bytes, needle: str) -> None:
    d = _draft(tmp_path, fixtures_root)
    (d / "model.safetensors").write_bytes(content)
    res = run_cli("inspect", str(d), "-q")
    no_traceback(res)
    assert res.code == 1
    lines = res.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{d / 'model.safetensors'}: DF20"), res.stdout
    assert needle in lines[0]


def test_offsets_that_disagree_with_shape(tmp_path: Path, fixtures_root: Path) -> None:
    d = _draft(tmp_path, fixtures_root)
    header = b'{"fc.weight": {"dtype": "BF16", "shape": [64, 192], "data_offsets": [0, 10]}}'
    (d / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 10)
    res = run_cli("inspect", str(d), "-q")
    assert res.code == 1 and "spans 10 bytes, its shape needs 24576" in res.stdout


def test_truncated_download(tmp_path: Path, fixtures_root: Path) -> None:
    d = _draft(tmp_path, fixtures_root)
    st = d / "model.safetensors"
    size = st.stat().st_size
    os.truncate(st, size - 1)
    res = run_cli("inspect", str(d), "--json")
    assert res.code == 1
    msg = next(f["message"] for f in res.result()["findings"] if f["code"] == "DF204")
    assert f"the file has {size - 1} bytes" in msg and "cut short" in msg


def test_symlink_loop_config(tmp_path: Path, fixtures_root: Path) -> None:
    d = _draft(tmp_path, fixtures_root)
    (d / "config.json").unlink()
    os.symlink("config.json", d / "config.json")
    one_error_line(run_cli("inspect", str(d)), str(d / "config.json"), "symbolic link loop")


def test_symlink_loop_folder(tmp_path: Path) -> None:
    os.symlink(tmp_path / "b", tmp_path / "a")
    os.symlink(tmp_path / "a", tmp_path / "b")
    one_error_line(run_cli("inspect", str(tmp_path / "a")), "symbolic link loop")


@pytest.fixture
def public_tmp() -> Path:
    """A temp folder that an unprivileged user can traverse (pytest's own are private to root)."""
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="dflash-perm-"))
    os.chmod(path, 0o755)
    yield path
    subprocess.run(["chmod", "-R", "u+rwx", str(path)], check=False)
    shutil.rmtree(path)


def _as_nobody(args: list[str]) -> CliResult:
    """Run the CLI as an unprivileged user: root reads anything, so chmod alone proves nothing."""
    cmd = [sys.executable, "-m", "dflash_ckpt", *args]
    if os.geteuid() == 0:
        if not shutil.which("setpriv"):
            pytest.skip("running as root without setpriv: cannot drop privileges to test permissions")
        cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *cmd]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HOME": "/tmp"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd="/tmp", timeout=120)
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


def test_permission_denied_config(public_tmp: Path, fixtures_root: Path) -> None:
    d = _draft(public_tmp, fixtures_root)
    os.chmod(d, 0o755)
    os.chmod(d / "config.json", 0o000)
    one_error_line(_as_nobody(["inspect", str(d)]), str(d / "config.json"), "permission denied")


def test_permission_denied_folder(public_tmp: Path, fixtures_root: Path) -> None:
    d = _draft(public_tmp, fixtures_root)
    os.chmod(d, 0o000)
    try:
        one_error_line(_as_nobody(["inspect", str(d)]), str(d), "permission denied")
    finally:
        os.chmod(d, 0o755)


def test_unreadable_weights_are_a_finding(public_tmp: Path, fixtures_root: Path) -> None:
    d = _draft(public_tmp, fixtures_root)
    os.chmod(d, 0o755)
    os.chmod(d / "config.json", 0o644)
    os.chmod(d / "model.safetensors", 0o000)
    res = _as_nobody(["inspect", str(d), "-q"])
    no_traceback(res)
    assert res.code == 1
    assert "DF203" in res.stdout and "permission denied" in res.stdout


def test_bad_target(tmp_path: Path, fixtures_root: Path) -> None:
    t = tmp_path / "target"
    t.mkdir()
    (t / "config.json").write_text("{ nope")
    one_error_line(run_cli("inspect", str(fixtures_root / "mutants/base"), "--target", str(t)), str(t / "config.json"), "invalid JSON")


def test_uncached_repo_id(tmp_path: Path) -> None:
    res = run_cli("inspect", "some-org/some-draft", env={"HF_HOME": str(tmp_path), "HF_HUB_OFFLINE": "1"})
    one_error_line(res, "some-org/some-draft")


def test_usage_errors_exit_2() -> None:
    assert run_cli("inspect").code == 2
    assert run_cli("inspect", "--no-such-option", "x").code == 2
    assert run_cli("rules", "DF999").code == 2
    assert run_cli("frobnicate").code == 2


def test_json_document_on_unreadable_input(tmp_path: Path) -> None:
    res = run_cli("inspect", str(tmp_path / "missing"), "--json")
    assert res.code == 2
    doc = res.result()
    assert doc["ok"] is False and doc["error"]["code"] == "DF001"
    assert doc["resolved"] == {"block_size": None, "mask_token_id": None, "target_layer_ids": None, "num_target_layers": None}
