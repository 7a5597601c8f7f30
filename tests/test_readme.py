"""The README tells the truth: its set-up lines are what CI runs, its rules table is the registry."""

from __future__ import annotations

import re

from pathlib import Path

import pytest

from conftest import ROOT, run_cli
from dflash_ckpt.rules import RULES
from readme_examples import examples, run_example, shape

README = (ROOT / "README.md").read_text()
CI = (ROOT / ".ci" / "run").read_text()


def _bash_blocks(text: str) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", text, flags=re.S)


def test_setup_lines_are_what_ci_runs() -> None:
    setup, tests = _bash_blocks(README)[:2]
    steps = [s.strip() for s in setup.strip().split("&&")]
    assert steps[0].startswith("python3 -m venv")
    for step in steps[2:-1]:  # the pip installs
        assert step.replace("pip install", "python -m pip install -q") in CI, step
    assert steps[-1].startswith("dflash-ckpt inspect fixtures/tiny-pair/draft")
    test_cmd = tests.strip().split("&&")[-1].strip()
    assert test_cmd in CI


def test_quick_start_command_passes() -> None:
    setup = _bash_blocks(README)[0]
    args = setup.strip().split("&&")[-1].split()[1:]
    res = run_cli(*args)
    assert res.code == 0, res.stderr
    assert "OK  0 error(s)" in res.stdout


def test_rules_table_matches_the_registry() -> None:
    rows = dict(
        (m.group(1), (m.group(2), m.group(3), m.group(4)))
        for m in re.finditer(r"^\| (DF\d{3}) \| ([\w-]+) \| (\w+) \| (.+?) \|$", README, flags=re.M)
    )
    assert list(rows) == list(RULES)
    for code, rule in RULES.items():
        assert rows[code] == (rule.name, rule.severity.value, rule.summary)


EXAMPLES = examples(README)


def test_the_readme_shows_examples() -> None:
    commands = [ex.argv[0] for ex in EXAMPLES]
    assert {"inspect", "rules", "normalize", "smoke-run"} <= set(commands), commands


@pytest.mark.parametrize("ex", EXAMPLES, ids=[" ".join(ex.argv)[:60] for ex in EXAMPLES])
def test_example_output_is_what_the_command_prints(ex, fixtures_root: Path) -> None:
    """Each ``$ dflash-ckpt ...`` block is the command's real output (`python tests/readme_examples.py`
    rewrites them); smoke-run's speeds differ run to run, so its figures are masked."""
    got = run_example(ex, fixtures_root)
    if ex.timed:
        assert shape(got) == shape(ex.output)
    else:
        assert got == ex.output
