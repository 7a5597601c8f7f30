"""Prompt suites by task (``--suite math|code|chat|long|all``), shipped as package data.

Why suites: DFlash's acceptance depends strongly on the task (the paper's Qwen3-8B: Math500 tau
7.87, MT-Bench 4.25), so one mixed number over three prompts misleads, and a tau measured on one
task can only be compared with a published figure for the same kind of task
(``checks/published.BENCHMARKS``). Each suite holds 12-20 prompts written for this project (not
copied from any data set), in ``dflash_ckpt/data/suites/<name>.json``; ``long`` holds prompts over
1,500 characters. Prompts are named ``<suite>-NN`` (1-based) so the report's rows and the JSON
say which suite each belongs to. Standard library only: the options are checked before torch is
imported.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib.resources import files

from dflash_ckpt.errors import UsageError

#: The suites, in the order ``all`` runs them.
SUITES: tuple[str, ...] = ("math", "code", "chat", "long")
#: Every suite at once.
ALL = "all"
#: What ``--suite`` accepts.
CHOICES: tuple[str, ...] = (*SUITES, ALL)


@lru_cache(maxsize=None)
def _read(name: str) -> tuple[str, ...]:
    doc = json.loads(files("dflash_ckpt.data").joinpath("suites", f"{name}.json").read_text(encoding="utf-8"))
    prompts = doc.get("prompts") if isinstance(doc, dict) else None
    if doc.get("suite") != name or not isinstance(prompts, list) or not all(isinstance(p, str) for p in prompts):
        raise ValueError(f"package data suites/{name}.json is malformed")  # a packaging bug, not a user error
    return tuple(prompts)


def _names(name: str) -> tuple[str, ...]:
    if name == ALL:
        return SUITES
    if name in SUITES:
        return (name,)
    raise UsageError(f"--suite must be one of {', '.join(CHOICES)}, got {name!r}", key="--suite")


def load_suite(name: str) -> list[str]:
    """The prompts' texts of suite ``name`` (``all``: every suite, in ``SUITES`` order).
    An unknown name is one DF004 usage error line naming the choices."""
    return [text for suite in _names(name) for text in _read(suite)]


def suite_prompts(name: str) -> list[tuple[str, str, str]]:
    """``(suite, prompt name, text)`` for each prompt of ``name``; names are ``<suite>-NN``."""
    return [(suite, f"{suite}-{i:02d}", text) for suite in _names(name) for i, text in enumerate(_read(suite), 1)]


def suite_of(prompt_name: str) -> str | None:
    """The suite a prompt name belongs to (``math-03`` -> ``math``), or ``None`` for a prompt of
    the user's own (``-p``, ``--prompts``) or a built-in one: those count in ``overall`` only."""
    head, sep, tail = prompt_name.rpartition("-")
    return head if sep and head in SUITES and tail.isdigit() else None
