"""Prompts: chat template rendering as Hugging Face does it, JSONL files, stop tokens."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import tiny_models as tm
from dflash_ckpt.draftspec.specs import target_from_config
from dflash_ckpt.errors import InputError, UsageError
from dflash_ckpt.sources.chat_template import compile_template
from dflash_ckpt.sources.prompts import BUILTIN_PROMPTS, Prompt, PromptEncoder, read_prompts_file, stop_token_ids


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tok")
    tm.write_tokenizer(folder)
    return folder


def test_chat_template_renders_like_qwen3_without_thinking(tok_dir: Path) -> None:
    enc = PromptEncoder(tok_dir)
    text = enc.render(Prompt("p", "hello world"))
    assert text == "<|im_start|>user\nhello world<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    thinking = PromptEncoder(tok_dir, thinking=True).render(Prompt("p", "hello world"))
    assert thinking == "<|im_start|>user\nhello world<|im_end|>\n<|im_start|>assistant\n"
    ids = enc.encode(Prompt("p", "hello world"))
    assert ids[0] == enc.tokenizer.token_to_id("<|im_start|>") and enc.decode(ids) == text  # special tokens kept whole


def test_no_chat_template_feeds_text_as_is(tok_dir: Path) -> None:
    enc = PromptEncoder(tok_dir, chat_template=False)
    assert not enc.uses_template
    assert enc.decode(enc.encode(Prompt("p", "hello world"))) == "hello world"
    with pytest.raises(UsageError, match="needs the chat template"):
        enc.encode(Prompt("c", None, ({"role": "user", "content": "hi"},)))


def test_conversation_and_special_tokens(tmp_path: Path) -> None:
    tm.write_tokenizer(tmp_path, chat_template=(
        "{{ bos_token or '' }}{% for m in messages %}{% generation %}[{{ m['role'] }}]{% endgeneration %}"
        "{{ m['content'] | tojson }}{% if loop.last %}{% break %}{% endif %}{% endfor %}{{ eos_token }}"))
    enc = PromptEncoder(tmp_path)
    conv = Prompt("c", None, ({"role": "system", "content": "sé"}, {"role": "user", "content": "q"}))
    assert enc.render(conv) == '[system]"sé"[user]"q"<|im_end|>'  # tojson keeps non-ASCII, loopcontrols work


def test_template_errors_are_one_line(tmp_path: Path) -> None:
    tm.write_tokenizer(tmp_path, chat_template="{{ raise_exception('no system role') }}")
    with pytest.raises(InputError, match="chat template fails on prompt 'p': no system role"):
        PromptEncoder(tmp_path).render(Prompt("p", "x"))
    with pytest.raises(InputError, match="jinja syntax error at line 1"):
        compile_template("{% for %}")


def test_template_from_jinja_file_and_missing_tokenizer(tmp_path: Path) -> None:
    tm.write_tokenizer(tmp_path, chat_template=None)
    assert not PromptEncoder(tmp_path).uses_template
    (tmp_path / "chat_template.jinja").write_text("<<{{ messages[0]['content'] }}>>")
    assert PromptEncoder(tmp_path).render(Prompt("p", "x")) == "<<x>>"
    with pytest.raises(InputError, match=r"tokenizer.json: missing; .*--tokenizer"):
        PromptEncoder(tmp_path / "nowhere")


def test_prompts_file(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text('{"prompt": "a", "name": "first"}\n\n"bare"\n{"messages": [{"role": "user", "content": "m"}]}\n')
    got = read_prompts_file(str(path))
    assert [p.name for p in got] == ["first", "prompt-2", "prompt-3"]
    assert got[1].text == "bare" and got[2].conversation() == [{"role": "user", "content": "m"}]
    for body, msg in (
        ('{"prompt": 3}\n', r"p.jsonl:1: give 'prompt'"),
        ('{"prompt": "a"}\n{oops\n', r"p.jsonl:2: invalid JSON"),
        ('[1]\n', r"p.jsonl:1: each line must be a JSON object or string"),
        ('{"messages": [{"role": "user"}]}\n', r"p.jsonl:1: 'messages' must be"),
        ("\n", "no prompts"),
    ):
        path.write_text(body)
        with pytest.raises(InputError, match=msg):
            read_prompts_file(str(path))
    with pytest.raises(InputError, match="no such file"):
        read_prompts_file(str(tmp_path / "absent.jsonl"))


def test_builtin_prompts_cover_math_code_chat() -> None:
    assert [p.name for p in BUILTIN_PROMPTS] == ["math", "code", "chat"]


def test_stop_tokens_from_every_source(tmp_path: Path) -> None:
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [7, 8]}))
    assert stop_token_ids(tmp_path, target_from_config({"eos_token_id": 8, "text_config": {"eos_token_id": 9}}, label="t", where="t").eos_values, 10) == [7, 8, 9, 10]
    assert stop_token_ids(tmp_path / "none", [], None) == []
