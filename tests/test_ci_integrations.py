"""The pre-commit hook (.pre-commit-hooks.yaml) and the GitHub action (action.yml), run for real.

The hook is tried with ``pre-commit try-repo`` on a temporary git repository: pre-commit builds
the hook's environment by pip-installing this repository (from the package index, as a user's
pre-commit does), so the test is skipped where pre-commit is missing or that install fails.
The action's inspect step is run with bash as the runner would run it, its inputs in the env.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dflash_ckpt.precommit import folders_and_options

ROOT = Path(__file__).resolve().parents[1]
DRAFT = ROOT / "fixtures" / "tiny-pair" / "draft"
yaml = pytest.importorskip("yaml")


def test_hook_arguments_become_folders_and_options() -> None:
    argv = ["--strict", "drafts/a/config.json", "--select", "DF1", "drafts/b/config.json", "drafts/a/config.json", "config.json"]
    assert folders_and_options(argv) == (["drafts/a", "drafts/b", "."], ["--strict", "--select", "DF1"])
    assert folders_and_options(["--target", "targets/t/config.json"]) == ([], ["--target", "targets/t/config.json"])


def test_hook_paths_that_start_with_a_dash_are_files() -> None:
    """Issue 32: a draft in a folder named like an option is a file to inspect, never an option."""
    argv = ["--strict", "--token=x/config.json", "--revision=main/config.json", "--", "-q", "--select"]
    assert folders_and_options(argv) == (["--token=x", "--revision=main", "-q", "--select"], ["--strict"])


def test_hook_inspects_a_dash_folder_and_skips_a_config_that_holds_no_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                               capsys: pytest.CaptureFixture[str]) -> None:
    from dflash_ckpt.precommit import main

    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.chdir(tmp_path)
    bad = tmp_path / "--token=x"
    shutil.copytree(DRAFT, bad)
    cfg = json.loads((bad / "config.json").read_text())
    cfg["dflash_config"].pop("target_layer_ids")
    (bad / "config.json").write_text(json.dumps(cfg))
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "config.json").write_text('{"indent": 4, "lint": true}\n')
    assert main(["--strict", "-q", "--token=x/config.json", "tools/config.json"]) == 1
    out = capsys.readouterr()
    assert "--token=x/config.json: DF101 error: key 'target_layer_ids'" in out.out, out
    assert "tools" not in out.out and "skipped 1 config.json" in out.err
    assert main(["tools/config.json"]) == 0

def test_hook_definition() -> None:
    hooks = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    (hook,) = hooks
    assert hook["id"] == "dflash-ckpt-inspect" and hook["args"] == ["--strict"] and hook["pass_filenames"]
    assert hook["language"] == "python" and hook["entry"] == "dflash-ckpt-pre-commit"
    import re

    files = re.compile(hook["files"])
    assert files.search("drafts/x/config.json") and files.search("config.json")
    assert not files.search("drafts/x/generation_config.json") and not files.search("drafts/x/config.json.orig")
    scripts = (ROOT / "pyproject.toml").read_text()
    assert 'dflash-ckpt-pre-commit = "dflash_ckpt.precommit:main"' in scripts


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def _try_repo(repo: Path, home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PRE_COMMIT_HOME": str(home), "NO_COLOR": "1"}
    env.pop("PYTHONPATH", None)  # the hook runs the package pre-commit installed, not this checkout
    return subprocess.run([sys.executable, "-m", "pre_commit", "try-repo", str(ROOT), "dflash-ckpt-inspect"],
                          cwd=repo, env=env, capture_output=True, text=True, timeout=900)


@pytest.mark.slow
def test_pre_commit_try_repo(tmp_path: Path) -> None:
    pytest.importorskip("pre_commit")
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo, home = tmp_path / "repo", tmp_path / "pre-commit-home"
    repo.mkdir()
    _git(repo, "init", "-q")
    _git(repo, "config", "user.email", "t@example.com")
    _git(repo, "config", "user.name", "t")
    shutil.copytree(DRAFT, repo / "drafts" / "good")
    (repo / "README.md").write_text("drafts\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "drafts")

    # a staged change to a good draft's config: inspected, passes
    cfg_path = repo / "drafts" / "good" / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg_path.write_text(json.dumps(cfg, indent=4) + "\n")
    _git(repo, "add", "-A")
    res = _try_repo(repo, home)
    if "An unexpected error has occurred" in res.stdout + res.stderr or "CalledProcessError" in res.stdout + res.stderr:
        pytest.skip(f"pre-commit could not build the hook's environment here: {(res.stdout + res.stderr)[-400:]}")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "dflash-ckpt inspect" in res.stdout and "Passed" in res.stdout

    # a draft that lost its target_layer_ids (an error) and one missing num_target_layers (a
    # warning, which --strict fails); a README change is not the hook's business
    bad = repo / "drafts" / "lost-taps"
    shutil.copytree(DRAFT, bad)
    cfg = json.loads((bad / "config.json").read_text())
    cfg["dflash_config"].pop("target_layer_ids")
    (bad / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    warn = repo / "drafts" / "no-depth"
    shutil.copytree(DRAFT, warn)
    cfg = json.loads((warn / "config.json").read_text())
    cfg["dflash_config"].pop("num_target_layers", None)
    cfg.pop("num_target_layers", None)
    (warn / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    (repo / "README.md").write_text("drafts, changed\n")
    _git(repo, "add", "-A")
    res = _try_repo(repo, home)
    assert res.returncode == 1, res.stdout + res.stderr
    out = res.stdout
    assert "Failed" in out
    assert "drafts/lost-taps/config.json: DF101 error: key 'target_layer_ids'" in out and "dflash-ckpt probe-taps" in out
    assert "drafts/no-depth/config.json: DF102 warning:" in out, out


@pytest.mark.slow
def test_action_runs_inspect_with_github_annotations(tmp_path: Path) -> None:
    action = yaml.safe_load((ROOT / "action.yml").read_text())
    assert action["runs"]["using"] == "composite"
    assert set(action["inputs"]) >= {"drafts", "target", "args"} and action["inputs"]["drafts"]["required"]
    steps = action["runs"]["steps"]
    install = next(s for s in steps if s.get("name") == "Install dflash-ckpt")
    assert "pip install" in install["run"] and "GITHUB_ACTION_PATH" in install["run"]
    step = next(s for s in steps if s.get("name") == "Inspect")
    assert set(step["env"]) == {"DRAFTS", "TARGET", "ARGS", "SARIF", "HF_TOKEN_INPUT"} and "--output-format github" in step["run"]
    assert "${{" not in step["run"], "inputs reach the script through the environment only"
    assert {"token", "sarif"} <= set(action["inputs"])
    header = (ROOT / "action.yml").read_text().split("\nname:")[0]
    assert "lfs: true" in header and "upload-sarif" in header and "dflash-ckpt/dflash-ckpt@v0.1.0" in header

    # the step's script as the runner runs it (bash -e), with dflash-ckpt on PATH
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "dflash-ckpt"
    exe.write_text(f"#!/bin/sh\nexec {sys.executable} -m dflash_ckpt \"$@\"\n")
    exe.chmod(0o755)
    lost = tmp_path / "drafts" / "lost-taps"
    shutil.copytree(DRAFT, lost)
    cfg = json.loads((lost / "config.json").read_text())
    cfg["dflash_config"].pop("target_layer_ids")
    (lost / "config.json").write_text(json.dumps(cfg) + "\n")
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": str(ROOT),
           "DRAFTS": str(DRAFT), "TARGET": str(DRAFT.parent / "target"), "ARGS": "--strict"}
    summary = tmp_path / "step-summary.md"
    env["GITHUB_STEP_SUMMARY"], env["RUNNER_TEMP"] = str(summary), str(tmp_path)
    run = subprocess.run(["bash", "-e", "-c", step["run"]], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and run.stdout == "", run.stdout + run.stderr  # no notices unless asked
    # the report on the run's summary page: the verdict, the findings, the serve lines
    page = summary.read_text()
    assert page.startswith(f"# dflash-ckpt inspect: {DRAFT}\n\n**OK**") and "## Findings" in page and "## Serve it" in page
    env["ARGS"], env["SARIF"] = "--annotations all", str(tmp_path / "out.sarif")
    run = subprocess.run(["bash", "-e", "-c", step["run"]], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and run.stdout.startswith("::notice file="), run.stdout + run.stderr
    assert json.loads((tmp_path / "out.sarif").read_text())["version"] == "2.1.0"
    env["SARIF"] = ""
    env["DRAFTS"] = f"  {DRAFT}  \n\n{tmp_path / 'with space'}\n"  # one per line: a name may hold a space
    shutil.copytree(DRAFT, tmp_path / "with space")
    run = subprocess.run(["bash", "-e", "-c", step["run"]], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and run.stdout.count("::notice") == 2, run.stdout + run.stderr
    env["DRAFTS"], env["TARGET"], env["ARGS"] = f"{DRAFT}\n{lost}", "", "--select DF1"
    run = subprocess.run(["bash", "-e", "-c", step["run"]], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 1, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"::error file={lost}/config.json,title=DF101::key 'target_layer_ids'")
    # a pattern is no glob (set -f): a missing draft, exit 2, annotated as well
    env["DRAFTS"], env["ARGS"] = str(tmp_path / "drafts" / "lost*"), ""
    run = subprocess.run(["bash", "-e", "-c", step["run"]], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 2 and "title=DF001::no such folder" in run.stdout, run.stdout + run.stderr
    assert summary.read_text().count("# dflash-ckpt inspect: ") >= 3  # a failing run's report is added too


def test_one_canonical_repository_name_everywhere() -> None:
    """pyproject's [project.urls], the schema's $id, the hook, the action and the guide name the
    same repository, and no OWNER placeholder is left for a user to guess."""
    canonical = "github.com/dflash-ckpt/dflash-ckpt"
    tomllib = pytest.importorskip("tomllib")
    urls = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]
    assert urls and all(canonical in u for u in urls.values()), urls
    schema = json.loads((ROOT / "dflash_ckpt/schema/dflash-ckpt.schema.json").read_text())
    assert schema["$id"].startswith(f"https://{canonical}/")
    for name in ("README.md", "docs/ci.md", ".pre-commit-hooks.yaml", "action.yml"):
        text = (ROOT / name).read_text()
        assert canonical in text or "dflash-ckpt/dflash-ckpt@" in text, name
        assert "OWNER" not in text and "<owner>" not in text, name
    from dflash_ckpt._version import __version__

    tag = f"v{__version__}"  # the tag a user pins is the package's version
    assert f"rev: {tag}" in (ROOT / "README.md").read_text() and f"dflash-ckpt/dflash-ckpt@{tag}" in (ROOT / "action.yml").read_text()
