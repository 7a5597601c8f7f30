"""The README tells the truth: its set-up lines are what CI runs, its rules table is the registry."""

from __future__ import annotations

import re

from pathlib import Path

import pytest

from conftest import ROOT, run_cli
from dflash_ckpt.rules import RULES
from readme_examples import DOCS, all_examples, run_example, shape

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
    fast, full = (line.split("&&")[-1].strip() for line in tests.strip().splitlines())
    assert fast == "python -m pytest -q", "the default run is the fast tier: pyproject's addopts deselect slow"
    assert full in CI and "-m \"slow or not slow\"" in full, "CI runs every tier, as the README's second line"
    assert "-m 'not slow'" in (ROOT / "pyproject.toml").read_text(), "the default run deselects the slow tier"


def test_quick_start_command_passes() -> None:
    setup = _bash_blocks(README)[0]
    args = setup.strip().split("&&")[-1].split()[1:]
    res = run_cli(*args)
    assert res.code == 0, res.stderr
    assert "OK  0 error(s)" in res.stdout


def test_rules_table_matches_the_registry() -> None:
    table = (DOCS / "rules.md").read_text()  # README links it: the rules table lives there
    assert "docs/rules.md" in README
    rows = dict(
        (m.group(1), (m.group(2), m.group(3), m.group(4)))
        for m in re.finditer(r"^\| (DF\d{3}) \| ([\w-]+) \| (\w+) \| (.+?) \|$", table, flags=re.M)
    )
    assert list(rows) == list(RULES)
    for code, rule in RULES.items():
        assert rows[code] == (rule.name, rule.severity.value, rule.summary)


EXAMPLES = all_examples()


def test_the_readme_shows_examples() -> None:
    """One example per command in README itself, the set-up command's output among them."""
    ours = [ex for ex in EXAMPLES if ex.file.name == "README.md"]
    assert {"inspect", "rules", "normalize", "smoke-run", "probe-taps"} <= {ex.argv[0] for ex in ours}
    setup = _bash_blocks(README)[0].strip().split("&&")[-1].strip()
    assert ours[0].command == setup, "the set-up line's output is the first example, and it is checked"


def test_the_readme_is_a_short_guide_that_links_its_reference() -> None:
    assert len(README.splitlines()) <= 300, len(README.splitlines())
    links = re.findall(r"\]\(((?:docs|benchmarks)/[^)#]+)\)", README)
    assert {"docs/rules.md", "docs/ci.md", "docs/limits.md", "docs/json.md", "docs/backends.md"} <= set(links)
    for link in links:
        assert (ROOT / link).exists(), link


def test_plain_fences_pair_in_order() -> None:
    """A ```bash block's closing fence is not the opening of a plain block: text between two
    blocks is never read as an example, and the plain block after it is."""
    from readme_examples import examples

    text = "```bash\nrun this\n```\n\nprose\n$ dflash-ckpt rules not-an-example\n\n```\n$ dflash-ckpt rules DF211\nout\n```\n"
    (ex,) = examples(text)
    assert ex.command == "dflash-ckpt rules DF211" and ex.output == "out\n"


def test_readme_examples_prints_and_does_not_rewrite(tmp_path: Path, fixtures_root: Path) -> None:
    from readme_examples import regenerate

    page = tmp_path / "page.md"
    page.write_text("Intro\n\n```\n$ dflash-ckpt rules DF211\nstale output\n```\n")
    before = page.read_text()
    fresh = regenerate(fixtures_root, page)
    assert page.read_text() == before and "stale output" not in fresh and "DF211 fc-shape (error)" in fresh
    main = (ROOT / "tests" / "readme_examples.py").read_text().split('if __name__ == "__main__":')[1]
    assert "write_text" in main and '"--write" in sys.argv' in main


@pytest.mark.parametrize("ex", [pytest.param(ex, marks=[pytest.mark.slow] if ex.timed else []) for ex in EXAMPLES],
                         ids=[f"{ex.file.name}: {' '.join(ex.argv)[:60]}" for ex in EXAMPLES])
def test_example_output_is_what_the_command_prints(ex, fixtures_root: Path) -> None:
    """Each ``$ dflash-ckpt ...`` block is the command's real output (`python tests/readme_examples.py`
    rewrites them); smoke-run's speeds differ run to run, so its figures are masked."""
    got = run_example(ex, fixtures_root)
    if ex.timed:
        assert shape(got) == shape(ex.output)
    else:
        assert got == ex.output


def test_shape_masks_what_the_cpu_path_moves() -> None:
    """A timed example holds on every CPU path (AVX2 kernel, oneDNN-packed, torch's own): the
    histogram's bar lengths and the header's path note are masked, its words and rows are not."""
    hist = ("acceptance lengths (tokens per step, bonus included) over 64 DFlash steps:\n"
            "   1 ███                  3\n   8 ████████████████████ 22\n")
    other = hist.replace("███                 ", "█████               ").replace(" 3\n", " 5\n")
    assert shape(hist) == shape(other)
    assert shape(hist) != shape(hist.replace("   8 ", "   9 ").replace("22", "22 extra"))
    assert shape(hist) != shape(hist.replace("acceptance lengths", "acceptance widths"))
    head = "fixtures/tiny-pair/draft on fixtures/tiny-pair/target  block 8  chat template on"
    assert (shape(head + "  AVX2 bf16 kernel (44, 0.03 s, not in any figure)\n")
            == shape(head + "  prepacked weights (44, 0.10 s, not in any figure)\n") == shape(head + "\n"))


def test_shape_reads_a_near_tie_as_the_cpu_paths() -> None:
    """An output matching with a near tie on one CPU path matches exactly on another: the table's
    cell, the overall count and the DF402 row are the path's, a DIFFERS is not."""
    tied = (" chat-14  │  64 │ tie      \n overall  │ 806 │ 16/16 match (1 tie) \n"
            "Findings\n code  ┃ severity ┃ message\n━━━━━━━╇━━━━━━━━━━╇━━━━━━━━\n"
            " DF402 │ info     │ chat-14: outputs part at position 12\n       │          │ a near tie\n"
            "PASS  tau 2.62, outputs match on 16/16 prompt(s) (1 tie)\n")
    same = " chat-14  │  64 │ same     \n overall  │ 806 │ 16/16 same \nPASS  tau 2.60, outputs match on 16/16 prompt(s)\n"
    assert shape(tied) == shape(same)
    assert shape(tied.replace("│ tie ", "│ DIFFERS ")) != shape(same)
