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

import itertools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from dflash_ckpt import limits
from dflash_ckpt.errors import InputError, UsageError
from dflash_ckpt.sources.files import read_capped, read_capped_text
from dflash_ckpt.sources.jsonfile import decode_json_bytes
from dflash_ckpt.sources.template_process import render_all

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


#: Speaker names of ShareGPT (``from``) and chat (``role``) turns, mapped to chat-template roles.
ROLE_ALIASES = {
    "human": "user", "user": "user",
    "gpt": "assistant", "assistant": "assistant", "chatgpt": "assistant", "bard": "assistant",
    "bing": "assistant", "model": "assistant",
    "system": "system",
}
CONVERSATION_SHAPE = (
    'a non-empty list of {"from": "human"|"gpt"|"system", "value": str} (ShareGPT) or '
    '{"role": "user"|"assistant"|"system", "content": str} turns'
)


def default_prompt_name(position: int) -> str:
    """The name of an unnamed prompt: its 1-based position among all prompts of the run, so that
    ``-p`` prompts and file lines are named alike (``prompt-1``, ``prompt-2``, ...)."""
    return f"prompt-{position}"


def parse_conversation(turns: Any, where: str, key: str) -> tuple[dict[str, str], ...]:
    """Chat turns from ``messages`` or ShareGPT ``conversations``, up to the last user turn.

    Either spelling of a turn is accepted (``from``/``value`` or ``role``/``content``). Trailing
    assistant turns are dropped: ShareGPT records carry the recorded reply, and the model is to
    write its own after the generation prompt.
    """
    shape = f"'{key}' must be {CONVERSATION_SHAPE}"
    if not isinstance(turns, list) or not turns:
        raise InputError(shape, code="DF002", path=where)
    out: list[dict[str, str]] = []
    for number, turn in enumerate(turns, 1):
        if not isinstance(turn, dict):
            raise InputError(f"{shape}; turn {number} is {type(turn).__name__}", code="DF002", path=where)
        speaker = turn.get("role", turn.get("from"))
        text = turn.get("content", turn.get("value"))
        if not isinstance(speaker, str) or not isinstance(text, str):
            raise InputError(f"{shape}; turn {number} has no speaker or no text", code="DF002", path=where)
        role = ROLE_ALIASES.get(speaker.lower())
        if role is None:
            raise InputError(
                f"'{key}' turn {number} is from {speaker!r}; use one of {', '.join(sorted(ROLE_ALIASES))}",
                code="DF002", path=where,
            )
        out.append({"role": role, "content": require_text(text, f"'{key}' turn {number}", path=where)})
    while out and out[-1]["role"] == "assistant":
        out.pop()
    if not any(t["role"] == "user" for t in out):
        raise InputError(f"'{key}' has no user (human) turn to answer", code="DF002", path=where)
    return tuple(out)


#: A line holding something other than blanks (what ``read_prompts_file`` turns into a prompt).
_PROMPT_LINE = re.compile(r"^[ \t\r\f\v]*\S", re.M)


def require_text(text: str, where: str = "", *, path: str | None = None) -> str:
    """``text`` if it is valid Unicode; a lone surrogate (``"\\ud800"`` in JSON, or invalid UTF-8
    from the command line, which Python carries as surrogates) is one DF002 line, not a
    TypeError from the tokenizer. ``where`` names the text in the message (``-p prompt 2``),
    ``path`` the file (and line) it came from."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        bad = text[err.start]
        what = f"the byte 0x{ord(bad) - 0xDC00:02X} (not UTF-8)" if 0xDC80 <= ord(bad) <= 0xDCFF else f"a lone surrogate U+{ord(bad):04X}"
        lead = f"{where}: " if where else ""
        raise InputError(f"{lead}the text holds {what} at character {err.start}; give valid UTF-8 text", code="DF002",
                         path=path) from None
    return text


def _require_count(count: int, where: str) -> None:
    if count > limits.MAX_PROMPTS:
        raise InputError(
            f"more than {limits.MAX_PROMPTS:,} prompts (each is decoded twice); split the file, "
            "a few dozen prompts measure a draft well", code="DF002", path=where)


def read_prompts_file(path: str, first_position: int = 1) -> list[Prompt]:
    """JSONL: per line an object with ``prompt`` (or ``text``), ``messages`` or ShareGPT
    ``conversations``, and optionally ``name`` (or ``id``); a bare JSON string is a prompt too.
    Blank lines are skipped. Unnamed prompts are named by position, counting from
    ``first_position`` (the prompts given before this file come first)."""
    text = read_capped_text(path, limits.MAX_PROMPTS_BYTES, what="prompts file")
    room = limits.MAX_PROMPTS - (first_position - 1)
    # counted before anything is parsed, stopping at the first line past the cap
    _require_count(first_position - 1 + sum(1 for _ in itertools.islice(_PROMPT_LINE.finditer(text), max(room, 0) + 1)), path)
    lines = text.splitlines()
    del text
    prompts: list[Prompt] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        item = decode_json_bytes(line.encode(), where)
        default_name = default_prompt_name(first_position + len(prompts))
        if isinstance(item, str):
            prompts.append(Prompt(default_name, require_text(item, path=where)))
            continue
        if not isinstance(item, dict):
            raise InputError(f"each line must be a JSON object or string, found {type(item).__name__}", code="DF002",
                             path=where)
        name = item.get("name", item.get("id"))
        if name is not None and not isinstance(name, (str, int)) or isinstance(name, bool):
            raise InputError(f"'name' must be a string (or an integer id), found {type(name).__name__}", code="DF002",
                             path=where)
        name = default_name if name is None else require_text(str(name), "'name'", path=where)
        if len(name) > 200:
            raise InputError(f"'name' has {len(name):,} characters; keep names under 200", code="DF002", path=where)
        text = item.get("prompt", item.get("text"))
        conv_key = "messages" if "messages" in item else "conversations" if "conversations" in item else None
        if conv_key is not None:
            prompts.append(Prompt(name, None, parse_conversation(item[conv_key], where, conv_key)))
        elif isinstance(text, str):
            prompts.append(Prompt(name, require_text(text, path=where)))
        else:
            raise InputError("give 'prompt' (a string), 'messages' or 'conversations' (a list)", code="DF002",
                             path=where)
    if not prompts:
        raise InputError("no prompts (one JSON object per line)", code="DF002", path=path)
    return prompts


def gather_prompts(texts: list[str], prompts_file: str | None) -> list[Prompt]:
    """``-p`` texts, then the file's prompts, named by position where unnamed; else the built-in set."""
    _require_count(len(texts), "-p")
    prompts = [Prompt(default_prompt_name(i), require_text(text, f"-p prompt {i}")) for i, text in enumerate(texts, 1)]
    if prompts_file:
        prompts += read_prompts_file(prompts_file, first_position=len(prompts) + 1)
    require_unique_names(prompts)
    return prompts or list(BUILTIN_PROMPTS)


def require_unique_names(prompts: list[Prompt]) -> None:
    """Names identify prompts in the report and the JSON, so each must be used once."""
    seen: set[str] = set()
    for p in prompts:
        if p.name in seen:
            raise UsageError(f"prompt name {p.name!r} is used twice; give each prompt its own \"name\"")
        seen.add(p.name)


def _read_json(path: Path, cap: int = limits.MAX_CONFIG_BYTES, items: int = limits.MAX_JSON_ITEMS) -> dict[str, Any]:
    """A tokenizer-side JSON file, read as inspect reads configs: absent is ``{}``; a folder, a FIFO,
    a device, too large, not UTF-8, too deep or not JSON is one line naming it."""
    if not (path.exists() or path.is_symlink()):
        return {}
    data = decode_json_bytes(read_capped(path, cap, what="JSON file"), str(path), max_items=items)
    return data if isinstance(data, dict) else {}


def _token_text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]
    return None


def _default_template(named: list[Any], where: Path) -> str:
    """The ``default`` one of a list of named chat templates (``[{"name": ..., "template": ...}]``),
    as transformers picks it. A list without one is refused (DF002) rather than run without any
    template: transformers refuses it too, and the run would measure prompts the model is never
    served. An entry whose name is not a string names nothing, and the line says what was ignored."""
    default = [t.get("template") for t in named if isinstance(t, dict) and t.get("name") == "default"]
    if default and isinstance(default[0], str):
        return default[0]
    names = [t.get("name") if isinstance(t, dict) else t for t in named]
    shown = ", ".join(repr(n) for n in names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    bad = [n for n in names if not isinstance(n, str)]
    ignored = f" ({len(bad)} not a string, ignored)" if bad else ""
    what = "a 'default' whose template is not a string" if default else "no template named 'default'"
    raise InputError(f"key 'chat_template' is a list of named templates with {what} (names: {shown or 'none'}"
                     f"{ignored}); name the chat template 'default', or run with --no-chat-template", code="DF002",
                     key="chat_template", path=where)


class PromptEncoder:
    """Tokenizer plus chat template of a model folder."""

    def __init__(self, folder: Path, *, chat_template: bool = True, thinking: bool = False) -> None:
        from tokenizers import Tokenizer

        path = folder / "tokenizer.json"
        if not (path.exists() or path.is_symlink()):
            raise InputError("missing; smoke-run needs the target's tokenizer.json (or give --tokenizer FOLDER)", code="DF001",
                             path=path)
        text = read_capped_text(path, limits.MAX_TOKENIZER_BYTES, what="tokenizer.json")
        try:
            self.tokenizer = Tokenizer.from_str(text)
        except Exception as err:  # tokenizers raises a bare Exception on malformed files
            raise InputError(f"cannot be read by tokenizers ({_short(err)})", code="DF002", path=path) from None
        del text
        self.folder = folder
        self.thinking = thinking
        config = {
            **_read_json(folder / "special_tokens_map.json"),
            **_read_json(folder / "tokenizer_config.json", limits.MAX_TOKENIZER_CONFIG_BYTES, limits.MAX_TOKENIZER_CONFIG_ITEMS),
        }
        self.special_tokens = {k: t for k in SPECIAL_TOKEN_KEYS if (t := _token_text(config.get(k))) is not None}
        extra = config.get("additional_special_tokens")
        if isinstance(extra, list):
            self.special_tokens["additional_special_tokens"] = [t for t in map(_token_text, extra) if t is not None]
        #: The file the chat template came from (tokenizer_config.json, chat_template.jinja/.json).
        self.template_file: Path | None = None
        self.template = self._find_template(config) if chat_template else None
        #: Renderings by prompt, made once each, in a child process (``template_process.render_all``), compiled there too.
        self._rendered: dict[tuple[str, str | None, str], str] = {}

    def _find_template(self, config: dict[str, Any]) -> str | None:
        self.template_file = self.folder / "tokenizer_config.json"  # where the template was found
        tpl = config.get("chat_template")
        if isinstance(tpl, list):  # named templates: [{"name": "default", "template": ...}, ...]
            tpl = _default_template(tpl, self.template_file)
        if isinstance(tpl, str):
            return tpl
        jinja_file = self.folder / "chat_template.jinja"
        if jinja_file.exists() or jinja_file.is_symlink():
            self.template_file = jinja_file
            return read_capped_text(jinja_file, limits.MAX_TEMPLATE_BYTES, what="chat template", code="DF002")
        self.template_file = self.folder / "chat_template.json"
        tpl = _read_json(self.template_file, limits.MAX_TEMPLATE_BYTES).get("chat_template")
        if isinstance(tpl, list):
            tpl = _default_template(tpl, self.template_file)
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
        self.prepare([prompt])
        return self._rendered[_key(prompt)]

    def prepare(self, prompts: list[Prompt]) -> None:
        """Render every prompt not rendered yet, all in one child process (``render_all``)."""
        if self.template is None:
            return
        todo = list({_key(p): p for p in prompts if _key(p) not in self._rendered}.values())
        if not todo:
            return
        contexts = [{
            "messages": p.conversation(), "tools": None, "documents": None, "add_generation_prompt": True,
            **self.special_tokens, "enable_thinking": self.thinking,
        } for p in todo]
        wheres = [f"the chat template fails on prompt {p.name!r}" for p in todo]
        for p, text in zip(todo, render_all(self.template, contexts, wheres, "chat template", path=str(self.folder))):
            self._rendered[_key(p)] = text

    def encode(self, prompt: Prompt) -> list[int]:
        text = require_text(self.render(prompt), f"prompt {prompt.name!r} after the chat template")
        if len(text) > limits.MAX_PROMPT_CHARS:
            raise InputError(
                f"prompt {prompt.name!r}: {len(text):,} characters after the template, more than the "
                f"{limits.MAX_PROMPT_CHARS:,} a prompt may have",
                code="DF002",
            )
        return list(self.tokenizer.encode(text, add_special_tokens=self.template is None).ids)

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False)


def _key(prompt: Prompt) -> tuple[str, str | None, str]:
    return prompt.name, prompt.text, repr(prompt.messages)


def stop_token_ids(folder: Path, config_eos: Sequence[Any], tokenizer_eos: int | None) -> list[int]:
    """Stop tokens: ``eos_token_id`` of generation_config.json, config.json's (``config_eos``: the
    values ``TargetSpec.eos_values`` decodes, each an int or a list) and the tokenizer's eos token."""
    ids: list[int] = []

    def add(value: Any) -> None:
        if isinstance(value, bool):
            return
        if isinstance(value, int):
            if 0 <= value < limits.MAX_VOCAB:  # a token id; anything else is no stop token
                ids.append(value)
        elif isinstance(value, list):
            for v in value:
                add(v)

    add(_read_json(folder / "generation_config.json").get("eos_token_id"))
    for value in config_eos:
        add(value)
    if tokenizer_eos is not None:
        add(tokenizer_eos)
    return list(dict.fromkeys(ids))


def _short(err: BaseException, limit: int = 200) -> str:
    text = " ".join(str(err).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
