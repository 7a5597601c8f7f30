"""The API's signatures, made from the options dataclasses, and its arguments checked against them.

Each API function's keywords are the fields of its command's options dataclass (``run/options.py``)
with their defaults, widened where a Python caller holds a value in another form: a path field
(``PathText``, ``Path``) takes an ``os.PathLike`` too, a list field any sequence, a list of texts
one text (one prompt, never five one-letter ones) or ``None``. A mistake is one line with a code
(DF010), never a ``TypeError`` from deep inside a run (``os.open`` on a list, ``int + str`` in the
decoder): the signature ``help()`` shows is the rule that is enforced, and the dataclass is the one
place a keyword, its type and its default are written. Only the standard library is imported here.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import difflib
import functools
import inspect
import os
import types
import typing
from pathlib import Path
from typing import Any, Callable, TypeVar

from dflash_ckpt.errors import DFlashCkptError
from dflash_ckpt.run.inspect_options import PathText

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


_SEQUENCES = (collections.abc.Sequence, list, tuple)


def _describe(hint: Any) -> str:
    """``hint`` as a person writes it: ``a str or os.PathLike``, ``a list of str``."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(a) for a in typing.get_args(hint))
    if hint is type(None):
        return "None"
    if origin in _SEQUENCES:
        inner = _describe(typing.get_args(hint)[0])
        return f"a list of ({inner})" if " or " in inner else f"a list of {inner.removeprefix('a ').removeprefix('an ')}s"
    if origin is collections.abc.Callable:
        return "a callable"
    if origin is os.PathLike:
        return "a path"
    if hint is ProgressBar:
        return "a rich Progress (an object with add_task, advance and update)"
    named = {str: "a str", int: "an int", float: "a number", bool: "True or False"}
    if hint in named:
        return named[hint]
    return getattr(hint, "__name__", str(hint))


def _fits(value: Any, hint: Any) -> bool:
    """Whether ``value`` is of type ``hint`` (the few forms ``api_hint`` makes; bool is not an int)."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, a) for a in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if origin in _SEQUENCES:
        return isinstance(value, (list, tuple)) and all(_fits(v, typing.get_args(hint)[0]) for v in value)
    if origin is collections.abc.Callable:
        return callable(value)
    if origin is os.PathLike:
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


def api_hint(hint: Any, default: Any) -> Any:
    """The type the API takes for an options field of type ``hint`` (``default``: the field's)."""
    origin = typing.get_origin(hint)
    if hint is PathText or hint is Path:
        return str | os.PathLike[str] if hint is PathText else os.PathLike[str]
    if origin in (typing.Union, types.UnionType):
        return functools.reduce(lambda a, b: a | b, dict.fromkeys(api_hint(a, default) for a in typing.get_args(hint)))
    if origin in _SEQUENCES:
        (inner,) = typing.get_args(hint)
        many = typing.Sequence[api_hint(inner, None)]  # type: ignore[misc]
        return str | many | None if inner is str and default == () else many
    return hint


def field_value(value: Any, hint: Any) -> Any:
    """A checked API argument as the options field of type ``hint`` holds it: a path as ``str``, a
    sequence as a list, one text as a list of one, ``None`` as none where the field takes no None."""
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, (list, tuple)):
        return [os.fspath(v) if isinstance(v, os.PathLike) else v for v in value]
    if typing.get_origin(hint) in _SEQUENCES:
        return [] if value is None else [value]
    return value


def api_command(options: type) -> Callable[[F], F]:
    """The API function of the command whose options are the dataclass ``options``: its public
    signature is the fields (the first two positional, the rest keywords, each with the field's
    default, a list's as ``()``) and then the keyword-only parameters the decorated function takes
    (``progress``, ``log``); a wrong type, an unknown keyword (with "did you mean") or a missing
    argument raises ``DFlashCkptError`` (DF010, exit 2) naming the function and the keyword. The
    decorated function is called with the options filled, and its own keywords."""
    field_hints = typing.get_type_hints(options)
    fields = [f for f in dataclasses.fields(options) if f.init]

    def wrap(fn: F) -> F:
        where = f"dflash_ckpt.{fn.__name__}()"
        namespace = {**vars(typing), **fn.__globals__, "os": os}
        own = [p for p in inspect.signature(fn).parameters.values() if p.kind is p.KEYWORD_ONLY]
        params = []
        for i, f in enumerate(fields):
            default = () if f.default_factory is not dataclasses.MISSING else f.default
            default = inspect.Parameter.empty if default is dataclasses.MISSING else default
            kind = inspect.Parameter.POSITIONAL_OR_KEYWORD if i < 2 else inspect.Parameter.KEYWORD_ONLY
            params.append(inspect.Parameter(f.name, kind, default=default, annotation=api_hint(field_hints[f.name], default)))
        params += [p.replace(annotation=eval(p.annotation, namespace)) for p in own]  # noqa: S307
        sig = inspect.Signature(params, return_annotation=inspect.signature(fn).return_annotation)
        names = list(sig.parameters)

        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            for name in kwargs:
                if name not in sig.parameters:
                    near = difflib.get_close_matches(name, names, n=1)
                    hint = f" (did you mean {near[0]}=?)" if near else f" (its keywords: {', '.join(names[1:])})"
                    raise DFlashCkptError(f"no keyword {name}{hint}", code=API_TYPE_CODE, key=name, path=where)
            try:
                bound = sig.bind(*args, **kwargs)
            except TypeError as err:
                raise DFlashCkptError(str(err), code=API_TYPE_CODE, path=where) from None
            bound.apply_defaults()
            for name, value in bound.arguments.items():
                hint = sig.parameters[name].annotation
                if not _fits(value, hint):
                    raise DFlashCkptError(f"{name}={_shown(value)} is not {_describe(hint)}{NOTES.get(name, '')}",
                                          code=API_TYPE_CODE, key=name, path=where)
            filled = options(**{f.name: field_value(bound.arguments[f.name], field_hints[f.name]) for f in fields})
            return fn(filled, **{p.name: bound.arguments[p.name] for p in own})

        call.__signature__ = sig  # type: ignore[attr-defined]
        return call  # type: ignore[return-value]

    return wrap
