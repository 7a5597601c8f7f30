"""The prompt suites (``--suite``): their size and shape, the loader's errors, and that they ship
in the wheel with the published figures (sources/suites.py, dflash_ckpt/data/)."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from dflash_ckpt.errors import UsageError
from dflash_ckpt.sources.suites import ALL, CHOICES, SUITES, load_suite, suite_of, suite_prompts

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "dflash_ckpt" / "data"


@pytest.mark.parametrize("name", SUITES)
def test_each_suite_has_12_to_20_distinct_prompts(name: str) -> None:
    prompts = load_suite(name)
    assert 12 <= len(prompts) <= 20
    assert all(p == p.strip() and p for p in prompts)
    assert len(set(prompts)) == len(prompts)


def test_long_prompts_are_long_and_the_others_are_not() -> None:
    assert min(len(p) for p in load_suite("long")) > 1500
    assert max(len(p) for name in ("math", "code", "chat") for p in load_suite(name)) < 400


def test_no_prompt_is_in_two_suites_and_all_is_every_suite_in_order() -> None:
    every = [p for name in SUITES for p in load_suite(name)]
    assert load_suite(ALL) == every and len(set(every)) == len(every)
    assert CHOICES == ("math", "code", "chat", "long", "all")


def test_prompts_are_named_by_suite() -> None:
    rows = suite_prompts(ALL)
    assert rows[0][:2] == ("math", "math-01") and rows[-1][:2] == ("long", "long-12")
    assert len({name for _, name, _ in rows}) == len(rows)
    assert all(suite_of(name) == suite for suite, name, _ in rows)
    assert suite_of("prompt-1") is None and suite_of("math") is None and suite_of("maths-01") is None


def test_an_unknown_suite_is_one_usage_line() -> None:
    with pytest.raises(UsageError) as err:
        load_suite("maths")
    line = err.value.line()
    assert line == "dflash-ckpt: DF004 error: --suite must be one of math, code, chat, long, all, got 'maths'"
    assert err.value.exit_code == 2 and err.value.key == "--suite" and "\n" not in line


def test_suite_files_say_what_they_are() -> None:
    for name in SUITES:
        doc = json.loads((DATA / "suites" / f"{name}.json").read_text(encoding="utf-8"))
        assert set(doc) == {"suite", "description", "prompts"} and doc["suite"] == name
        assert "Written for dflash-ckpt" in doc["description"]


@pytest.mark.slow
def test_the_data_ships_in_the_wheel(tmp_path: Path) -> None:
    """setuptools puts the suites and the published figures in the wheel (package-data)."""
    pytest.importorskip("setuptools")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                           "-w", str(tmp_path), str(ROOT)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    [wheel] = tmp_path.glob("*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    want = {f"dflash_ckpt/data/suites/{name}.json" for name in SUITES} | {"dflash_ckpt/data/published_figures.json"}
    assert want <= names
