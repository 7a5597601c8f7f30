"""Claims in README.md prose that are no command's output, measured: fixture sizes, what the Hub
client is, and the rough edges the README promises (each one a test of the behaviour itself)."""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import run_cli
from readme_examples import guide_text

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
#: The whole user guide (README and docs/ pages): a claim is checked on whichever page holds it.
GUIDE = guide_text()
SOURCES = "\n".join(p.read_text() for p in (ROOT / "dflash_ckpt").rglob("*.py"))


def _sizes(root: Path) -> tuple[int, int]:
    """(apparent bytes, bytes allocated on disk) of every file below ``root``."""
    apparent = disk = 0
    for dirpath, _, files in os.walk(root):
        for name in files:
            st = os.lstat(os.path.join(dirpath, name))
            apparent += st.st_size
            disk += st.st_blocks * 512
    return apparent, disk


def test_fixture_sizes_match_the_readme(fixtures_root: Path) -> None:
    m = re.search(r"sparse data \((\d+(?:\.\d+)?) GiB on paper, (\d+(?:\.\d+)?) MiB on\s+disk", GUIDE)
    assert m, "the README states the built fixtures' size"
    apparent, disk = _sizes(fixtures_root)
    assert float(m.group(1)) == pytest.approx(apparent / 2**30, abs=0.5)
    # blocks allocated to sparse files depend a little on the file system: within 15%
    assert float(m.group(2)) == pytest.approx(disk / 2**20, rel=0.15)
    m = re.search(r"`fixtures/tiny-pair/` \((\d+(?:\.\d+)?) MiB\)", GUIDE)
    assert m, "the README states the tiny pair's size"
    assert float(m.group(1)) == pytest.approx(_sizes(ROOT / "fixtures" / "tiny-pair")[0] / 2**20, abs=0.06)


def test_the_hub_client_is_the_one_the_readme_names() -> None:
    """The README once said normalize/smoke-run call snapshot_download and inspect reads through
    huggingface_hub; neither is how the code fetches."""
    calls = [SOURCES[m.end():m.end() + 400] for m in re.finditer(r"\bsnapshot_download\(", SOURCES)]
    assert all("local_files_only=True" in call for call in calls), "snapshot_download only looks in the cache"
    hub = (ROOT / "docs" / "hub.md").read_text()
    assert "`snapshot_download`" not in hub and "through huggingface_hub" not in hub
    assert "own bounded HTTP client" in hub and (ROOT / "dflash_ckpt/sources/hub/download.py").exists()


def test_a_typo_beside_an_existing_folder_is_a_missing_folder_at_once(tmp_path: Path) -> None:
    """`drafts/Qwen3-8B-DFlash-b17` next to a real `drafts/` is a path: no Hub request, no retries."""
    (tmp_path / "drafts" / "Qwen3-8B-DFlash-b16").mkdir(parents=True)
    # a Hub endpoint that would make every request hang until its deadline
    env = {"HF_ENDPOINT": "http://10.255.255.1:9", "DFLASH_CKPT_HUB_RETRIES": "3", "HF_HUB_OFFLINE": "0"}
    for arg in ("drafts/Qwen3-8B-DFlash-b17", "./Qwen3-8B-DFlash-b17", "../x/y", "~/no/such"):
        start = time.perf_counter()
        res = run_cli("inspect", arg, env=env, cwd=tmp_path, timeout=60)
        assert time.perf_counter() - start < 20
        assert res.code == 2 and res.stdout == "", res
        assert res.stderr.strip() == f"{arg}: DF001 error: no such folder; give a local draft folder or a Hub repo id (org/name)"


def test_a_repo_id_whose_org_is_no_local_folder_is_still_a_repo_id() -> None:
    from dflash_ckpt.sources.resolve import looks_like_path

    assert not looks_like_path("z-lab/Qwen3-8B-DFlash-b16")
    assert looks_like_path("fixtures/nothing-here") and looks_like_path("./a") and looks_like_path("~/a/b")


def test_normalize_check_quiet_prints_one_line(fixtures_root: Path, tmp_path: Path) -> None:
    draft = tmp_path / "d"
    shutil.copytree(fixtures_root / "drafts" / "gpt-oss-20b-DFlash", draft)
    res = run_cli("normalize", str(draft), "--check", "-q")
    assert res.code == 1 and res.stderr == ""
    lines = res.stdout.splitlines()
    assert len(lines) == 1, res.stdout
    assert lines[0].startswith(f"{draft}/config.json: DF020 error: not canonical: normalize would make 2 change(s)")
    assert f"dflash-ckpt normalize {draft} --in-place" in lines[0]
    canonical = run_cli("normalize", str(ROOT / "fixtures/tiny-pair/draft"), "--check", "-q")
    assert canonical.code == 0 and canonical.stdout == ""
    full = run_cli("normalize", str(draft), "--check")
    assert full.code == 1 and lines[0] in full.stdout.splitlines(), "the report ends with the same line"


def test_missing_taps_name_probe_taps(fixtures_root: Path, tmp_path: Path) -> None:
    from dflash_ckpt.rules import RULES

    assert "dflash-ckpt probe-taps DRAFT --target TARGET --write OUT" in RULES["DF101"].fix
    draft = tmp_path / "d"
    shutil.copytree(ROOT / "fixtures/tiny-pair/draft", draft)
    cfg = json.loads((draft / "config.json").read_text())
    cfg["dflash_config"].pop("target_layer_ids")
    (draft / "config.json").write_text(json.dumps(cfg))
    doc = run_cli("inspect", str(draft), "--json").result()
    f = next(f for f in doc["findings"] if f["code"] == "DF101")
    assert f["key"] == "target_layer_ids" and f"`dflash-ckpt probe-taps {draft} --target TARGET --write OUT`" in f["message"]
    cfg = json.loads((ROOT / "fixtures/tiny-pair/draft/config.json").read_text())
    cfg["dflash_config"].pop("block_size")
    cfg.pop("block_size", None)
    (draft / "config.json").write_text(json.dumps(cfg))
    block = [f for f in run_cli("inspect", str(draft), "--json").result()["findings"] if f["code"] == "DF101"]
    assert [f["key"] for f in block] == ["block_size"] and "probe-taps" not in block[0]["message"], "probe-taps measures taps only"


@pytest.mark.slow
def test_smoke_run_refusal_names_probe_taps_and_prechecks_are_finding_lines(tmp_path: Path, fixtures_root: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("tokenizers")
    draft = tmp_path / "d"
    shutil.copytree(ROOT / "fixtures/tiny-pair/draft", draft)
    cfg = json.loads((draft / "config.json").read_text())
    cfg["dflash_config"].pop("target_layer_ids")
    (draft / "config.json").write_text(json.dumps(cfg))
    target = ROOT / "fixtures/tiny-pair/target"
    res = run_cli("smoke-run", str(draft), "--target", str(target))
    assert res.code == 1
    assert f"target_layer_ids is missing: measure it with dflash-ckpt probe-taps {draft} --target {target} --write OUT" in res.stdout
    # a warning of the pre-check (DF143: the fp16 twin's config dtype): the one finding shape
    fp16 = ROOT / "fixtures/tiny-pair/draft-fp16"
    res = run_cli("smoke-run", str(fp16), "--target", str(target), "-n", "8", "-p", "2+2=")
    # 8 tokens of one prompt: too little evidence for a verdict on tau (DF408, a warning, exit 0)
    assert res.code == 0 and "DF408" in res.stdout and "tau 1.40 from" in " ".join(res.stdout.split()), res.stdout
    pre = [line for line in res.stdout.splitlines() if " DF143 " in line]
    assert pre and all(re.match(rf"{re.escape(str(fp16))}\S*: DF143 warning: ", line) for line in pre), res.stdout
    assert "pre-check" not in res.stdout


def _summary_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if "DFlash" in line or "draft" in line]


@pytest.mark.parametrize("columns", ["60", "80", "100", "200"])
def test_several_drafts_never_split_a_name(fixtures_root: Path, columns: str) -> None:
    names = ["drafts/Qwen3-4B-DFlash-b16", "drafts/Qwen3.5-122B-A10B-DFlash", "drafts/Qwen3.8-27B-DFlash2",
             "mutants/DF212-missing-k-norm"]
    res = run_cli("inspect", *names, cwd=fixtures_root, env={"COLUMNS": columns})
    assert res.code == 1
    lines = res.stdout.splitlines()
    for name in names:
        assert any(name in line for line in lines), (name, res.stdout)
    assert all(len(line) <= int(columns) for line in lines if "DF212 error" not in line), res.stdout
    assert lines[-1].startswith("mutants/DF212-missing-k-norm: DF212 error: ")


@pytest.mark.parametrize("command", ["inspect", "rules", "normalize", "smoke-run", "probe-taps", ""])
@pytest.mark.parametrize("columns", ["80", "120"])
def test_help_reads_well_at_80_and_120_columns(command: str, columns: str) -> None:
    """No help line ends mid-sentence with room left on it: typer keeps the docstring's own breaks,
    so a docstring wrapped at 100 in the source left lines of 60-odd characters at 120."""
    res = run_cli(*([command] if command else []), "--help", env={"COLUMNS": columns})
    assert res.code == 0
    lines = res.stdout.splitlines()
    width = int(columns)
    assert all(len(line) <= width for line in lines), res.stdout
    start = next(i for i, line in enumerate(lines) if line.strip().startswith("Usage:"))
    prose = []
    for line in lines[start + 2:]:
        if line.startswith(("╭", "│", "╰")):
            break
        prose.append(line.rstrip())
    # a line followed by more prose must be filled: the next line's first word would have fitted
    for this, nxt in zip(prose, prose[1:]):
        if this.strip() and nxt.strip():
            first_word = nxt.split()[0]
            assert len(this) + 1 + len(first_word) > width - 2, f"broken early at {columns}: {this!r} / {nxt!r}"
    assert "<str>" not in next((line for line in lines if "--output-format" in line or "--backend" in line), "")


def test_shell_completion_completes_commands_and_choices() -> None:
    """Completion is on (typer's): the shell calls the program with _DFLASH_CKPT_COMPLETE set."""
    def complete(words: str) -> list[str]:
        env = {"_DFLASH_CKPT_COMPLETE": "complete_bash", "COMP_WORDS": words, "COMP_CWORD": str(len(words.split()) - (0 if words.endswith(" ") else 1))}
        res = run_cli(env=env)
        assert res.code == 0, res
        return res.stdout.split()

    assert complete("dflash-ckpt ins") == ["inspect"]
    assert set(complete("dflash-ckpt ")) >= {"inspect", "rules", "normalize", "smoke-run", "probe-taps"}
    assert complete("dflash-ckpt inspect --output-format ") == ["text", "json", "github", "sarif"]
    assert complete("dflash-ckpt smoke-run --backend ") == ["auto", "native", "transformers"]
    # The shell named on the line, not guessed from the process tree (shellingham finds no shell
    # above an xdist worker on some machines): typer's own switch for that.
    script = run_cli("--show-completion", "bash", env={"_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"})
    assert script.code == 0 and "_DFLASH_CKPT_COMPLETE=complete_bash" in script.stdout
