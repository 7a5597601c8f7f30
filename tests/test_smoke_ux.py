"""What ``smoke-run`` tells a user beyond pass/fail: the prompt format as a cause of low
acceptance, the table's legend, the generated text, prompt names, ShareGPT files, a block above
the trained one, and ``-n`` past the target's positions. All through the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import tiny_models as tm
from conftest import ROOT, no_traceback, smoke
from dflash_ckpt.commands.smoke_report import COLUMN_LEGEND, COLUMNS
from dflash_ckpt.errors import InputError
from dflash_ckpt.sources.prompts import parse_conversation

FAST = ["-n", "12", "--draft-dtype", "float32"]
TINY = ROOT / "fixtures" / "tiny-pair"

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """A random (untrained) draft: tau stays near 1, so DF403 fires."""
    draft, target = tm.make_pair(tmp_path_factory.mktemp("pair"))
    return str(draft), str(target)


def df403(doc: dict) -> str:
    [msg] = [f["message"] for f in doc["findings"] if f["code"] == "DF403"]
    return msg


@pytest.mark.slow
def test_low_tau_names_the_prompt_format_when_it_may_be_the_cause(cli, pair) -> None:
    default = df403(smoke(cli, pair, *FAST, "--json").merged())
    assert "target_layer_ids" in default and "prompt format" not in default
    # three prompts of one's own: the fewest a verdict on tau needs (below them DF408, no DF403)
    own = ("-p", "hello", "-p", "good morning", "-p", "how are you")
    plain = df403(smoke(cli, pair, *FAST, "--json", *own, "--no-chat-template").merged())
    assert "target_layer_ids [1, 3, 5]" in plain  # the taps stay the first suspect
    assert "the prompt format may also explain it" in plain and "chat template is off" in plain
    assert "prompts 'prompt-1', 'prompt-2', 'prompt-3'" in plain and "your own (-p/--prompts)" in plain
    thinking = df403(smoke(cli, pair, *FAST, "--json", "--thinking").merged())
    assert "--thinking renders the template with enable_thinking true" in thinking
    assert "your own" not in thinking  # the built-in prompts
    templated = df403(smoke(cli, pair, *FAST, "--json", "-p", "<|im_start|>user\nhi<|im_end|>", *own[2:]).merged())
    assert "already hold chat-template tokens" in templated
    human = smoke(cli, pair, *FAST, "--no-chat-template")
    assert human.code == 1 and "prompt format" in human.stdout


def test_legend_explains_every_column(cli, pair) -> None:
    out = smoke(cli, pair, *FAST, "--min-acceptance", "0", "-p", "hi").stdout
    header = next(line for line in out.splitlines() if "┃" in line)
    assert [c.strip() for c in header.split("┃")] == list(COLUMNS) == list(COLUMN_LEGEND)
    assert "T = target only, D = DFlash" in out
    for col in COLUMNS[1:]:  # every column but the prompt's name has its line in the legend
        assert any(line.startswith(col + " ") and COLUMN_LEGEND[col][:30] in line for line in out.splitlines()), col


def test_generated_text_in_json_and_with_show_text(cli) -> None:
    args = ["smoke-run", str(TINY / "draft"), "--target", str(TINY / "target"), "-n", "10", "-p", "hello there"]
    doc = cli(*args, "--json").merged()
    [p] = doc["prompts"]
    assert p["output_text"] and p["output_text"] == p["target_output_text"]
    assert "hello there" in p["input_text"] and p["input_text"].startswith("<|im_start|>user")
    plain = cli(*args).stdout
    assert p["output_text"].splitlines()[0] not in plain
    shown = cli(*args, "--show-text").stdout
    assert "prompt-1 DFlash output (10 tokens):" in shown
    assert all("  " + line in shown for line in p["output_text"].splitlines())
    assert "target-only output" not in shown  # printed only where the two differ


def test_prompt_names_and_sharegpt_conversations(cli, pair, tmp_path: Path) -> None:
    file = tmp_path / "chats.jsonl"
    file.write_text("\n".join(json.dumps(x) for x in [
        {"conversations": [{"from": "human", "value": "hello"}, {"from": "gpt", "value": "recorded reply"}]},
        {"name": "mine", "conversations": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"}]},
        "hello",
        {"messages": [{"role": "user", "content": "hello"}]},
    ]) + "\n")
    doc = smoke(cli, pair, "-n", "2", "--min-acceptance", "0", "--json", "-p", "hello", "--prompts", str(file)).merged()
    prompts = doc["prompts"]
    assert [p["name"] for p in prompts] == ["prompt-1", "prompt-2", "mine", "prompt-4", "prompt-5"]
    ids = [p["input_ids"] for p in prompts]
    # the ShareGPT record is its first human turn (the recorded reply dropped): the same input as -p
    assert ids[0] == ids[1] == ids[3] == ids[4] and ids[2] != ids[0]
    assert prompts[1]["messages"] == [{"role": "user", "content": "hello"}]
    assert prompts[2]["messages"][0] == {"role": "system", "content": "be brief"}
    dup = tmp_path / "dup.jsonl"
    dup.write_text('{"name": "prompt-1", "prompt": "x"}\n')
    res = smoke(cli, pair, "-p", "hello", "--prompts", str(dup))
    assert res.code == 2 and "prompt name 'prompt-1' is used twice" in res.stderr and res.stderr.count("\n") == 1


def test_conversation_shapes_and_errors() -> None:
    conv = parse_conversation([{"from": "System", "value": "s"}, {"from": "human", "value": "q"},
                               {"from": "gpt", "value": "a"}, {"from": "human", "value": "q2"},
                               {"from": "chatgpt", "value": "a2"}], "f:1", "conversations")
    assert [t["role"] for t in conv] == ["system", "user", "assistant", "user"]
    for turns, msg in (
        ([], "must be a non-empty list"),
        ([{"from": "human"}], "turn 1 has no speaker or no text"),
        ([{"from": "robot", "value": "x"}], "turn 1 is from 'robot'; use one of"),
        ([{"from": "gpt", "value": "x"}], "no user \\(human\\) turn"),
        (["text"], "turn 1 is str"),
    ):
        with pytest.raises(InputError, match=msg):
            parse_conversation(turns, "f:1", "conversations")


def test_block_size_above_the_trained_one_warns(cli, pair) -> None:
    doc = smoke(cli, pair, *FAST, "--min-acceptance", "0", "--json", "--block-size", "12", "-p", "hi").merged()
    assert doc["exit_code"] == 0 and doc["settings"]["block_size"] == 12 and doc["settings"]["trained_block_size"] == 8
    [f] = doc["findings"]
    assert f["code"] == "DF405" and f["severity"] == "warning" and "trained block_size 8" in f["message"]
    same = smoke(cli, pair, *FAST, "--min-acceptance", "0", "--json", "--block-size", "6", "-p", "hi").merged()
    assert same["findings"] == []


def test_max_new_tokens_past_the_target_positions_is_a_usage_error(cli, pair) -> None:
    res = smoke(cli, pair, "-n", "5000", "-p", "hi")
    assert res.code == 2 and res.stdout == "" and res.stderr.count("\n") == 1, res.stderr
    assert "-n/--max-new-tokens 5000" in res.stderr and "max_position_embeddings 4096" in res.stderr
    prompt_len = len(smoke(cli, pair, "-n", "1", "--json", "-p", "hi").merged()["prompts"][0]["input_ids"])
    assert f"({prompt_len} tokens)" in res.stderr and f"use -n {4096 - prompt_len - 8} or less" in res.stderr


def test_position_check_boundary() -> None:
    from dflash_ckpt.runtime.plan import require_positions_fit
    from dflash_ckpt.errors import UsageError
    from dflash_ckpt.sources.prompts import Prompt

    prompts, encoded = [Prompt("a", "x"), Prompt("b", "y")], [[1] * 10, [1] * 30]
    require_positions_fit(prompts, encoded, 62, 8, 100, "t/config.json")  # 30 + 62 + 8 = 100 fits
    with pytest.raises(UsageError, match=r"prompt 'b' \(30 tokens\) .* needs 101 positions, past max_position_embeddings 100 of t/config.json; use -n 62 or less"):
        require_positions_fit(prompts, encoded, 63, 8, 100, "t/config.json")
    with pytest.raises(UsageError, match="shorten the prompt"):
        require_positions_fit(prompts, encoded, 1, 8, 35, "t/config.json")


def test_missing_run_extra_names_the_clone_install(cli, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "jinja2" else real(name, *a))
    res = cli("smoke-run", "somewhere", "--target", "elsewhere")
    no_traceback(res)
    assert res.code == 2 and res.stderr.count("\n") == 1
    assert "smoke-run needs jinja2" in res.stderr and 'pip install -e ".[run]"' in res.stderr
    assert "--index-url https://download.pytorch.org/whl/cpu" in res.stderr
    readme = (ROOT / "README.md").read_text()
    assert 'pip install -e ".[run]"' in readme and "--index-url https://download.pytorch.org/whl/cpu" in readme


@pytest.mark.slow
def test_a_suite_runs_its_prompts_by_name_and_reports_tau_per_suite(cli) -> None:
    """``--suite code``: the package's code prompts (``code-01``...), with the chat template as
    for any prompt, tau per suite with its interval in the report and in JSON ``suites``."""
    pair = (str(TINY / "draft"), str(TINY / "target"))
    doc = smoke(cli, pair, "--suite", "code", "-n", "16", "--json").merged()
    names = [p["name"] for p in doc["prompts"]]
    assert names[0] == "code-01" and len(names) >= 12 and all(n.startswith("code-") for n in names)
    assert doc["settings"]["suite"] == "code" and doc["settings"]["custom_prompts"] is False
    assert doc["settings"]["chat_template"] is True and doc["settings"]["published_draft"] is None
    code = doc["suites"]["code"]
    assert code["prompts"] == len(names) and code["steps"] == doc["overall"]["steps"] and code["published"] == []
    assert code["ci95"][0] <= code["tau"] <= code["ci95"][1] and code["ci95"] == doc["overall"]["tau_ci95"]
    text = " ".join(smoke(cli, pair, "--suite", "code", "-n", "16").stdout.split())
    assert "tau by suite (95% interval, clustered by prompt)" in text and " code " in text


def test_a_suite_with_prompts_or_an_unknown_suite_is_one_usage_line(cli) -> None:
    pair = (str(TINY / "draft"), str(TINY / "target"))
    both = smoke(cli, pair, "--suite", "math", "-p", "hi")
    assert both.code == 2 and both.stderr.count("\n") == 1 and "DF004" in both.stderr and "--suite math" in both.stderr
    unknown = smoke(cli, pair, "--suite", "poems")
    assert unknown.code == 2 and "math, code, chat, long, all" in unknown.stderr and unknown.stderr.count("\n") == 1
