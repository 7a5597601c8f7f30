"""The API's arguments checked against its signatures, so a wrong type is one ``DFlashCkptError``.

A Python caller gets the CLI's promise: a mistake is one line with a code (DF010), never a
``TypeError`` from deep inside a run (``os.open`` on a list, ``int + str`` in the decoder). The
check reads the annotations ``api.py`` writes for people (``str | os.PathLike[str] | None``,
``Sequence[str]``, ``int``), so the signature a reader sees is the rule that is enforced: no
second table to drift. Only the standard library is imported here.
"""

from __future__ import annotations

import collections.abc
import difflib
import functools
import inspect
import os
import types
import typing
from typing import Any, Callable, TypeVar

from dflash_ckpt.errors import DFlashCkptError

F = TypeVar("F", bound=Callable[..., Any])

#: The code of an API call with an argument of the wrong type, a missing one or an unknown keyword.
API_TYPE_CODE = "DF010"


@typing.runtime_checkable
class ProgressBar(typing.Protocol):
    """What a run's ``progress`` keyword takes: a rich ``Progress``, or any object with the three
    methods the runs call (checked when the call is made, not when the first token is)."""

    def add_task(self, description: str, *args: Any, **kwargs: Any) -> Any: ...  # noqa: D102

    def advance(self, task_id: Any, advance: float = 1) -> None: ...  # noqa: D102

    def update(self, task_id: Any, *args: Any, **kwargs: Any) -> None: ...  # noqa: D102


def _describe(hint: Any) -> str:
    """``hint`` as a person writes it: ``a str or os.PathLike``, ``a list of str``."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(a) for a in typing.get_args(hint))
    if hint is type(None):
        return "None"
    if origin in (collections.abc.Sequence, list, tuple):
        args = typing.get_args(hint)
        inner = _describe(args[0]) if args else "values"
        return f"a list of ({inner})" if " or " in inner else f"a list of {inner.removeprefix('a ').removeprefix('an ')}s"
    if origin is collections.abc.Callable or hint is collections.abc.Callable:
        return "a callable"
    if origin is os.PathLike or hint is os.PathLike:
        return "a path"
    if hint is Any:
        return "anything"
    if hint is ProgressBar:
        return "a rich Progress (an object with add_task, advance and update)"
    named = {str: "a str", int: "an int", float: "a number", bool: "True or False"}
    if hint in named:
        return named[hint]
    return getattr(hint, "__name__", str(hint))


def _fits(value: Any, hint: Any) -> bool:
    """Whether ``value`` is of type ``hint`` (the few forms api.py uses; bool is not an int)."""
    if hint is Any:
        return True
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, a) for a in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if origin is typing.Literal:
        return value in typing.get_args(hint)
    if origin in (collections.abc.Sequence, list, tuple):
        if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
            return False
        args = typing.get_args(hint)
        return not args or all(_fits(v, args[0]) for v in value)
    if origin is collections.abc.Callable or hint is collections.abc.Callable:
        return callable(value)
    if origin is os.PathLike or hint is os.PathLike:
        return isinstance(value, os.PathLike) and isinstance(os.fspath(value), str)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, hint)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


#: What a wrong type of these keywords usually means.
NOTES = {"prompts": " (prompts is the JSONL file; the texts themselves go in prompt=)",
         "prompt": " (one text, or a list of texts)"}


def checked_call(fn: F) -> F:
    """``fn`` with its arguments checked against its annotations first: a wrong type, an unknown
    keyword (with "did you mean") or a missing argument raises ``DFlashCkptError`` (DF010, exit 2)
    naming the function and the keyword."""
    sig = inspect.signature(fn)
    where = f"dflash_ckpt.{fn.__name__}()"
    namespace = {**vars(typing), **fn.__globals__, "os": os}
    hints = {name: eval(p.annotation, namespace) if isinstance(p.annotation, str) else p.annotation  # noqa: S307
             for name, p in sig.parameters.items() if p.annotation is not inspect.Parameter.empty}

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        for name in kwargs:
            if name not in sig.parameters:
                near = difflib.get_close_matches(name, list(sig.parameters), n=1)
                hint = f" (did you mean {near[0]}=?)" if near else f" (its keywords: {', '.join(list(sig.parameters)[1:])})"
                raise DFlashCkptError(f"no keyword {name}{hint}", code=API_TYPE_CODE, key=name, path=where)
        try:
            bound = sig.bind(*args, **kwargs)
        except TypeError as err:
            raise DFlashCkptError(str(err), code=API_TYPE_CODE, path=where) from None
        for name, value in bound.arguments.items():
            hint = hints.get(name)
            if hint is not None and not _fits(value, hint):
                raise DFlashCkptError(f"{name}={_shown(value)} is not {_describe(hint)}{NOTES.get(name, '')}",
                                      code=API_TYPE_CODE, key=name, path=where)
        return fn(*args, **kwargs)

    return call  # type: ignore[return-value]


def texts(value: str | typing.Sequence[str] | None) -> list[str]:
    """One text or many as a list: ``"hello"`` is one prompt, never five one-letter ones; ``None``
    is none (the command's default)."""
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


def path_text(value: str | os.PathLike[str] | None) -> str | None:
    """A checked path argument as the ``str`` the runs take (``None`` stays ``None``)."""
    return None if value is None else os.fspath(value)
