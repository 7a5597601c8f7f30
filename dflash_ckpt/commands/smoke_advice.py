"""What ``smoke-run`` checks and says about its own settings, apart from the runs themselves.

Pure functions, no torch: the prompt format (a likely cause of low acceptance besides the taps),
a ``--block-size`` above the trained block (DF405), and prompts that would run past the target's
positions (a usage error before any weight is loaded).
"""

from __future__ import annotations

from typing import Any, Sequence

from dflash_ckpt.errors import UsageError
from dflash_ckpt.rules import Finding, finding
from dflash_ckpt.sources.prompts import Prompt


def special_token_texts(special_tokens: dict[str, Any]) -> list[str]:
    """The text of every special token a tokenizer names (``bos``, ``eos``, additional ones)."""
    out: list[str] = []
    for value in special_tokens.values():
        for text in value if isinstance(value, list) else [value]:
            if isinstance(text, str) and text:
                out.append(text)
    return out


def prompt_format_causes(
    prompts: Sequence[Prompt],
    *,
    chat_template: bool,
    thinking: bool,
    custom: bool,
    special_tokens: Sequence[str] = (),
) -> list[str]:
    """Ways in which the prompts differ from the chat format DFlash drafts are trained on.

    Drafts are trained on the target's replies to chat-formatted prompts (thinking off for the
    published Qwen3 drafts), so acceptance measured on text in another format is lower for
    reasons that have nothing to do with the checkpoint.
    """
    causes: list[str] = []
    plain = [p.name for p in prompts if p.text is not None and not any(t in p.text for t in special_tokens)]
    if not chat_template and plain:
        causes.append(f"the chat template is off (--no-chat-template, or the target has none), so {_names(plain)} "
                      "went in as plain text, not in the target's chat format")
    if chat_template and thinking:
        causes.append("--thinking renders the template with enable_thinking true, while published DFlash "
                      "drafts are trained on replies with thinking off")
    if chat_template:
        twice = [p.name for p in prompts if p.text is not None and any(t in p.text for t in special_tokens)]
        if twice:
            causes.append(f"{_names(twice)} already hold chat-template tokens and were templated again "
                          "(pass such text with --no-chat-template)")
    if custom:
        causes.append("the prompts are your own (-p/--prompts), and acceptance depends on how close they are "
                      "to the draft's training data")
    return causes


def prompt_format_note(causes: Sequence[str]) -> str:
    """The sentence DF403 adds when the prompt format may explain low acceptance ('' if not)."""
    if not causes:
        return ""
    return ("; the prompt format may also explain it: " + "; ".join(causes)
            + "; rerun without -p/--prompts, --no-chat-template and --thinking to tell the two apart")


def block_size_findings(block_size: int, trained: int) -> list[Finding]:
    """DF405 when the block run is larger than the one the draft was trained with."""
    if block_size <= trained:
        return []
    return [finding(
        "DF405",
        f"--block-size {block_size} is above the draft's trained block_size {trained}: positions "
        f"{trained}..{block_size - 1} of each block were never trained, so tau measured here understates "
        f"the draft; leave --block-size out or give at most {trained}",
    )]


def check_positions(prompts: Sequence[Prompt], encoded: Sequence[Sequence[int]], max_new_tokens: int,
                    block_size: int, max_positions: int, where: str) -> None:
    """Refuse (exit 2) a run whose longest prompt plus ``-n`` new tokens and one block of drafts
    would pass the target's ``max_position_embeddings``: rope is undefined there, and the caches
    would be sized for it before anything failed."""
    longest = max(range(len(prompts)), key=lambda i: len(encoded[i]))
    need = len(encoded[longest]) + max_new_tokens + block_size
    if need <= max_positions:
        return
    room = max_positions - len(encoded[longest]) - block_size
    fix = f"use -n {room} or less" if room >= 1 else "shorten the prompt"
    raise UsageError(
        f"-n/--max-new-tokens {max_new_tokens}: prompt {prompts[longest].name!r} ({len(encoded[longest])} tokens) "
        f"plus {max_new_tokens} new tokens and a block of {block_size} needs {need} positions, past "
        f"max_position_embeddings {max_positions} of {where}; {fix}"
    )


def _names(names: list[str]) -> str:
    shown = ", ".join(repr(n) for n in names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    return ("prompt " if len(names) == 1 else "prompts ") + shown


def missing_taps(findings: Sequence[Finding]) -> bool:
    """Whether the pre-check found ``target_layer_ids`` missing (DF101): probe-taps can measure it."""
    return any(f.code == "DF101" and f.key == "target_layer_ids" for f in findings)


def probe_taps_command(draft: str, target: str | None) -> str:
    """The command line that measures a draft's lost tap layers and writes a copy with them."""
    import shlex

    return f"dflash-ckpt probe-taps {shlex.quote(draft)} --target {shlex.quote(target or 'TARGET')} --write OUT"
