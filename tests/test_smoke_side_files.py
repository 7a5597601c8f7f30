"""smoke-run's side files (tokenizer, its config, generation_config, chat templates, prompts files)
are read as inspect reads configs, and chat templates render within CPU-time and size limits.
Every hostile input is built here; each must end in one ``InputError`` line, quickly."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import tiny_models as tm
from dflash_ckpt import limits
from dflash_ckpt.errors import InputError
from dflash_ckpt.sources.prompts import Prompt, PromptEncoder, read_prompts_file, stop_token_ids

BIG_INT = "9" * 5000


@pytest.fixture(autouse=True)
def no_hang() -> Iterator[None]:
    """A read that blocks (a FIFO opened the plain way) fails the test instead of hanging it."""
    def hung(signum: int, frame: Any) -> None:
        raise AssertionError("blocked: the file was opened without checking what it is")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(20)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


@pytest.fixture(scope="module")
def tok_src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tok")
    tm.write_tokenizer(folder)
    return folder


def _folder(tmp_path: Path, tok_src: Path) -> Path:
    d = tmp_path / "tok"
    d.mkdir()
    for f in tok_src.iterdir():
        (d / f.name).write_bytes(f.read_bytes())
    return d


def _hostile(path: Path, kind: str) -> None:
    if path.exists():
        path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    elif kind == "dev-zero":
        os.symlink("/dev/zero", path)
    elif kind == "not-utf8":
        path.write_bytes(b'{"a": "\xff\xfe"}')
    elif kind == "big-int":
        path.write_text('{"eos_token_id": %s, "chat_template": "x"}' % BIG_INT)
    elif kind == "nested":
        path.write_text('{"a": ' + "[" * 500 + "]" * 500 + "}")
    elif kind == "too-large":
        with open(path, "wb") as fh:  # sparse
            fh.truncate(limits.MAX_TOKENIZER_BYTES + 1)
    else:
        raise AssertionError(kind)


NEEDLES = {
    "fifo": "named pipe (FIFO)", "folder": "is a folder", "dev-zero": "character device",
    "not-utf8": "not UTF-8", "big-int": "4300 digits", "nested": "nested too deep", "too-large": "too large",
}


def _one_line(err: pytest.ExceptionInfo[InputError], path: Path, needle: str) -> None:
    msg = str(err.value)
    assert "\n" not in msg and str(path) in msg and needle in msg, msg


@pytest.mark.parametrize("kind", ["fifo", "folder", "dev-zero", "not-utf8", "too-large", "nested"])
def test_tokenizer_json(tmp_path: Path, tok_src: Path, kind: str) -> None:
    d = _folder(tmp_path, tok_src)
    _hostile(d / "tokenizer.json", kind)
    with pytest.raises(InputError) as err:
        PromptEncoder(d)
    needle = "cannot be read by tokenizers" if kind == "nested" else NEEDLES[kind]
    _one_line(err, d / "tokenizer.json", needle)


@pytest.mark.parametrize("name", ["tokenizer_config.json", "special_tokens_map.json", "chat_template.json"])
@pytest.mark.parametrize("kind", ["fifo", "folder", "dev-zero", "not-utf8", "big-int", "nested"])
def test_tokenizer_side_json(tmp_path: Path, tok_src: Path, name: str, kind: str) -> None:
    d = _folder(tmp_path, tok_src)
    if name == "chat_template.json":
        (d / "tokenizer_config.json").write_text('{"eos_token": "<|im_end|>"}')  # the template comes from the file
    _hostile(d / name, kind)
    with pytest.raises(InputError) as err:
        PromptEncoder(d)
    _one_line(err, d / name, NEEDLES[kind])


@pytest.mark.parametrize("kind", ["fifo", "folder", "dev-zero", "not-utf8"])
def test_chat_template_jinja(tmp_path: Path, tok_src: Path, kind: str) -> None:
    d = _folder(tmp_path, tok_src)
    (d / "tokenizer_config.json").write_text('{"eos_token": "<|im_end|>"}')
    _hostile(d / "chat_template.jinja", kind)
    with pytest.raises(InputError) as err:
        PromptEncoder(d)
    _one_line(err, d / "chat_template.jinja", NEEDLES[kind])


@pytest.mark.parametrize("kind", ["fifo", "folder", "dev-zero", "big-int", "nested"])
def test_generation_config(tmp_path: Path, kind: str) -> None:
    _hostile(tmp_path / "generation_config.json", kind)
    with pytest.raises(InputError) as err:
        stop_token_ids(tmp_path, [], None)
    _one_line(err, tmp_path / "generation_config.json", NEEDLES[kind])


def test_stop_ids_outside_any_vocabulary_are_dropped(tmp_path: Path) -> None:
    (tmp_path / "generation_config.json").write_text('{"eos_token_id": [2, -1, %d, 7]}' % 10**40)
    assert stop_token_ids(tmp_path, [2**70], None) == [2, 7]


@pytest.mark.parametrize("kind", ["fifo", "folder", "dev-zero", "not-utf8"])
def test_prompts_file(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "prompts.jsonl"
    _hostile(path, kind)
    with pytest.raises(InputError) as err:
        read_prompts_file(str(path))
    _one_line(err, path, NEEDLES[kind])


@pytest.mark.parametrize("line, needle", [
    ('{"prompt": "x", "name": %s}' % BIG_INT, "4300 digits"),
    ('{"prompt": ' + "[" * 500 + "]" * 500 + "}", "nested too deep"),
    ('{"prompt": "x", "name": {"a": 1}}', "'name' must be a string"),
    ('{"prompt": "x", "name": "%s"}' % ("n" * 300), "keep names under 200"),
])
def test_prompts_file_lines(tmp_path: Path, line: str, needle: str) -> None:
    path = tmp_path / "prompts.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(InputError) as err:
        read_prompts_file(str(path))
    _one_line(err, path, needle)


TEMPLATES = {
    "string-times-huge": ("{{ 'a' * 10000000000 }}", "'*' would build"),
    "list-times-huge": ("{{ ([1] * 10000000000)|length }}", "'*' would build"),
    "power": ("{{ 10 ** 100000000 }}", "'**' with exponent"),
    "center-method": ("{{ 'a'.center(10000000000) }}", "calling center"),
    "center-filter": ("{{ 'a'|center(10000000000) }}", "calling"),
    "format-width": ("{{ '{:>99999999}'.format('x') }}", "width of a million"),
    "percent-width": ("{{ '%99999999s' % 'x' }}", "width of a million"),
    "replace-growth": ("{% set s = 'a' * 100000 %}{{ s.replace('a', 'a' * 100) }}", "str.replace would build"),
    "doubling": ("{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s|length }}",
                 "'+' would build"),
    "output-size": ("{% for i in range(100000) %}{{ 'x' * 60 }}{% endfor %}", "output passed"),
    "division": ("{{ 1 / 0 }}", "ZeroDivisionError"),
    "type-error": ("{{ messages + 1 }}", "TypeError"),
    "sandbox": ("{{ ''.__class__.__mro__ }}", "SecurityError"),
    "undefined": ("{{ messages[0].nope.deeper }}", "UndefinedError"),
    "recursion": ("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "recursion too deep"),
    "raise": ("{{ raise_exception('refused') }}", "refused"),
}


@pytest.mark.parametrize("case", sorted(TEMPLATES))
def test_template_failures_are_one_line(tmp_path: Path, tok_src: Path, case: str) -> None:
    source, needle = TEMPLATES[case]
    d = _folder(tmp_path, tok_src)
    (d / "tokenizer_config.json").write_text('{"eos_token": "<|im_end|>"}')
    (d / "chat_template.jinja").write_text(source)
    enc = PromptEncoder(d)
    with pytest.raises(InputError) as err:
        enc.render(Prompt("p", "hi"))
    msg = str(err.value)
    assert "\n" not in msg and needle in msg and "prompt 'p'" in msg and str(d) in msg, msg


def test_template_cpu_time_limit(tmp_path: Path, tok_src: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "TEMPLATE_CPU_SECONDS", 0.3)
    d = _folder(tmp_path, tok_src)
    (d / "tokenizer_config.json").write_text('{"eos_token": "<|im_end|>"}')
    (d / "chat_template.jinja").write_text(
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}done")
    with pytest.raises(InputError, match=r"more than 0.3 s of CPU time"):
        PromptEncoder(d).render(Prompt("p", "hi"))


def test_a_good_template_still_renders(tmp_path: Path, tok_src: Path) -> None:
    d = _folder(tmp_path, tok_src)
    (d / "tokenizer_config.json").write_text('{"eos_token": "<|im_end|>"}')
    (d / "chat_template.jinja").write_text(
        "{% for m in messages %}<{{ m['role'] }}>{{ m['content']|trim }}{{ '-' * 3 }}{% endfor %}"
        "{{ '%s!' % 'ok' }}{{ 'a,b'.replace(',', ';') }}{{ ' '.join(['x', 'y']) }}{{ 2 ** 10 }}")
    assert PromptEncoder(d).render(Prompt("p", " hi ")) == "<user>hi---ok!a;bx y1024"
