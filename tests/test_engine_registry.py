"""docs/DESIGN.md's claim about engines, held: an engine is one file (``checks/engines/<engine>.py``,
one ``Engine`` record) and one line in ``checks/engines/registry.py``, and every table keyed by an
engine (inspect's readers table, JSON ``readers``, ``--require-engines``, the serve lines) picks
it up with no other edit. And every record is complete: a title, a reader, a layout path, and
rules that exist in the one rules registry (``rule_tables/``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, config
from dflash_ckpt import rule_tables
from dflash_ckpt.checks.engines.reading import EnginePath, Verdict
from dflash_ckpt.checks.engines.record import Engine
from dflash_ckpt.checks.engines.registry import BY_KEY, ENGINES, READER_TITLES, READERS, SERVE_ENGINES, SERVING, TITLES
from dflash_ckpt.draftspec.specs import read_draft_spec, read_target_spec
from dflash_ckpt.rules import RULES
from dflash_ckpt.sources.resolve import open_source

#: A new engine, written as a newcomer would: one file, nothing else of the package edited.
TOY_ENGINE = '''
"""A toy engine: reads every key nested then top level, refuses a draft that sets toy_refuses."""

from dflash_ckpt.checks.engines.launch import ServeFacts
from dflash_ckpt.checks.engines.reading import NESTED_THEN_TOP, Reading, Verdict, one_plus_n_path
from dflash_ckpt.checks.engines.record import Engine


def judge(spec, target):
    r = Reading(spec)
    r.read("block_size", NESTED_THEN_TOP)
    r.read("mask_token_id", NESTED_THEN_TOP)
    r.read("target_layer_ids", NESTED_THEN_TOP, kind="list")
    if spec.config.get("toy_refuses"):
        r.problems.append("toy_refuses is set")
    return r.verdict()


def serve(f: ServeFacts) -> list[str]:
    return ["toy-serve", f.target, "--draft", f.draft, "--block", str(f.block)]


ENGINE = Engine("toy", "Toy Engine 1.0", judge, one_plus_n_path("its toy loader"), serve=serve, serve_rank=99)
'''

#: Runs the CLI with the registry as it reads once its one line is added (the file on disk is not
#: touched: the patched source is compiled in its place when the registry is first imported).
RUN_WITH_TOY = '''
import importlib.abc, importlib.util, sys
from pathlib import Path

NAME = "dflash_ckpt.checks.engines.registry"


class Loader(importlib.abc.Loader):
    def __init__(self, origin):
        self.origin = origin

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        src = Path(self.origin).read_text(encoding="utf-8")
        head = "from __future__ import annotations\\n"
        patched = src.replace(head, head + "\\nimport toy_engine\\n", 1)
        patched = patched.replace("\\n)\\n\\n#: Engine key", "\\n    toy_engine.ENGINE,\\n)\\n\\n#: Engine key", 1)
        assert patched.count("toy_engine") == 2, "the registry's shape changed: update RUN_WITH_TOY"
        exec(compile(patched, self.origin, "exec"), module.__dict__)


class Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name != NAME:
            return None
        real = importlib.machinery.PathFinder.find_spec(name, path)
        return importlib.util.spec_from_file_location(name, real.origin, loader=Loader(real.origin))


sys.meta_path.insert(0, Finder())
sys.argv = ["dflash-ckpt", *sys.argv[1:]]
from dflash_ckpt.entry import main
main()
'''


def test_every_engine_is_complete() -> None:
    assert len({e.key for e in ENGINES}) == len(ENGINES)
    for engine in ENGINES:
        assert isinstance(engine, Engine)
        assert engine.key and engine.title and callable(engine.judge) and callable(engine.path), engine.key
        assert all(code in RULES for code in engine.rules), (engine.key, engine.rules)
        if engine.serve is not None:
            assert engine.serve_rank, engine.key
    assert list(TITLES) == list(READER_TITLES) == [e.key for e in ENGINES] == [r.key for r in READERS]
    assert set(SERVE_ENGINES) == {e.key for e in ENGINES if e.serve} and len(SERVE_ENGINES) == len(
        {BY_KEY[k].serve_rank for k in SERVE_ENGINES})
    assert SERVE_ENGINES == ("vllm", "sglang", "lmdeploy", "tensorrt-llm")
    assert "speculators" not in SERVING and len(SERVING) == len(ENGINES) - 1


def test_each_engine_judges_and_paths_a_published_draft(fixtures_root: Path) -> None:
    spec = read_draft_spec(open_source(str(fixtures_root / "drafts/Qwen3-4B-DFlash-b16")))
    target = read_target_spec(open_source(str(fixtures_root / "targets/Qwen3-4B")))
    for engine in ENGINES:
        assert isinstance(engine.judge(spec, target), Verdict), engine.key
        assert isinstance(engine.path(spec), EnginePath), engine.key


def test_the_vllm_record_owns_its_rules() -> None:
    vllm = BY_KEY["vllm"]
    assert vllm.rules == tuple(row[0] for row in rule_tables.vllm.ROWS) == (*(f"DF42{i}" for i in range(10)), "DF430", "DF432")


def test_one_rules_registry() -> None:
    codes = [row[0] for rows in rule_tables.SUBJECTS.values() for row in rows]
    assert len(codes) == len(set(codes)) == len(RULES) and set(codes) == set(RULES)
    assert list(RULES) == sorted(RULES)
    claimed = [code for e in ENGINES for code in e.rules]
    assert len(claimed) == len(set(claimed))


def _run_with_toy(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "toy_engine.py").write_text(TOY_ENGINE, encoding="utf-8")
    script = tmp_path / "run_with_toy.py"
    script.write_text(RUN_WITH_TOY, encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT), os.environ.get("PYTHONPATH", "")]),
               COLUMNS="200", NO_COLOR="1")
    return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=300)


@pytest.fixture(scope="module")
def pair_paths(fixtures_root: Path) -> tuple[str, str]:
    return str(fixtures_root / "drafts/Qwen3-4B-DFlash-b16"), str(fixtures_root / "targets/Qwen3-4B")


@pytest.mark.slow
def test_a_new_engine_is_one_file_and_one_registry_line(pair_paths: tuple[str, str], tmp_path: Path) -> None:
    draft, target = pair_paths
    res = _run_with_toy(tmp_path, "inspect", draft, "--target", target, "--json", "--require-engines", "toy")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    result = doc["results"][0] if "results" in doc else doc
    assert result["readers"]["toy"] == {"loads": True, "reason": "loads as is", "fixed_by_normalize": False,
                                      "facts_versions": None}  # the toy states no versions
    assert list(result["readers"])[-1] == "toy"
    assert result["serve"]["toy"] == ["toy-serve", target, "--draft", draft, "--block", "16"]
    assert list(result["serve"])[-1] == "toy"

    text = _run_with_toy(tmp_path, "inspect", draft, "--target", target)
    assert text.returncode == 0, text.stderr
    assert any("Toy Engine 1.0" in line and "loads as is" in line for line in text.stdout.splitlines()), text.stdout
    assert f"  toy: toy-serve {target} --draft {draft} --block 16" in text.stdout.splitlines(), text.stdout


@pytest.mark.slow
def test_require_engines_names_the_new_engine(pair_paths: tuple[str, str], tmp_path: Path) -> None:
    draft = tmp_path / "draft"
    draft.mkdir()
    for f in Path(pair_paths[0]).iterdir():
        (draft / f.name).symlink_to(f)
    (draft / "config.json").unlink()
    (draft / "config.json").write_text(json.dumps({**config(Path(pair_paths[0])), "toy_refuses": True}), encoding="utf-8")
    res = _run_with_toy(tmp_path, "inspect", str(draft), "--require-engines", "toy", "--json")
    assert res.returncode == 1, res.stderr
    doc = json.loads(res.stdout)
    result = doc["results"][0] if "results" in doc else doc
    [f] = [f for f in result["findings"] if f["code"] == "DF144"]
    assert "toy (Toy Engine 1.0)" in f["message"] and "toy_refuses is set" in f["message"]
    unknown = _run_with_toy(tmp_path, "inspect", str(draft), "--require-engines", "nosuch")
    assert unknown.returncode == 2 and "toy" in unknown.stderr
