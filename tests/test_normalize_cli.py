"""normalize through the CLI: refusals, overrides, OUT handling, --check, --dry-run, --json.

Every refusal is a clear one-line error with nothing written: no OUT, no temporary folder left
beside it, DRAFT unchanged (every file hashed before and after).
"""

from __future__ import annotations

import copy
import errno
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import make_fixtures
from conftest import CliResult, error_line, no_traceback, run_cli
from normalize_support import files_under, leftovers, read_json, resolved, tree_state

from dflash_ckpt.draftspec.specs import DFLASH_KEYS


def mutant(root: Path, name: str) -> Path:
    return root / "mutants" / name


def small_draft(folder: Path, cfg: dict[str, Any] | None = None, *, shards: int = 1, extra: dict[str, bytes] | None = None) -> Path:
    """The small fixture draft (or a variant of its config), with real (non-sparse) weights."""
    cfg = copy.deepcopy(make_fixtures.SMALL_DRAFT if cfg is None else cfg)
    ids = resolved(cfg)["target_layer_ids"] if isinstance(cfg.get("dflash_config", {}), dict) else None
    full = {**cfg, "dflash_config": {"target_layer_ids": ids if isinstance(ids, list) else [1, 3, 5]}}
    folder.mkdir(parents=True)
    tensors = make_fixtures.draft_tensors(full)
    if shards == 1:
        make_fixtures.write_safetensors(folder / "model.safetensors", tensors, sparse=False)
    else:
        make_fixtures.split_shards(folder, tensors, shards, sparse=False)
    make_fixtures.write_json(folder / "config.json", cfg)
    for name, data in (extra or {}).items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    return folder


def refused(res: CliResult, code: int, *needles: str) -> str:
    """A refusal: the exit code, one `PATH: CODE error:` line naming the problem, no traceback."""
    no_traceback(res)
    assert res.code == code, (res.code, res.stdout, res.stderr)
    line = error_line(res)
    for needle in needles:
        assert needle in line, (needle, line)
    return line


# -- conflicts and missing keys -----------------------------------------------------------------------


def test_conflict_is_refused_with_both_values(cli, fixtures_root: Path, tmp_path: Path) -> None:
    draft = mutant(fixtures_root, "DF103-block-size-conflict")
    state = tree_state(draft)
    res = cli("normalize", str(draft), str(tmp_path / "out"))
    line = refused(res, 1, "'block_size' is 16 in dflash_config but 8 at the top level", "--prefer", "DF103", str(draft / "config.json"))
    assert "Traceback" not in line
    assert not (tmp_path / "out").exists() and leftovers(tmp_path) == []
    assert tree_state(draft) == state


@pytest.mark.parametrize(("prefer", "value"), [("nested", 16), ("top-level", 8)])
def test_prefer_resolves_conflict(cli, fixtures_root: Path, tmp_path: Path, prefer: str, value: int) -> None:
    draft = mutant(fixtures_root, "DF103-block-size-conflict")
    res = cli("normalize", str(draft), str(tmp_path / "out"), "--prefer", prefer, "--json")
    assert res.code == 0, res.stdout + res.stderr
    new = read_json(tmp_path / "out" / "config.json")
    assert new["block_size"] == new["dflash_config"]["block_size"] == value
    change = [c for c in res.merged()["changes"] if c["op"] == "set"]
    assert len(change) == 1 and f"--prefer {prefer}" in change[0]["reason"]
    assert cli("normalize", str(tmp_path / "out"), "--check").code == 0


def test_prefer_rejects_unknown_value(cli, fixtures_root: Path, tmp_path: Path) -> None:
    res = cli("normalize", str(mutant(fixtures_root, "DF103-block-size-conflict")), str(tmp_path / "out"), "--prefer", "both")
    no_traceback(res)
    assert res.code == 2 and not (tmp_path / "out").exists()


def test_scaling_conflict_is_refused(cli, tmp_path: Path) -> None:
    cfg = copy.deepcopy(make_fixtures.SMALL_DRAFT)
    cfg["final_logit_softcapping"] = 30.0
    cfg["dflash_config"]["final_logit_softcapping"] = 50.0
    draft = small_draft(tmp_path / "d", cfg)
    refused(cli("normalize", str(draft), str(tmp_path / "out")), 1, "'final_logit_softcapping' is 50.0 in dflash_config but 30.0 at the top level")
    assert not (tmp_path / "out").exists()
    assert cli("normalize", str(draft), str(tmp_path / "out"), "--prefer", "top-level").code == 0
    new = read_json(tmp_path / "out" / "config.json")
    assert new["final_logit_softcapping"] == new["dflash_config"]["final_logit_softcapping"] == 30.0


def test_missing_key_is_never_guessed(cli, fixtures_root: Path, tmp_path: Path) -> None:
    draft = mutant(fixtures_root, "DF101-no-target-layer-ids")
    state = tree_state(draft)
    refused(cli("normalize", str(draft), str(tmp_path / "out")), 1, "target_layer_ids", "never guessed", "--target-layer-ids", "3 of them, as fc.weight implies", "DF101")
    assert not (tmp_path / "out").exists()
    assert cli("normalize", str(draft), "--check").code == 1
    res = cli("normalize", str(draft), str(tmp_path / "out"), "--target-layer-ids", "1,3,5", "--json")
    assert res.code == 0, res.stdout + res.stderr
    assert read_json(tmp_path / "out" / "config.json")["dflash_config"]["target_layer_ids"] == [1, 3, 5]
    assert {"op": "add", "path": "dflash_config.target_layer_ids", "value": [1, 3, 5], "old": None, "reason": "supplied by --target-layer-ids"} in res.merged()["changes"]
    assert tree_state(draft) == state


@pytest.mark.parametrize(("ids", "needle"), [
    ("1,3", "fc.weight implies 3"),
    ("1,5,3", "not strictly increasing"),
    ("1,3,3", "not strictly increasing"),
    ("1,3,8", "beyond the target's 8 layers"),
    ("-1,3,5", "negative"),
    ("1,x,5", "'x' is not an integer"),
    ("", "empty"),
])
def test_bad_target_layer_ids_are_refused(cli, fixtures_root: Path, tmp_path: Path, ids: str, needle: str) -> None:
    draft = mutant(fixtures_root, "DF101-no-target-layer-ids")
    refused(cli("normalize", str(draft), str(tmp_path / "out"), "--target-layer-ids", ids), 2, needle)
    assert not (tmp_path / "out").exists() and leftovers(tmp_path) == []


def test_missing_num_target_layers(cli, fixtures_root: Path, tmp_path: Path) -> None:
    draft = mutant(fixtures_root, "DF102-no-num-target-layers")
    refused(cli("normalize", str(draft), str(tmp_path / "o1")), 1, "num_target_layers", "--num-target-layers", "--target", "DF102")
    refused(cli("normalize", str(draft), str(tmp_path / "o1"), "--num-target-layers", "5"), 2, "not above the deepest tap layer 5")
    refused(cli("normalize", str(draft), str(tmp_path / "o1"), "--num-target-layers", "0"), 2, "must be positive")
    target = fixtures_root / "mutants" / "targets" / "small"
    refused(cli("normalize", str(draft), str(tmp_path / "o1"), "--num-target-layers", "9", "--target", str(target)), 2, "differs from the depth of the target")
    assert not (tmp_path / "o1").exists()
    assert cli("normalize", str(draft), str(tmp_path / "o1"), "--num-target-layers", "8").code == 0
    # the target's own depth is a fact, not a guess
    res = cli("normalize", str(draft), str(tmp_path / "o2"), "--target", str(target), "--json")
    assert res.code == 0, res.stdout + res.stderr
    assert read_json(tmp_path / "o2" / "config.json")["num_target_layers"] == 8
    assert any("num_hidden_layers of the target" in c["reason"] for c in res.merged()["changes"])


def _without(cfg: dict[str, Any], *paths: str) -> dict[str, Any]:
    out = copy.deepcopy(cfg)
    for path in paths:
        node = out
        *parents, last = path.split(".")
        for p in parents:
            node = node[p]
        del node[last]
    return out


def test_missing_block_size_and_mask(cli, tmp_path: Path) -> None:
    cfg = _without(make_fixtures.SMALL_DRAFT, "block_size", "dflash_config.mask_token_id")
    draft = small_draft(tmp_path / "d", cfg)
    refused(cli("normalize", str(draft), str(tmp_path / "out")), 1, "block_size, mask_token_id are in neither", "--block-size N", "--mask-token-id N")
    refused(cli("normalize", str(draft), str(tmp_path / "out"), "--block-size", "1", "--mask-token-id", "7"), 2, "--block-size 1 must be at least 2")
    refused(cli("normalize", str(draft), str(tmp_path / "out"), "--block-size", "8", "--mask-token-id", "1024"), 2, "not below the draft's vocab_size 1024")
    refused(cli("normalize", str(draft), str(tmp_path / "out"), "--block-size", "8", "--mask-token-id", "-3"), 2, "non-negative")
    assert not (tmp_path / "out").exists()
    assert cli("normalize", str(draft), str(tmp_path / "out"), "--block-size", "8", "--mask-token-id", "1000").code == 0
    new = read_json(tmp_path / "out" / "config.json")
    assert resolved(new) == {"block_size": 8, "mask_token_id": 1000, "target_layer_ids": [1, 3, 5], "num_target_layers": 8}


def test_mask_against_target_vocab_and_pad(cli, fixtures_root: Path, tmp_path: Path) -> None:
    cfg = _without(make_fixtures.SMALL_DRAFT, "dflash_config.mask_token_id")
    draft = small_draft(tmp_path / "d", cfg)
    targets = fixtures_root / "mutants" / "targets"
    refused(cli("normalize", str(draft), str(tmp_path / "o"), "--mask-token-id", "1000", "--target", str(targets / "DF304-small-vocab")), 2, "not below the target's vocab_size 1000")
    refused(cli("normalize", str(draft), str(tmp_path / "o"), "--mask-token-id", "1000", "--target", str(targets / "DF305-mask-is-pad")), 2, "pad_token_id")
    assert not (tmp_path / "o").exists()


def test_override_must_not_contradict_present_value(cli, fixtures_root: Path, tmp_path: Path) -> None:
    base = mutant(fixtures_root, "base")
    refused(cli("normalize", str(base), str(tmp_path / "o"), "--block-size", "16"), 2, "--block-size 16 contradicts block_size 8", "overrides only supply missing keys")
    refused(cli("normalize", str(base), str(tmp_path / "o"), "--target-layer-ids", "1,3,6"), 2, "contradicts dflash_config.target_layer_ids [1, 3, 5]")
    refused(cli("normalize", str(base), str(tmp_path / "o"), "--layer-types", "sliding,full"), 2, "--layer-types contradicts layer_types")
    assert not (tmp_path / "o").exists()
    # the same value is no contradiction
    assert cli("normalize", str(base), str(tmp_path / "o"), "--block-size", "8", "--target-layer-ids", "[1, 3, 5]").code == 0


# -- layer_types ----------------------------------------------------------------------------------------


def test_layer_types_derived_when_unambiguous(cli, fixtures_root: Path, tmp_path: Path) -> None:
    draft = mutant(fixtures_root, "DF133-no-layer-types")  # use_sliding_window false
    res = cli("normalize", str(draft), str(tmp_path / "o"), "--json")
    assert res.code == 0, res.stdout + res.stderr
    assert read_json(tmp_path / "o" / "config.json")["layer_types"] == ["full_attention", "full_attention"]
    assert any(c["path"] == "layer_types" and "use_sliding_window is false" in c["reason"] for c in res.merged()["changes"])


def test_layer_types_ambiguous_asks_for_option(cli, tmp_path: Path) -> None:
    cfg = _without(make_fixtures.SMALL_DRAFT, "layer_types")
    cfg.update(use_sliding_window=True, sliding_window=256, max_window_layers=1)
    draft = small_draft(tmp_path / "d", cfg)
    refused(cli("normalize", str(draft), str(tmp_path / "o")), 1, "layer_types is missing and cannot be derived", "--layer-types", "DF133")
    refused(cli("normalize", str(draft), str(tmp_path / "o"), "--layer-types", "sliding"), 2, "1 entries but num_hidden_layers is 2")
    refused(cli("normalize", str(draft), str(tmp_path / "o"), "--layer-types", "sliding,global"), 2, "'global' is not full_attention or sliding_attention")
    assert not (tmp_path / "o").exists()
    assert cli("normalize", str(draft), str(tmp_path / "o"), "--layer-types", "sliding*1,full").code == 0
    assert read_json(tmp_path / "o" / "config.json")["layer_types"] == ["sliding_attention", "full_attention"]


def test_layer_types_sliding_needs_window(cli, tmp_path: Path) -> None:
    cfg = _without(make_fixtures.SMALL_DRAFT, "layer_types")
    cfg.update(use_sliding_window=True)  # sliding_window stays null
    draft = small_draft(tmp_path / "d", cfg)
    refused(cli("normalize", str(draft), str(tmp_path / "o"), "--layer-types", "sliding,full"), 2, "sliding_window", "null")
    assert cli("normalize", str(draft), str(tmp_path / "o"), "--layer-types", "full_attention,full_attention").code == 0


# -- layouts --------------------------------------------------------------------------------------------


def test_top_level_only_draft_gets_dflash_config(cli, tmp_path: Path) -> None:
    """A home-made draft with every DFlash key at the top level and no dflash_config."""
    cfg = copy.deepcopy(make_fixtures.SMALL_DRAFT)
    dc = cfg.pop("dflash_config")
    cfg.update(dc)
    draft = small_draft(tmp_path / "d", cfg)
    res = cli("normalize", str(draft), str(tmp_path / "o"), "--json")
    assert res.code == 0, res.stdout + res.stderr
    new = read_json(tmp_path / "o" / "config.json")
    assert new["dflash_config"] == {"block_size": 8, "mask_token_id": 1000, "num_target_layers": 8, "target_layer_ids": [1, 3, 5]}
    assert resolved(new) == resolved(cfg)
    assert all(json.dumps(new[k]) == json.dumps(v) for k, v in cfg.items())
    assert res.merged()["layout_before"] == "mixed" and res.merged()["layout_after"] == "nested"
    assert all(v["loads"] for v in res.merged()["readers_after"].values())


def test_canonical_draft_is_byte_identical(cli, fixtures_root: Path, tmp_path: Path) -> None:
    cli("normalize", str(mutant(fixtures_root, "base")), str(tmp_path / "a"))
    weird = (tmp_path / "a" / "config.json").read_bytes().replace(b"1e-06", b"1E-6").replace(b"\n", b"\r\n")
    (tmp_path / "a" / "config.json").write_bytes(weird)
    res = cli("normalize", str(tmp_path / "a"), str(tmp_path / "b"))
    assert res.code == 0 and "canonical" in res.stdout
    assert (tmp_path / "b" / "config.json").read_bytes() == weird


def test_style_of_other_keys_is_kept(cli, tmp_path: Path) -> None:
    """4-space indent, compact lists, odd number spellings, no trailing newline: all kept."""
    text = (
        '{\n    "architectures": ["DFlashDraftModel"],\n    "block_size": 8,\n    "dflash_config": {"mask_token_id": 1000, "target_layer_ids": [1, 3, 5]},\n'
        '    "head_dim": 16, "hidden_size": 64,\n    "intermediate_size": 128,\n    "layer_types": ["full_attention", "full_attention"],\n'
        '    "num_attention_heads": 4,\n    "num_hidden_layers": 2,\n    "num_key_value_heads": 2,\n    "num_target_layers": 8,\n'
        '    "rms_norm_eps": 1E-6,\n    "rope_theta": 1.0e4,\n    "note": "caf\\u00e9",\n    "vocab_size": 1024\n}'
    )
    draft = small_draft(tmp_path / "d")
    (draft / "config.json").write_text(text)
    res = cli("normalize", str(draft), str(tmp_path / "o"))
    assert res.code == 0, res.stdout + res.stderr
    new = (tmp_path / "o" / "config.json").read_text()
    assert not new.endswith("\n")
    for kept in ('"rms_norm_eps": 1E-6,', '"rope_theta": 1.0e4,', '"note": "caf\\u00e9",', '    "head_dim": 16, "hidden_size": 64,'):
        assert kept in new
    assert '"dflash_config": {"block_size": 8, "mask_token_id": 1000, "num_target_layers": 8, "target_layer_ids": [1, 3, 5]},' in new
    assert json.loads(new)["dflash_config"]["block_size"] == 8


def test_duplicate_key_is_refused(cli, tmp_path: Path) -> None:
    draft = small_draft(tmp_path / "d")
    text = (draft / "config.json").read_text().replace('"block_size": 8,', '"block_size": 8,\n  "block_size": 16,')
    (draft / "config.json").write_text(text)
    refused(cli("normalize", str(draft), str(tmp_path / "o")), 2, "key 'block_size' appears twice")
    assert not (tmp_path / "o").exists()


def test_dflash_config_not_an_object(cli, tmp_path: Path) -> None:
    cfg = copy.deepcopy(make_fixtures.SMALL_DRAFT)
    cfg["dflash_config"] = [1, 2]
    draft = small_draft(tmp_path / "d", cfg)
    refused(cli("normalize", str(draft), str(tmp_path / "o"), "--target-layer-ids", "1,3,5", "--mask-token-id", "1000"), 1, "'dflash_config' must be an object")


def test_unfixable_draft_fails_checks_and_writes_nothing(cli, fixtures_root: Path, tmp_path: Path) -> None:
    for name, code in (("DF212-missing-k-norm", "DF212"), ("DF211-fc-four-taps", "DF211"), ("DF104-block-size-string", "DF104")):
        res = cli("normalize", str(mutant(fixtures_root, name)), str(tmp_path / name))
        line = refused(res, 1, "the normalized config fails", code, "nothing written")
        assert line.startswith(f"{mutant(fixtures_root, name)}: DF005 error: ")
        assert f"{code} error:" in res.stderr
        assert not (tmp_path / name).exists()
    assert leftovers(tmp_path) == []


def test_unreadable_config_is_input_error(cli, fixtures_root: Path, tmp_path: Path) -> None:
    refused(cli("normalize", str(mutant(fixtures_root, "DF002-bad-json")), str(tmp_path / "o")), 2, "invalid JSON at line 4")
    refused(cli("normalize", str(mutant(fixtures_root, "DF001-no-config")), str(tmp_path / "o")), 2, "config.json: missing")
    refused(cli("normalize", str(tmp_path / "nowhere"), str(tmp_path / "o")), 2, "no such folder")
    assert not (tmp_path / "o").exists()


# -- OUT ------------------------------------------------------------------------------------------------


def test_existing_out_is_refused_unless_force(cli, fixtures_root: Path, tmp_path: Path) -> None:
    draft = mutant(fixtures_root, "base")
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("keep me")
    refused(cli("normalize", str(draft), str(out)), 2, "exists and is not empty", "--force")
    assert files_under(out) == ["mine.txt"] and leftovers(tmp_path) == []
    assert cli("normalize", str(draft), str(out), "--force").code == 0
    assert files_under(out) == ["config.json", "model.safetensors"] and leftovers(tmp_path) == []
    # an empty folder is fine without --force
    empty = tmp_path / "empty"
    empty.mkdir()
    assert cli("normalize", str(draft), str(empty)).code == 0
    assert files_under(empty) == ["config.json", "model.safetensors"]
    (tmp_path / "file").write_text("x")
    refused(cli("normalize", str(draft), str(tmp_path / "file"), "--force"), 2, "not a folder")


def test_out_inside_or_equal_to_draft(cli, tmp_path: Path) -> None:
    draft = small_draft(tmp_path / "d")
    state = tree_state(draft)
    refused(cli("normalize", str(draft), str(draft)), 2, "is DRAFT itself", "--in-place")
    refused(cli("normalize", str(draft), str(draft / "sub")), 2, "is inside DRAFT")
    refused(cli("normalize", str(draft), str(draft / "." / ".." / "d" / "x")), 2, "is inside DRAFT")
    os.symlink(draft, tmp_path / "alias")
    refused(cli("normalize", str(draft), str(tmp_path / "alias" / "x")), 2, "is inside DRAFT")
    # replacing a folder that holds DRAFT would delete it, even with --force
    refused(cli("normalize", str(draft), str(tmp_path), "--force"), 2, "contains DRAFT")
    assert tree_state(draft) == state


def test_out_missing_parents_are_created(cli, tmp_path: Path) -> None:
    draft = small_draft(tmp_path / "d")
    out = tmp_path / "no" / "such" / "out"
    dry = cli("normalize", str(draft), str(out), "--dry-run")
    assert dry.code == 0, dry.stderr
    assert not (tmp_path / "no").exists()
    res = cli("normalize", str(draft), str(out), "-q")
    assert res.code == 0, res.stderr
    assert read_json(out / "config.json")["dflash_config"]["block_size"] == read_json(draft / "config.json")["block_size"]
    assert leftovers(tmp_path / "no" / "such") == []


def test_created_parents_are_removed_when_the_run_fails(cli, fixtures_root: Path, tmp_path: Path) -> None:
    # the checks pass, then the build fails: no empty folders are left behind
    draft = small_draft(tmp_path / "d")
    inside = tmp_path / "d" / "sub" / "out"
    refused(cli("normalize", str(draft), str(inside)), 2, "inside DRAFT")
    assert not (tmp_path / "d" / "sub").exists()
    bad = mutant(fixtures_root, "DF212-missing-k-norm")
    refused(cli("normalize", str(bad), str(tmp_path / "a" / "b" / "out")), 1, "nothing written")
    assert not (tmp_path / "a").exists()


def _as_nobody() -> list[str] | None:
    """A prefix that runs a command as an unprivileged user (root ignores permissions)."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    return [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"] if setpriv else None


@pytest.fixture
def world_dir() -> Any:
    """A folder an unprivileged user can read (pytest's tmp_path is private to root)."""
    import tempfile

    d = Path(tempfile.mkdtemp(prefix="dflash-normalize-"))
    os.chmod(d, 0o755)
    yield d
    for root, dirs, _ in os.walk(d):
        for name in dirs:
            os.chmod(os.path.join(root, name), 0o755)
    shutil.rmtree(d)


def _run_unprivileged(prefix: list[str], *args: str) -> CliResult:
    env = {**os.environ, "HOME": "/tmp", "COLUMNS": "200", "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.run([*prefix, sys.executable, "-m", "dflash_ckpt", *args], capture_output=True, text=True, env=env, timeout=120, cwd="/")
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


@pytest.mark.slow
def test_read_only_out_parent(world_dir: Path) -> None:
    prefix = _as_nobody()
    if prefix is None:
        pytest.skip("running as root without setpriv: no way to make a folder unwritable")
    draft = small_draft(world_dir / "draft")
    for p in [draft, *draft.iterdir()]:
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    ro = world_dir / "ro"
    ro.mkdir()
    os.chmod(ro, 0o555)
    runs = subprocess.run([*prefix, sys.executable, "-c", "import dflash_ckpt, os; print(os.geteuid())"], capture_output=True, text=True, cwd="/")
    if runs.returncode != 0:
        pytest.skip(f"the interpreter cannot run as an unprivileged user here: {runs.stderr.strip()[:200]}")
    # sanity: the mechanism really blocks writes
    probe = subprocess.run([*prefix, "touch", str(ro / "probe")], capture_output=True)
    assert probe.returncode != 0
    res = _run_unprivileged(prefix, "normalize", str(draft), str(ro / "out"))
    refused(res, 2, str(ro), "not writable")
    assert list(ro.iterdir()) == []
    # and in place, a read-only DRAFT folder is refused with DRAFT intact
    os.chmod(draft, 0o555)
    before = (draft / "config.json").read_bytes()
    res = _run_unprivileged(prefix, "normalize", str(draft), "--in-place")
    refused(res, 2, "not writable")
    assert (draft / "config.json").read_bytes() == before and sorted(p.name for p in draft.iterdir()) == ["config.json", "model.safetensors"]


def test_not_enough_disk_for_a_copy(cli, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import dflash_ckpt.canonical.fsops as fsops

    draft = small_draft(tmp_path / "d")
    real = shutil.disk_usage

    def tiny(path: Any) -> Any:
        u = real(path)
        return type(u)(u.total, u.total - 1000, 1000)

    monkeypatch.setattr(fsops.shutil, "disk_usage", tiny)
    refused(cli("normalize", str(draft), str(tmp_path / "o"), "--copy"), 2, "free, but copying the draft needs")
    assert not (tmp_path / "o").exists() and leftovers(tmp_path) == []


def test_copy_across_filesystems(cli, tmp_path: Path) -> None:
    """/dev/shm is another filesystem: weights are copied, byte for byte."""
    shm = Path("/dev/shm")
    if not shm.is_dir() or os.stat(shm).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("no second filesystem here")
    import tempfile

    draft = small_draft(tmp_path / "d", shards=2, extra={"tokenizer.json": b"{}\n", "sub/README.md": b"card\n"})
    with tempfile.TemporaryDirectory(dir=shm) as other:
        out = Path(other) / "out"
        res = cli("normalize", str(draft), str(out), "--json")
        assert res.code == 0, res.stdout + res.stderr
        files = res.merged()["files"]
        assert files["linked"] == [] and len(files["copied"]) == 5
        assert files_under(out) == files_under(draft)
        for rel in files_under(draft):
            if rel != "config.json":
                assert (out / rel).read_bytes() == (draft / rel).read_bytes()
                assert os.stat(out / rel).st_ino != os.stat(draft / rel).st_ino


def test_copy_flag_and_link_fallback(cli, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    draft = small_draft(tmp_path / "d")
    res = cli("normalize", str(draft), str(tmp_path / "c"), "--copy", "--json")
    assert res.code == 0 and res.merged()["files"]["linked"] == []
    assert (tmp_path / "c" / "model.safetensors").read_bytes() == (draft / "model.safetensors").read_bytes()
    assert os.stat(tmp_path / "c" / "model.safetensors").st_ino != os.stat(draft / "model.safetensors").st_ino

    def no_links(src: Any, dst: Any, **kw: Any) -> None:
        raise OSError(errno.EPERM, "hard links not supported")

    monkeypatch.setattr(os, "link", no_links)
    res = cli("normalize", str(draft), str(tmp_path / "f"), "--json")
    assert res.code == 0, res.stdout + res.stderr
    assert res.merged()["files"]["copied"] == ["model.safetensors"]
    assert (tmp_path / "f" / "model.safetensors").read_bytes() == (draft / "model.safetensors").read_bytes()


@pytest.mark.parametrize("exc", [KeyboardInterrupt, OSError])
def test_interrupted_run_leaves_no_out(cli, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, exc: type[BaseException]) -> None:
    import dflash_ckpt.canonical.build as build

    draft = small_draft(tmp_path / "d", shards=3)
    state = tree_state(draft)
    real = build.copy_file
    calls: list[int] = []

    def flaky(src: Path, dst: Path, on_bytes: Any = None) -> None:
        calls.append(1)
        if len(calls) == 2:
            raise exc(errno.EIO, "disk gone") if exc is OSError else exc()
        real(src, dst, on_bytes)

    monkeypatch.setattr(build, "copy_file", flaky)
    res = cli("normalize", str(draft), str(tmp_path / "out"), "--copy")
    no_traceback(res)
    assert res.code == (130 if exc is KeyboardInterrupt else 2)
    assert len(calls) == 2
    assert not (tmp_path / "out").exists() and leftovers(tmp_path) == []
    assert tree_state(draft) == state


def test_other_files_are_carried(cli, tmp_path: Path) -> None:
    extra = {"tokenizer.json": b'{"v": 1}\n', "README.md": b"# card\n", "original/params.json": b"{}\n", ".cache/huggingface/x.metadata": b"state\n"}
    draft = small_draft(tmp_path / "d", shards=2, extra=extra)
    res = cli("normalize", str(draft), str(tmp_path / "o"), "--json")
    assert res.code == 0, res.stdout + res.stderr
    expected = [f for f in files_under(draft) if not f.startswith(".cache/")]
    assert files_under(tmp_path / "o") == expected
    for rel in expected:
        if rel != "config.json":
            assert (tmp_path / "o" / rel).read_bytes() == (draft / rel).read_bytes()
    # small files are copies (editing one in OUT cannot change DRAFT), weights are links
    assert os.stat(tmp_path / "o" / "tokenizer.json").st_ino != os.stat(draft / "tokenizer.json").st_ino
    assert sorted(res.merged()["files"]["linked"]) == [f for f in expected if f.endswith(".safetensors")]


# -- modes ----------------------------------------------------------------------------------------------


def test_check_exit_codes(cli, fixtures_root: Path, tmp_path: Path) -> None:
    draft = mutant(fixtures_root, "base")
    res = cli("normalize", str(draft), "--check")
    assert res.code == 1 and "not canonical" in res.stdout and "+    \"block_size\": 8," in res.stdout
    quiet = cli("normalize", str(draft), "--check", "-q").stdout  # one line, as ruff format --check (issue 20)
    assert quiet.count("\n") == 1 and " DF020 error: not canonical" in quiet
    assert cli("normalize", str(draft), str(tmp_path / "o")).code == 0
    ok = cli("normalize", str(tmp_path / "o"), "--check", "--json")
    assert ok.code == 0 and ok.merged()["canonical"] is True and ok.merged()["changes"] == []
    assert cli("normalize", str(mutant(fixtures_root, "DF103-block-size-conflict")), "--check").code == 1
    refused(cli("normalize", str(draft), str(tmp_path / "x"), "--check"), 2, "--check writes nothing")


def test_dry_run_writes_nothing(cli, fixtures_root: Path, tmp_path: Path) -> None:
    draft = mutant(fixtures_root, "base")
    state = tree_state(draft)
    res = cli("normalize", str(draft), str(tmp_path / "o"), "--dry-run")
    assert res.code == 0, res.stderr
    assert res.stdout.count("\n+  ") + res.stdout.count("\n+    ") >= 2 and "nothing written" in res.stdout
    assert not (tmp_path / "o").exists() and list(tmp_path.iterdir()) == []
    assert cli("normalize", str(draft), "--dry-run", "--in-place").code == 0
    assert tree_state(draft) == state
    # a dry run still refuses an OUT the real run would refuse
    refused(cli("normalize", str(draft), str(draft / "x"), "--dry-run"), 2, "inside DRAFT")


def test_usage_errors(cli, fixtures_root: Path, tmp_path: Path) -> None:
    draft = str(mutant(fixtures_root, "base"))
    refused(cli("normalize", draft), 2, "give OUT")
    refused(cli("normalize", draft, str(tmp_path / "o"), "--in-place"), 2, "not both")
    refused(cli("normalize", draft, str(tmp_path / "o"), "--no-backup"), 2, "--no-backup only applies to --in-place")
    refused(cli("normalize", draft, "--in-place", "--copy"), 2, "--copy only applies to OUT")
    assert list(tmp_path.iterdir()) == []


def test_json_document_on_refusal(cli, fixtures_root: Path, tmp_path: Path) -> None:
    res = cli("normalize", str(mutant(fixtures_root, "DF103-block-size-conflict")), str(tmp_path / "o"), "--json")
    assert res.code == 1
    doc = res.merged()
    assert doc["ok"] is False and doc["exit_code"] == 1 and doc["written"] is False
    assert doc["error"]["code"] == "DF103" and "16 in dflash_config but 8" in doc["error"]["message"]
    assert doc["schema_version"] == 2 and doc["command"] == "normalize"
    # stdout is the document alone; the error line goes to stderr, for the log
    assert error_line(res).startswith(f"{mutant(fixtures_root, 'DF103-block-size-conflict')}/config.json: DF103 error: ")


def test_human_report(cli, fixtures_root: Path, tmp_path: Path) -> None:
    draft = fixtures_root / "drafts" / "Qwen3-4B-DFlash-b16"
    res = cli("normalize", str(draft), str(tmp_path / "o"))
    assert res.code == 0
    out = res.stdout
    assert f"--- {draft}/config.json" in out and f"+++ {tmp_path / 'o'}/config.json" in out
    assert '+    "block_size": 16,' in out and '+    "num_target_layers": 36,' in out
    assert "+ dflash_config.block_size = 16" in out
    assert re.search(r"lmdeploy 0\.18\s+│\s+no\s+│\s+yes\s+│\s+loads as is now; before it fails", out), out
    assert re.search(r"SGLang\s+│\s+yes\s+│\s+yes\s+│", out)
    assert "hard-linked" in out
    assert cli("normalize", str(draft), str(tmp_path / "q"), "-q").stdout == ""


def test_does_not_import_torch(tmp_path: Path, fixtures_root: Path) -> None:
    code = (
        "import sys; from dflash_ckpt.cli import run; "
        f"rc = run(['normalize', {str(fixtures_root / 'mutants' / 'base')!r}, {str(tmp_path / 'o')!r}, '-q']); "
        "assert rc == 0, rc; assert 'torch' not in sys.modules, 'torch imported'; print('ok')"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


def test_subprocess_cli_roundtrip(fixtures_root: Path, tmp_path: Path) -> None:
    res = run_cli("normalize", str(fixtures_root / "drafts" / "gpt-oss-20b-DFlash"), str(tmp_path / "o"), "--json")
    assert res.code == 0, res.stderr
    doc = res.merged()
    assert doc["layout_before"] == "top-level" and doc["layout_after"] == "nested"
    assert set(doc["resolved_after"]) == set(DFLASH_KEYS)


def test_progress_bar_follows_a_large_copy(cli, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import contextlib

    import dflash_ckpt.run.normalize as cmd
    import dflash_ckpt.canonical.build as build

    draft = small_draft(tmp_path / "d", shards=2)
    weights = sum((draft / f).stat().st_size for f in files_under(draft) if f.endswith(".safetensors"))
    seen: dict[str, int] = {"total": -1, "done": 0}

    @contextlib.contextmanager
    def recording(total: int) -> Any:
        seen["total"] = total
        yield lambda n: seen.__setitem__("done", seen["done"] + n)

    real = cmd._progress_bar
    monkeypatch.setattr(build, "PROGRESS_MIN_BYTES", 1)
    monkeypatch.setattr(cmd, "_progress_bar", recording)
    assert cli("normalize", str(draft), str(tmp_path / "o"), "--copy").code == 0
    assert seen == {"total": weights + (draft / "model.safetensors.index.json").stat().st_size, "done": seen["total"]}
    # below the threshold, or with -q / --json, there is no bar
    seen.update(total=-1, done=0)
    assert cli("normalize", str(draft), str(tmp_path / "q"), "--copy", "-q").code == 0
    assert seen["total"] == -1
    # the real rich bar runs (disabled when stderr is not a terminal) and prints nothing
    monkeypatch.setattr(cmd, "_progress_bar", real)
    res = cli("normalize", str(draft), str(tmp_path / "r"), "--copy")
    assert res.code == 0 and "copying" not in res.stderr


def test_bom_is_kept(cli, tmp_path: Path) -> None:
    draft = small_draft(tmp_path / "d")
    raw = (draft / "config.json").read_bytes()
    (draft / "config.json").write_bytes(b"\xef\xbb\xbf" + raw)
    assert cli("normalize", str(draft), str(tmp_path / "a")).code == 0
    once = (tmp_path / "a" / "config.json").read_bytes()
    assert once.startswith(b"\xef\xbb\xbf") and json.loads(once.decode("utf-8-sig"))["dflash_config"]["block_size"] == 8
    assert cli("normalize", str(tmp_path / "a"), str(tmp_path / "b")).code == 0
    assert (tmp_path / "b" / "config.json").read_bytes() == once
