"""Prompts and chat templates against the issue-18 attacker: formatting and filters that build
gigabytes in one call, a list as a named template's name, invalid UTF-8 and lone surrogates in
prompts, and a prompts file of millions of tiny prompts."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, error_line, no_traceback, smoke

from dflash_ckpt import limits
from dflash_ckpt.errors import InputError

PAIR = ROOT / "fixtures" / "tiny-pair"

#: Each cost 1.8 to 4 GB and exited 0 before (issue 18).
HOSTILE_TEMPLATES = {
    "format-filter-width": '{{ "%999999999d"|format(1) }}',
    "str-format-nested-width": '{{ ("{0:>{1}}"*200).format("a", 4000000) }}',
    "replace-doubling": '{% set ns = namespace(s="ab") %}{% for i in range(40) %}{% set ns.s = ns.s|replace("a", "aa") %}{% endfor %}{{ ns.s|length }}',
    "join": '{% set s = "ab"*1000 %}{{ (s*2000)|join(s) }}',
    "tilde-doubling": '{% set ns = namespace(s="x") %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}',
    "indent": '{{ ("a\\n"*1000)|indent(4000000) }}',
    "percent-star": '{{ "%*d" % (999999999, 1) }}',
    "percent-width": '{{ "%999999999d" % 1 }}',
    "center": '{{ "a"|center(3000000) * 3 }}',
}
BENIGN = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}<|im_start|>assistant\n"

#: Renders one prompt through the encoder (what smoke-run does before loading any model) and
#: prints the error line and the peak RSS of this process and of its children, in KiB.
RENDER_ONE = """
import resource, sys
from pathlib import Path
from dflash_ckpt.errors import InputError
from dflash_ckpt.sources.prompts import Prompt, PromptEncoder
enc = PromptEncoder(Path(sys.argv[1]))
try:
    print("ok", len(enc.encode(Prompt("p", "hello"))))
except InputError as err:
    print("error", err.line())
# VmHWM, not RUSAGE_SELF: that keeps the high-water mark of the pytest process this was forked from
hwm = next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM:'))
print(max(hwm, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))
"""


def tokenizer_folder(folder: Path, template: Any) -> Path:
    folder.mkdir(parents=True)
    shutil.copy(PAIR / "target" / "tokenizer.json", folder)
    cfg = json.loads((PAIR / "target" / "tokenizer_config.json").read_text())
    cfg["chat_template"] = template
    (folder / "tokenizer_config.json").write_text(json.dumps(cfg))
    return folder


def render_in_child(folder: Path) -> tuple[list[str], int]:
    proc = subprocess.run([sys.executable, "-c", RENDER_ONE, str(folder)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    *lines, peak = proc.stdout.strip().splitlines()
    return lines, int(peak)


@pytest.fixture(scope="module")
def normal_peak(tmp_path_factory: pytest.TempPathFactory) -> int:
    lines, peak = render_in_child(tokenizer_folder(tmp_path_factory.mktemp("benign") / "tok", BENIGN))
    assert lines[0].startswith("ok"), lines
    return peak


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(HOSTILE_TEMPLATES))
def test_hostile_template_is_one_line_within_memory(tmp_path: Path, normal_peak: int, name: str) -> None:
    lines, peak = render_in_child(tokenizer_folder(tmp_path / "tok", HOSTILE_TEMPLATES[name]))
    assert len(lines) == 1 and lines[0].startswith("error "), lines
    assert "DF002 error:" in lines[0] and "chat template" in lines[0]
    assert peak - normal_peak < 300 * 1024, f"{name}: {(peak - normal_peak) // 1024} MiB above a benign rendering"


def test_hostile_template_under_smoke_run_is_one_line(cli: Any, tmp_path: Path) -> None:
    target = tmp_path / "target"
    shutil.copytree(PAIR / "target", target)
    cfg = json.loads((target / "tokenizer_config.json").read_text())
    cfg["chat_template"] = HOSTILE_TEMPLATES["format-filter-width"]
    (target / "tokenizer_config.json").write_text(json.dumps(cfg))
    res = smoke(cli, (str(PAIR / "draft"), str(target)), "--max-new-tokens", "2", "--device", "cpu")
    assert res.code == 2, res.stderr
    assert "DF002" in error_line(res) and "chat template" in error_line(res)


@pytest.mark.parametrize("name", [["default"], 7, {"a": 1}, None])
def test_a_named_template_with_a_name_that_is_not_a_string_names_nothing(tmp_path: Path, name: Any) -> None:
    from dflash_ckpt.sources.prompts import Prompt, PromptEncoder

    folder = tokenizer_folder(tmp_path / "tok", [{"name": name, "template": "NAMED {{ messages[0].content }}"},
                                                 {"name": "default", "template": "DEFAULT {{ messages[0].content }}"}])
    enc = PromptEncoder(folder)
    assert enc.render(Prompt("p", "hi")) == "DEFAULT hi"
    folder2 = tokenizer_folder(tmp_path / "tok2", [{"name": name, "template": "X"}])
    with pytest.raises(InputError) as err:  # no default: refused (issue 39), never run without a template
        PromptEncoder(folder2)
    assert err.value.code == "DF002" and "no template named 'default'" in err.value.text
    assert "1 not a string, ignored" in err.value.text and "--no-chat-template" in err.value.text


def test_all_prompts_render_in_one_child_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import dflash_ckpt.sources.prompts as prompts
    import dflash_ckpt.sources.template_process as template_process

    forks: list[int] = []
    real_fork = template_process.os.fork
    monkeypatch.setattr(template_process.os, "fork", lambda: forks.append(1) or real_fork())
    enc = prompts.PromptEncoder(tokenizer_folder(tmp_path / "tok", BENIGN))
    batch = [prompts.Prompt(f"p{i}", f"hello {i}") for i in range(5)]
    enc.prepare(batch)
    assert len(forks) == 1
    assert [enc.render(p) for p in batch] == [f"<|im_start|>user\nhello {i}<|im_end|>\n<|im_start|>assistant" for i in range(5)]
    assert enc.encode(batch[0]) and len(forks) == 1  # rendered once, reused


def test_a_hostile_prompt_in_a_batch_names_that_prompt(tmp_path: Path) -> None:
    from dflash_ckpt.errors import InputError
    from dflash_ckpt.sources.prompts import Prompt, PromptEncoder

    tpl = '{% if messages[0].content == "boom" %}{{ "%999999999d"|format(1) }}{% endif %}ok'
    enc = PromptEncoder(tokenizer_folder(tmp_path / "tok", tpl))
    with pytest.raises(InputError, match="prompt 'second'") as info:
        enc.prepare([Prompt("first", "fine"), Prompt("second", "boom"), Prompt("third", "fine")])
    assert info.value.code == "DF002"


@pytest.mark.slow
def test_invalid_utf8_in_a_command_line_prompt_is_one_line(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "dflash_ckpt", "smoke-run", str(PAIR / "draft"), "--target",
                           str(PAIR / "target"), "-p", os.fsdecode(b"\xff\xfe"), "--device", "cpu"],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    assert "DF002 error:" in line and "-p prompt 1" in line and "0xFF (not UTF-8)" in line


@pytest.mark.parametrize("record, where", [
    ('{"prompt": "\\ud800"}', "U+D800"),
    ('"ok \\udfff"', "U+DFFF"),
    ('{"messages": [{"role": "user", "content": "a\\ud800b"}]}', "turn 1"),
    ('{"name": "\\udc00", "prompt": "fine"}', "'name'"),
], ids=["prompt", "bare-string", "messages", "name"])
def test_a_lone_surrogate_in_a_prompts_file_is_one_line(cli: Any, tmp_path: Path, record: str, where: str) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text(record + "\n")
    res = smoke(cli, (str(PAIR / "draft"), str(PAIR / "target")), "--prompts", str(path), "--device", "cpu")
    assert res.code == 2, res.stderr
    line = error_line(res)
    assert f"{path}:1" in line and "DF002" in line and where in line


def test_millions_of_tiny_prompts_are_refused_by_count(cli: Any, tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    path.write_bytes(b'"a"\n' * 4_000_000)  # 16 MiB, under the byte cap
    assert path.stat().st_size < limits.MAX_PROMPTS_BYTES
    res = smoke(cli, (str(PAIR / "draft"), str(PAIR / "target")), "--prompts", str(path), "--device", "cpu")
    assert res.code == 2, res.stderr
    assert f"more than {limits.MAX_PROMPTS:,} prompts" in error_line(res)


def test_the_count_cap_includes_command_line_prompts(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from dflash_ckpt.errors import InputError
    from dflash_ckpt.sources.prompts import gather_prompts

    monkeypatch.setattr(limits, "MAX_PROMPTS", 3)
    path = tmp_path / "p.jsonl"
    path.write_text('"a"\n\n"b"\n')
    assert len(gather_prompts(["x"], str(path))) == 3  # blank lines are not prompts
    with pytest.raises(InputError, match="more than 3 prompts"):
        gather_prompts(["x", "y"], str(path))
    with pytest.raises(InputError, match="more than 3 prompts"):
        gather_prompts(["x"] * 4, None)
