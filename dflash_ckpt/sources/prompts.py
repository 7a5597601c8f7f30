"""Prompts: the built-in set, JSONL files, and turning them into token ids.

Tokenisation uses ``tokenizer.json`` through ``tokenizers``. The chat template is rendered the way
Hugging Face's ``apply_chat_template`` renders it: a sandboxed jinja2 environment with
``trim_blocks`` and ``lstrip_blocks``, the ``loopcontrols`` extension, a ``tojson`` filter that
keeps non-ASCII text, ``raise_exception`` and ``strftime_now`` globals, the ``{% generation %}``
tag, and the variables ``messages``, ``tools`` (None), ``documents`` (None),
``add_generation_prompt`` (True), the special tokens (``bos_token``, ``eos_token``, ...) and
``enable_thinking`` (False unless ``--thinking``). The rendered text is encoded without adding
special tokens, as ``apply_chat_template(tokenize=True)`` does; without a template the text is
encoded with them (``tokenizer(text)``), which adds Llama's BOS.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from dflash_ckpt.errors import InputError, UsageError
from dflash_ckpt.sources.jsonfile import decode_json_bytes

SPECIAL_TOKEN_KEYS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


@dataclass(frozen=True)
class Prompt:
    """A user prompt (``text``) or a whole conversation (``messages``)."""

    name: str
    text: str | None = None
    messages: tuple[dict[str, str], ...] | None = None

    def conversation(self) -> list[dict[str, str]]:
        if self.messages is not None:
            return [dict(m) for m in self.messages]
        return [{"role": "user", "content": self.text or ""}]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "text": self.text, "messages": list(self.messages) if self.messages else None}


#: The default set: one prompt each of math, code and chat, where DFlash's acceptance differs
#: (the paper reports the highest on math, the lowest on open chat).
BUILTIN_PROMPTS: tuple[Prompt, ...] = (
    Prompt("math", "A train leaves at 9:40 and covers 210 km at an average speed of 84 km/h. "
                   "At what time does it arrive? Reason step by step and give the final answer."),
    Prompt("code", "Write a Python function `fib(n)` that returns the n-th Fibonacci number "
                   "iteratively, with a docstring and two doctests."),
    Prompt("chat", "Give me three practical tips for staying focused while working from home, "
                   "one sentence each."),
)


def read_prompts_file(path: str) -> list[Prompt]:
    """JSONL: per line an object with ``prompt`` (or ``text``) or ``messages``, and optionally
    ``name``; a bare JSON string is a prompt too. Blank lines are skipped."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as err:
        from dflash_ckpt.sources.base import describe_os_error

        raise InputError(describe_os_error(err, path), code="DF001") from None
    except UnicodeDecodeError:
        raise InputError(f"{path}: not UTF-8 text", code="DF001") from None
    prompts: list[Prompt] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        item = decode_json_bytes(line.encode(), where)
        default_name = f"{Path(path).stem}-{len(prompts) + 1}"
        if isinstance(item, str):
            prompts.append(Prompt(default_name, item))
            continue
        if not isinstance(item, dict):
            raise InputError(f"{where}: each line must be a JSON object or string, found {type(item).__name__}", code="DF002")
        name = item.get("name", item.get("id", default_name))
        name = str(name)
        text = item.get("prompt", item.get("text"))
        messages = item.get("messages")
        if messages is not None:
            if (not isinstance(messages, list) or not messages
                    or not all(isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in messages)):
                raise InputError(f"{where}: 'messages' must be a non-empty list of {{\"role\": str, \"content\": str}}", code="DF002")
            prompts.append(Prompt(name, None, tuple({"role": m["role"], "content": m["content"]} for m in messages)))
        elif isinstance(text, str):
            prompts.append(Prompt(name, text))
        else:
            raise InputError(f"{where}: give 'prompt' (a string) or 'messages' (a list)", code="DF002")
    if not prompts:
        raise InputError(f"{path}: no prompts (one JSON object per line)", code="DF002")
    return prompts


def _read_json(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    data = decode_json_bytes(path.read_bytes(), str(path))
    return data if isinstance(data, dict) else {}


def _token_text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]
    return None


class PromptEncoder:
    """Tokenizer plus chat template of a model folder."""

    def __init__(self, folder: Path, *, chat_template: bool = True, thinking: bool = False) -> None:
        from tokenizers import Tokenizer

        path = folder / "tokenizer.json"
        if not path.exists():
            raise InputError(f"{path}: missing; smoke-run needs the target's tokenizer.json (or give --tokenizer FOLDER)", code="DF001")
        try:
            self.tokenizer = Tokenizer.from_file(str(path))
        except Exception as err:  # tokenizers raises a bare Exception on malformed files
            raise InputError(f"{path}: cannot be read by tokenizers ({err})", code="DF002") from None
        self.folder = folder
        self.thinking = thinking
        config = {**_read_json(folder / "special_tokens_map.json"), **_read_json(folder / "tokenizer_config.json")}
        self.special_tokens = {k: t for k in SPECIAL_TOKEN_KEYS if (t := _token_text(config.get(k))) is not None}
        extra = config.get("additional_special_tokens")
        if isinstance(extra, list):
            self.special_tokens["additional_special_tokens"] = [t for t in map(_token_text, extra) if t is not None]
        self.template = self._find_template(config) if chat_template else None
        self._compiled = None

    def _find_template(self, config: dict[str, Any]) -> str | None:
        tpl = config.get("chat_template")
        if isinstance(tpl, list):  # named templates: [{"name": "default", "template": ...}, ...]
            named = {t.get("name"): t.get("template") for t in tpl if isinstance(t, dict)}
            tpl = named.get("default")
        if isinstance(tpl, str):
            return tpl
        jinja_file = self.folder / "chat_template.jinja"
        if jinja_file.exists():
            return jinja_file.read_text(encoding="utf-8")
        tpl = _read_json(self.folder / "chat_template.json").get("chat_template")
        return tpl if isinstance(tpl, str) else None

    @property
    def uses_template(self) -> bool:
        return self.template is not None

    @property
    def eos_token_id(self) -> int | None:
        eos = self.special_tokens.get("eos_token")
        return self.tokenizer.token_to_id(eos) if isinstance(eos, str) else None

    def render(self, prompt: Prompt) -> str:
        """The text the model sees: the rendered chat template, or the prompt itself."""
        if self.template is None:
            if prompt.messages is not None:
                raise UsageError(f"prompt {prompt.name!r} is a conversation ('messages'); it needs the chat template")
            return prompt.text or ""
        if self._compiled is None:
            self._compiled = compile_template(self.template)
        import jinja2

        try:
            return self._compiled.render(
                messages=prompt.conversation(), tools=None, documents=None, add_generation_prompt=True,
                **self.special_tokens, enable_thinking=self.thinking,
            )
        except jinja2.TemplateError as err:
            raise InputError(f"{self.folder}: the chat template fails on prompt {prompt.name!r}: {err}", code="DF002") from None

    def encode(self, prompt: Prompt) -> list[int]:
        text = self.render(prompt)
        return list(self.tokenizer.encode(text, add_special_tokens=self.template is None).ids)

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False)


def compile_template(source: str) -> Any:
    """A jinja2 template compiled in the environment Hugging Face uses for chat templates."""
    import jinja2
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class GenerationTag(Extension):
        """``{% generation %}...{% endgeneration %}`` marks assistant text; rendered as is."""

        tags = {"generation"}

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.Scope(body, lineno=lineno)

    def raise_exception(message: str) -> None:
        raise jinja2.TemplateError(message)

    def tojson(x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None, sort_keys: bool = False) -> str:
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt: str) -> str:
        return datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    try:
        return env.from_string(source)
    except jinja2.TemplateSyntaxError as err:
        raise InputError(f"chat template: jinja syntax error at line {err.lineno}: {err.message}", code="DF002") from None


def stop_token_ids(folder: Path, config: dict[str, Any], tokenizer_eos: int | None) -> list[int]:
    """Stop tokens: ``eos_token_id`` of generation_config.json and config.json (int or list,
    ``text_config`` included), and the tokenizer's eos token."""
    ids: list[int] = []

    def add(value: Any) -> None:
        if isinstance(value, bool):
            return
        if isinstance(value, int):
            ids.append(value)
        elif isinstance(value, list):
            for v in value:
                add(v)

    add(_read_json(folder / "generation_config.json").get("eos_token_id"))
    add(config.get("eos_token_id"))
    text = config.get("text_config")
    if isinstance(text, dict):
        add(text.get("eos_token_id"))
    if tokenizer_eos is not None:
        add(tokenizer_eos)
    return list(dict.fromkeys(ids))
