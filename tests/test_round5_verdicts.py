"""Wrong verdicts and silent runs of the red-team's round 5 (issue 39, item 7 and two older cases).

- a local folder named like a published repo (``z-lab/Qwen3-4B-DFlash-b16/`` holding the tiny
  draft) was held to the 4B draft's published figures (and DF409): a draft is known by its
  weights' fingerprint only, never by a name;
- ``generation_config.json`` ``temperature: true`` ran as 1.0 and ``do_sample: "false"`` (a
  string) sampled: a value of the wrong type is one DF004 line naming the file and the key;
- ``probe-taps --layout-for`` (and ``--force``) without ``--write`` was ignored without a word:
  a usage error (exit 2), as typer would give for an option that needs another;
- a target whose ``chat_template`` is a list of named templates with no usable ``default``
  (names that are not strings) ran without any template: one DF002 line naming the file.

Every mutant is built here, from fixtures/tiny-pair and the fixtures_root build. The Hub kernel
named by a target config (DF321) is in tests/test_hf_hostile_target_config.py.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, one_error_line, smoke
from dflash_ckpt.checks.published import drafts, published_draft
from dflash_ckpt.draftspec.specs import read_draft_spec
from dflash_ckpt.errors import UsageError
from dflash_ckpt.run.sampling_settings import from_generation_config
from dflash_ckpt.sources.local import LocalSource

TINY = ROOT / "fixtures" / "tiny-pair"
ZLAB4 = "z-lab/Qwen3-4B-DFlash-b16"

pytestmark = pytest.mark.usefixtures("one_thread")


# -- published figures: the weights, never a name -----------------------------------------------


def _named_copy(src: Path, root: Path, name: str) -> Path:
    folder = root / name
    folder.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(src, folder)
    return folder


def test_a_folder_named_like_a_published_repo_is_not_that_draft(tmp_path: Path) -> None:
    folder = _named_copy(TINY / "draft", tmp_path, ZLAB4)
    assert published_draft(read_draft_spec(LocalSource(folder, label=ZLAB4))) is None


def test_the_published_weights_are_known_under_any_name(fixtures_root: Path, tmp_path: Path) -> None:
    folder = _named_copy(fixtures_root / "drafts" / "Qwen3-4B-DFlash-b16", tmp_path, "someone/renamed-copy")
    assert published_draft(read_draft_spec(LocalSource(folder))) == ZLAB4
    assert drafts()[ZLAB4]["fingerprint"].startswith("sha256:")


@pytest.mark.slow
def test_smoke_run_gives_a_look_alike_folder_no_published_figures(cli: Any, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Given as ``z-lab/Qwen3-4B-DFlash-b16`` (a relative folder, what the red team ran), the tiny
    draft is measured on its own: no published draft, no published figure beside a suite, no DF409."""
    _named_copy(TINY / "draft", tmp_path, ZLAB4)
    monkeypatch.chdir(tmp_path)
    res = smoke(cli, (ZLAB4, str(TINY / "target")), "--suite", "math", "-n", "8", "--min-acceptance", "0", "--json")
    assert res.code in (0, 1), res.stderr
    doc = json.loads(res.stdout)["results"][0]
    assert doc["settings"]["published_draft"] is None
    assert all(not s.get("published") and s.get("reference_tau") is None for s in doc["suites"].values()), doc["suites"]
    assert "DF409" not in {f["code"] for f in doc["findings"]}


# -- generation_config.json: types, named by file and key ----------------------------------------


@pytest.mark.parametrize(("config", "key", "found"), [
    ({"do_sample": True, "temperature": True}, "temperature", "True (bool)"),
    ({"do_sample": "false", "temperature": 0.7}, "do_sample", "'false' (str)"),
    ({"do_sample": 1, "temperature": 0.7}, "do_sample", "1 (int)"),
    ({"do_sample": True, "top_p": "0.9"}, "top_p", "'0.9' (str)"),
    ({"do_sample": True, "top_k": 20.0}, "top_k", "20.0 (float)"),
    ({"do_sample": True, "top_k": [20]}, "top_k", "[20] (list)"),
])
def test_a_generation_config_value_of_the_wrong_type_is_refused(cli: Any, tmp_path: Path, config: dict[str, Any],
                                                               key: str, found: str) -> None:
    target = _named_copy(TINY / "target", tmp_path, "target")
    (target / "generation_config.json").write_text(json.dumps(config))
    res = smoke(cli, (str(TINY / "draft"), str(target)), "--sampling", "generation-config", "-n", "4")
    line = one_error_line(res, f"key '{key}' must be", found, "--temperature", code="DF004",
                          path=str(target / "generation_config.json"))
    assert "loading" not in res.stderr, line  # refused before anything is loaded


def test_generation_config_ranges_name_the_key_and_null_is_absent() -> None:
    with pytest.raises(UsageError) as err:
        from_generation_config({"do_sample": True, "temperature": float("nan")}, where="t/generation_config.json")
    assert err.value.path == "t/generation_config.json" and err.value.key == "temperature"
    assert err.value.text.startswith("key 'temperature' is nan: must be a finite number >= 0"), err.value.text
    with pytest.raises(UsageError, match="key 'top_k' is -5: must be an integer >= 0"):
        from_generation_config({"do_sample": True, "top_k": -5})
    nulls = from_generation_config({"do_sample": True, "temperature": None, "top_p": None, "top_k": None})
    assert (nulls.temperature, nulls.top_p, nulls.top_k) == (1.0, 1.0, 50)  # transformers' defaults
    assert from_generation_config({"do_sample": False, "temperature": 0.6}).greedy
    assert from_generation_config({"do_sample": None}).greedy


# -- probe-taps: an option that only changes --write ---------------------------------------------


@pytest.mark.parametrize(("args", "needle"), [
    (("--layout-for", "vllm"), "--layout-for vllm: names the engines whose layout key --write records"),
    (("--layout-for", "vllm", "--layout-for", "specforge"), "--layout-for vllm specforge:"),
    (("--force",), "--force: replaces --write's OUT folder"),
])
def test_probe_taps_refuses_write_options_without_write(cli: Any, args: tuple[str, ...], needle: str) -> None:
    res = cli("probe-taps", str(TINY / "draft"), "--target", str(TINY / "target"), *args)
    one_error_line(res, needle, "give --write OUT too", code="DF004")


def test_the_api_refuses_layout_for_without_write() -> None:
    from dflash_ckpt.api import probe_taps

    with pytest.raises(UsageError, match="--layout-for vllm: names the engines"):
        probe_taps(str(TINY / "draft"), target=str(TINY / "target"), layout_for="vllm")


# -- a list of named chat templates without a default ---------------------------------------------


@pytest.mark.parametrize(("templates", "needles"), [
    ([{"name": 7, "template": "X {{ messages[0].content }}"}], ("no template named 'default'", "names: 7",
                                                                "1 not a string, ignored")),
    ([{"name": ["default"], "template": "X"}, {"name": "tool_use", "template": "Y"}],
     ("no template named 'default'", "names: ['default'], 'tool_use'", "1 not a string, ignored")),
    ([{"name": "default", "template": 42}], ("a 'default' whose template is not a string",)),
    ([], ("no template named 'default'", "names: none")),
])
def test_a_named_template_list_without_a_default_is_one_line(cli: Any, tmp_path: Path, templates: list[Any],
                                                            needles: tuple[str, ...]) -> None:
    target = _named_copy(TINY / "target", tmp_path, "target")
    cfg = json.loads((target / "tokenizer_config.json").read_text())
    cfg["chat_template"] = templates
    (target / "tokenizer_config.json").write_text(json.dumps(cfg))
    res = smoke(cli, (str(TINY / "draft"), str(target)), "-n", "4")
    one_error_line(res, "key 'chat_template' is a list of named templates", *needles, "--no-chat-template",
                   code="DF002", path=str(target / "tokenizer_config.json"))


@pytest.mark.slow
def test_the_named_list_runs_with_no_chat_template_or_a_default(cli: Any, tmp_path: Path) -> None:
    """The way out the line names works, and a list with a string ``default`` runs with it."""
    target = _named_copy(TINY / "target", tmp_path, "target")
    cfg = json.loads((target / "tokenizer_config.json").read_text())
    template = cfg.get("chat_template")
    assert isinstance(template, str)
    cfg["chat_template"] = [{"name": 7, "template": "X"}]
    (target / "tokenizer_config.json").write_text(json.dumps(cfg))
    plain = smoke(cli, (str(TINY / "draft"), str(target)), "-n", "4", "--no-chat-template", "--min-acceptance", "0")
    assert plain.code == 0, plain.stderr
    cfg["chat_template"] = [{"name": 7, "template": "X"}, {"name": "default", "template": template}]
    (target / "tokenizer_config.json").write_text(json.dumps(cfg))
    named = smoke(cli, (str(TINY / "draft"), str(target)), "-n", "4", "--min-acceptance", "0", "--json")
    assert named.code == 0, named.stderr
    assert json.loads(named.stdout)["results"][0]["settings"]["chat_template"] is True
