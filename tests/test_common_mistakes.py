"""Mistakes that get their own message (issue 31): a Git LFS pointer or another format under a
``.safetensors`` name (DF230, DF231), a target model given as the draft (DF232), DF101, DF211 and
DF403 naming ``probe-taps`` (with the real target where one was given), and ``probe-taps --write``
exiting on the verdict of what it wrote. Each hostile input is built at test time."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest

from conftest import ROOT, no_traceback, run_cli

TINY = ROOT / "fixtures" / "tiny-pair"
D, T = TINY / "draft", TINY / "target"

POINTER = (b"version https://git-lfs.github.com/spec/v1\n"
           b"oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\nsize 1572864\n")


def _draft_with_weights(tmp_path: Path, content: bytes) -> Path:
    folder = tmp_path / "draft"
    shutil.copytree(D, folder)
    (folder / "model.safetensors").write_bytes(content)
    return folder


def test_an_lfs_pointer_says_git_lfs_pull(cli, tmp_path: Path) -> None:
    folder = _draft_with_weights(tmp_path, POINTER)
    res = cli("inspect", str(folder), "-q")
    assert res.code == 1, res.stdout
    lines = res.stdout.strip().splitlines()
    assert len(lines) == 1 and "DF230 error: this is a Git LFS pointer" in lines[0], lines
    assert "run `git lfs pull`" in lines[0] and "lfs: true" in lines[0] and "1,572,864 bytes" in lines[0]
    assert "header length" not in res.stdout


@pytest.mark.parametrize("content,kind", [
    (b"<!DOCTYPE html>\n<html><body>Sign in to continue</body></html>\n", "an HTML page"),
    (b"PK\x03\x04" + b"\x00" * 40, "a zip archive"),
    (b'{"error": "Repository not found"}', "JSON text"),
    (b"404: Not Found", "plain text"),
])
def test_another_format_under_the_name_is_named(cli, tmp_path: Path, content: bytes, kind: str) -> None:
    res = cli("inspect", str(_draft_with_weights(tmp_path, content)), "-q")
    assert res.code == 1 and f"DF231 error: this is {kind}" in res.stdout and "not a safetensors file" in res.stdout, res.stdout


def test_a_cut_safetensors_file_is_still_truncated_not_another_format(cli, tmp_path: Path) -> None:
    """The sniff runs only where the 8-byte length is absurd: a real file cut short stays DF204."""
    real = (D / "model.safetensors").read_bytes()
    (header_len,) = struct.unpack("<Q", real[:8])
    res = cli("inspect", str(_draft_with_weights(tmp_path, real[: 8 + header_len // 2])), "-q")
    assert "DF204" in res.stdout and "DF231" not in res.stdout and "DF230" not in res.stdout, res.stdout


def test_a_target_given_as_the_draft_is_one_line(cli) -> None:
    res = cli("inspect", str(T), "-q")
    assert res.code == 1
    lines = res.stdout.strip().splitlines()
    assert len(lines) == 1 and "DF232 error: this looks like a target model" in lines[0], lines
    assert "did you mean --target?" in lines[0] and "Qwen3ForCausalLM" in lines[0]
    assert "normalize --block-size" not in res.stdout and "DF101" not in res.stdout


def test_inspect_draft_target_without_the_option_names_the_target(cli) -> None:
    res = cli("inspect", str(D), str(T), "--json")
    doc = res.json()
    first, second = doc["results"]
    assert first["ok"] and [f["code"] for f in second["findings"]] == ["DF232"], second["findings"]
    assert f"--target {T}" in second["findings"][0]["message"]


def test_a_real_draft_named_like_a_causal_lm_is_not_a_target(cli, tmp_path: Path) -> None:
    """A draft whose architectures says ...ForCausalLM keeps its DFlash keys and fc.weight: no DF232."""
    folder = tmp_path / "draft"
    shutil.copytree(D, folder)
    cfg = json.loads((folder / "config.json").read_text())
    cfg["architectures"] = ["Qwen3ForCausalLM"]
    (folder / "config.json").write_text(json.dumps(cfg))
    res = cli("inspect", str(folder), "--json")
    assert "DF232" not in {f["code"] for f in res.result()["findings"]}


def _drop_taps(tmp_path: Path) -> Path:
    folder = tmp_path / "draft"
    shutil.copytree(D, folder)
    cfg = json.loads((folder / "config.json").read_text())
    cfg["dflash_config"].pop("target_layer_ids")
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


def test_df101_names_the_given_target(cli, tmp_path: Path) -> None:
    folder = _drop_taps(tmp_path)
    alone = cli("inspect", str(folder), "-q").stdout
    paired = cli("inspect", str(folder), "--target", str(T), "-q").stdout
    assert "probe-taps" in alone and "--target TARGET --write OUT" in alone
    line = next(x for x in paired.splitlines() if "DF101" in x and "target_layer_ids" in x)
    assert f"--target {T} --write OUT" in line and "TARGET" not in line, line


def test_df211_names_probe_taps(fixtures_root: Path) -> None:
    res = run_cli("inspect", str(fixtures_root / "mutants" / "DF211-fc-four-taps"), "-q")
    line = next(x for x in res.stdout.splitlines() if "DF211" in x)
    assert "dflash-ckpt probe-taps" in line and "--write OUT" in line, line


@pytest.mark.slow
def test_df403_names_probe_taps() -> None:
    pytest.importorskip("torch")
    shifted = TINY / "draft-shifted-taps"
    res = run_cli("smoke-run", str(shifted), "--target", str(T), "-p", "The capital of France is", "-p", "Name a colour",
                  "-p", "Count to five", "-n", "16", "--device", "cpu", "-q")  # three prompts: a verdict on tau
    no_traceback(res)
    line = next(x for x in res.stdout.splitlines() if "DF403" in x)
    assert res.code == 1 and f"dflash-ckpt probe-taps {shifted} --target {T}" in line, line


@pytest.mark.slow
def test_probe_taps_write_exits_on_the_copy_it_wrote(tmp_path: Path) -> None:
    """Configured ids that lose (DF410) and a copy with the winner written: exit 0, and -q shows
    what was written and its verdict."""
    pytest.importorskip("torch")
    out = tmp_path / "fixed"
    res = run_cli("probe-taps", str(TINY / "draft-shifted-taps"), "--target", str(T), "--write", str(out), "-q")
    no_traceback(res)
    assert res.code == 0 and out.is_dir(), (res.stdout, res.stderr)
    wrote = [x for x in res.stdout.splitlines() if x.startswith("wrote ")]
    assert len(wrote) == 1 and "target_layer_ids [1, 3, 5]" in wrote[0] and "passes --min-acceptance" in wrote[0], res.stdout
    assert "DF410" in res.stdout  # the original draft's ids still lose, and it says so


def test_df216_names_a_tensor_that_exists(cli, tmp_path: Path) -> None:
    """A model.-prefixed folder without fc.weight (a target's weights under a draft's config): the
    example DF216 gives is one of its tensors, never a model.fc.weight that is not there."""
    folder = tmp_path / "draft"
    shutil.copytree(D, folder)
    shutil.copy(T / "model.safetensors", folder / "model.safetensors")
    doc = cli("inspect", str(folder), "--json").result()
    df216 = next(f for f in doc["findings"] if f["code"] == "DF216")
    assert "model.fc.weight" not in df216["message"] and "(e.g. model.embed_tokens.weight)" in df216["message"], df216


def test_no_reader_loads_an_lfs_pointer(cli, tmp_path: Path) -> None:
    """A reader verdict agrees with the findings that stop the load: an LFS pointer in place of
    the weights loads in no engine, whatever the config says."""
    doc = cli("inspect", str(_draft_with_weights(tmp_path, POINTER)), "--json").result()
    readers = doc["readers"]
    assert readers and not any(v["loads"] for v in readers.values()), readers
    assert all("DF230" in v["reason"] for v in readers.values()), readers
