"""Chat templates from a checkpoint, compiled and rendered the way Hugging Face renders them, within
limits of time and size.

A template is code from the checkpoint. jinja2's ``ImmutableSandboxedEnvironment`` (what
``apply_chat_template`` uses) keeps it from reaching Python internals, but not from running long or
building huge strings: ``{{ 'a' * 10**10 }}``, ``'a'|center(10**10)``, nested loops. Here:

- every rendering runs under a CPU-time limit (``limits.TEMPLATE_CPU_SECONDS``, a profiling timer
  in the main thread) and stops once its output passes ``limits.MAX_TEMPLATE_OUTPUT`` characters
  (the template is streamed with ``generate``);
- the operators ``*``, ``**``, ``+`` and ``%`` and every call (filters, globals, methods) are
  checked *before* they run, so that one C-level operation cannot allocate gigabytes first;
- every failure, whatever jinja2 or the template raises (a ``TemplateError``, a ``TypeError``, a
  ``ZeroDivisionError``, a ``RecursionError``...), is one ``InputError`` naming the folder.

Those checks see operands, not what a filter or format does with them: ``"%999999999d"|format(1)``,
``("{0:>{1}}"*200).format("a", 4000000)``, ``|indent(4000000)``, ``"%*d" % (n, 1)``, ``~``
doubling inside a loop each pass one check and still build gigabytes in one C call, and compiling
a huge template takes gigabytes by itself. So both compiling and rendering run in a forked child
process under kernel limits and a wall-clock deadline (``template_process.render_all``); this module
is what runs in there.
"""

from __future__ import annotations

import contextlib
import json
import re
import signal
import threading
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

from dflash_ckpt import limits
from dflash_ckpt.errors import InputError

#: A width or precision of a million characters or more in a format string.
_HUGE_FORMAT = re.compile(r"\d{7,}")


class TemplateLimit(Exception):
    """The template went past a limit of ``limits`` (CPU time, output size, an operand's size)."""


def _size(value: Any) -> int | None:
    return len(value) if isinstance(value, (str, bytes, list, tuple)) else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _require_binop(op: str, left: Any, right: Any) -> None:
    cap = limits.MAX_TEMPLATE_OUTPUT
    if op == "*":
        for seq, n in ((left, right), (right, left)):
            size, count = _size(seq), _int(n)
            if size is not None and count is not None and size * max(count, 0) > cap:
                raise TemplateLimit(f"'*' would build {size * count:,} items (limit {cap:,})")
        a, b = _int(left), _int(right)
        if a is not None and b is not None and a.bit_length() + b.bit_length() > 1 << 16:
            raise TemplateLimit("'*' of integers that large")
    elif op == "**":
        a, b = _int(left), _int(right)
        if a is not None and b is not None and abs(a) > 1 and b > 4096:
            raise TemplateLimit(f"'**' with exponent {b if b < 10**12 else 'that large'}")
    elif op == "+":
        a, b = _size(left), _size(right)
        if a is not None and b is not None and a + b > cap:
            raise TemplateLimit(f"'+' would build {a + b:,} items (limit {cap:,})")
    elif op == "%" and isinstance(left, str) and _HUGE_FORMAT.search(left):
        raise TemplateLimit("'%' formatting with a width of a million or more")


def _require_args(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    cap = limits.MAX_TEMPLATE_OUTPUT
    for value in (*args, *kwargs.values()):
        n = _int(value)
        if n is not None and abs(n) > cap:
            raise TemplateLimit(f"calling {getattr(fn, '__name__', 'a function')} with {n if abs(n) < 10**12 else 'a huge number'}")
    name = getattr(fn, "__name__", "")
    owner = getattr(getattr(fn, "__wrapped__", fn), "__self__", None)  # the sandbox wraps str.format
    if isinstance(owner, str):
        if name in ("format", "format_map") and _HUGE_FORMAT.search(owner):
            raise TemplateLimit("str.format with a width of a million or more")
        if name == "replace" and len(args) >= 2 and isinstance(args[0], str) and isinstance(args[1], str):
            grows = owner.count(args[0]) * len(args[1]) if args[0] else (len(owner) + 1) * len(args[1])
            if len(owner) + grows > cap:
                raise TemplateLimit(f"str.replace would build {len(owner) + grows:,} characters (limit {cap:,})")
        if name in ("join",) and args and isinstance(args[0], (list, tuple)) and len(owner) * len(args[0]) > cap:
            raise TemplateLimit("str.join would build too long a string")


def _guard(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` with its arguments checked first, and marked ``pass_context``: jinja2 folds a filter
    with constant arguments while *compiling* (``{{ "%999999999d"|format(1) }}``), in this process
    and outside every limit of ``render``, unless the filter asks for the context."""
    from jinja2.utils import _PassArg, pass_context

    kind = _PassArg.from_obj(fn)

    @pass_context
    def guarded(context: Any, *args: Any, **kwargs: Any) -> Any:
        _require_args(fn, args, kwargs)
        if kind is _PassArg.context:
            return fn(context, *args, **kwargs)
        if kind is _PassArg.eval_context:
            return fn(context.eval_ctx, *args, **kwargs)
        if kind is _PassArg.environment:
            return fn(context.environment, *args, **kwargs)
        return fn(*args, **kwargs)

    guarded.__name__ = getattr(fn, "__name__", "filter")
    return guarded


def _guard_global(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A global function (``range``, ``raise_exception``...) with its arguments checked first."""
    def guarded(*args: Any, **kwargs: Any) -> Any:
        _require_args(fn, args, kwargs)
        return fn(*args, **kwargs)

    guarded.__name__ = getattr(fn, "__name__", "function")
    return guarded


@contextlib.contextmanager
def cpu_limit(seconds: float) -> Iterator[None]:
    """Raise ``TemplateLimit`` in this (main) thread after ``seconds`` of process CPU time.

    Outside the main thread signals cannot be used; there only the size limits apply.
    """
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return

    def expired(signum: int, frame: Any) -> None:
        raise TemplateLimit(f"it used more than {seconds:g} s of CPU time")

    previous = signal.signal(signal.SIGPROF, expired)
    signal.setitimer(signal.ITIMER_PROF, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)


def compile_template(source: str, where: str = "chat template", *, path: str | None = None) -> Any:
    """A jinja2 template compiled in the environment Hugging Face uses for chat templates, guarded."""
    import jinja2
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    if len(source) > limits.MAX_TEMPLATE_BYTES:
        raise InputError(f"{where}: {len(source):,} characters, more than the {limits.MAX_TEMPLATE_BYTES:,} a template may have", code="DF002",
                         path=path)

    class GenerationTag(Extension):
        """``{% generation %}...{% endgeneration %}`` marks assistant text; rendered as is."""

        tags = {"generation"}

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.Scope(body, lineno=lineno)

    class GuardedEnvironment(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset({"*", "**", "+", "%"})

        def call_binop(self, context: Any, op: str, left: Any, right: Any) -> Any:
            _require_binop(op, left, right)
            return super().call_binop(context, op, left, right)

        def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
            _require_args(__obj, args, kwargs)
            return super().call(__context, __obj, *args, **kwargs)

    def raise_exception(message: str) -> None:
        raise jinja2.TemplateError(message)

    def tojson(x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None, sort_keys: bool = False) -> str:
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt: str) -> str:
        return datetime.now().strftime(fmt)

    # optimized=False: jinja2's optimizer folds constant expressions while compiling, which would
    # run ``"%999999999d"|format(1)`` here, in this process, outside every limit of ``render``.
    env = GuardedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, loopcontrols], optimized=False)
    env.filters["tojson"] = tojson
    env.filters = {name: _guard(f) for name, f in env.filters.items()}
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    env.globals = {k: _guard_global(v) if callable(v) and k not in ("namespace", "dict") else v for k, v in env.globals.items()}
    try:
        return env.from_string(source)
    except jinja2.TemplateSyntaxError as err:
        raise InputError(f"{where}: jinja syntax error at line {err.lineno}: {err.message}", code="DF002",
                         path=path) from None
    except TemplateLimit as err:
        raise InputError(f"{where}: stopped while compiling: {err} (README, Limits)", code="DF002", path=path) from None
    except MemoryError:
        raise InputError(f"{where}: stopped while compiling: it needed more than "
                         f"{limits.human_bytes(limits.TEMPLATE_MEMORY_BYTES)} of memory (README, Limits)", code="DF002",
                         path=path) from None
    except RecursionError:
        raise InputError(f"{where}: cannot be compiled: nested too deeply", code="DF002", path=path) from None
    except Exception as err:  # noqa: BLE001 - a template that cannot compile, for any reason, is one line
        raise InputError(f"{where}: cannot be compiled ({type(err).__name__}: {_first_line(err)})", code="DF002",
                         path=path) from None


def render_here(template: Any, context: dict[str, Any], where: str, *, path: str | None = None) -> str:
    """``template`` rendered with ``context`` in this process, under the CPU-time and output-size limits."""
    cap = limits.MAX_TEMPLATE_OUTPUT
    parts: list[str] = []
    total = 0
    try:
        with cpu_limit(limits.TEMPLATE_CPU_SECONDS):
            for piece in template.generate(**context):
                total += len(piece)
                if total > cap:
                    raise TemplateLimit(f"its output passed {cap:,} characters")
                parts.append(piece)
    except TemplateLimit as err:
        raise InputError(f"{where}: stopped: {err} (README, Limits)", code="DF002", path=path) from None
    except RecursionError:
        raise InputError(f"{where}: recursion too deep (a macro that calls itself without end?)", code="DF002",
                         path=path) from None
    except MemoryError:
        raise InputError(f"{where}: stopped: it needed more than {limits.human_bytes(limits.TEMPLATE_MEMORY_BYTES)} "
                         "of memory (README, Limits)", code="DF002", path=path) from None
    except Exception as err:  # noqa: BLE001 - TemplateError, TypeError, ZeroDivisionError...: all one line
        import jinja2

        kind = "" if isinstance(err, jinja2.TemplateError) and type(err) is jinja2.TemplateError else f"{type(err).__name__}: "
        raise InputError(f"{where}: {kind}{_first_line(err)}", code="DF002", path=path) from None
    return "".join(parts)


def _first_line(err: BaseException, limit: int = 200) -> str:
    text = next((line.strip() for line in str(err).splitlines() if line.strip()), "") or type(err).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


__all__ = ["TemplateLimit", "compile_template", "cpu_limit", "render_here"]
