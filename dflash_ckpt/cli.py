"""The ``dflash-ckpt`` command line.

Commands live in small modules that register themselves on ``app`` (built on first use); heavy imports (torch,
huggingface_hub's HTTP stack) happen inside the command bodies, so ``inspect`` starts fast.
Exit codes: 0 clean, 1 findings/check failed, 2 usage error or unreadable input.
"""

from __future__ import annotations

import functools
import os
import shlex
import sys
from typing import Any, List, Optional

import typer

from dflash_ckpt._version import __version__
from dflash_ckpt.commands.options import (Annotations, AnnotationsOpt, JsonOpt, PlainJsonOpt, QuietOpt, ReportOpt, RevisionOpt,
                                          DEFAULT, TokenOpt, check_report, silence_progress, take_defaults, want_json)
from dflash_ckpt.errors import PROGRAM, DFlashCkptError, UsageError, error_line
from dflash_ckpt.output_formats import choices
from dflash_ckpt.run.inspect_options import InspectOptions
from dflash_ckpt.terminal import reflow_help, set_argv, set_quiet

OutputFormat, OUTPUT_FORMAT_HELP = choices()

_SETTINGS: dict[str, Any] = dict(
    name="dflash-ckpt",
    help="Check, normalize and smoke-run DFlash speculative-decoding draft checkpoints.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
#: Every command, once, in the order ``--help`` lists them: the module of ``commands/`` whose
#: ``register(app)`` adds it (imported at start-up: typer only), or None for a command defined in
#: this file; and whether ``_core`` holds it too.
COMMANDS: dict[str, tuple[str | None, bool]] = {
    "inspect": (None, True),
    "rules": (None, True),
    "schema": (None, False),
    "normalize": ("normalize_cmd", False),
    "smoke-run": ("smoke_cmd", False),
    "probe-taps": ("probe_cmd", False),
    "env": ("env_cmd", False),
}
#: ``inspect`` and ``rules`` alone: turning a command's signature into click options costs about
#: a millisecond an option, so a run of these builds only them (``run``), not smoke-run's forty,
#: nor imports the other commands' modules (``app``, built on first use).
_core = typer.Typer(add_completion=False, **_SETTINGS)
#: Commands ``_core`` holds.
_CORE_COMMANDS = tuple(name for name, (_, core) in COMMANDS.items() if core)



def _version(value: bool) -> None:
    if value:
        typer.echo(f"dflash-ckpt {__version__}")
        raise typer.Exit()


def _root(
    version: bool = typer.Option(False, "--version", "-V", callback=_version, is_eager=True, help="Show the version and exit."),
) -> None:
    """Check, normalize and smoke-run DFlash speculative-decoding draft checkpoints."""


def inspect(
    drafts: List[str] = typer.Argument(None, metavar="DRAFT...", help="Draft folders or Hub repo ids (org/name, or org/name@rev).", show_default=False),
    target: Optional[str] = typer.Option(DEFAULT, "--target", "-t", help="Target model folder or Hub repo id, to check the pairing."),
    from_file: Optional[str] = typer.Option(None, "--from-file", help="Read more DRAFT arguments from a file (- for stdin), one per line (# comments)."),
    revision: Optional[str] = RevisionOpt,
    token: Optional[str] = TokenOpt,
    json_out: bool = JsonOpt,
    output_format: OutputFormat = typer.Option("text", "--output-format", help=OUTPUT_FORMAT_HELP),
    annotations: Annotations = AnnotationsOpt,
    quiet: bool = QuietOpt,
    strict: bool = typer.Option(DEFAULT, "--strict", help="Warnings count as errors."),
    select: Optional[List[str]] = typer.Option(DEFAULT, "--select", help="Report only these rule codes or prefixes (DF2, DF101,DF3; repeatable).", show_default=False),
    ignore: Optional[List[str]] = typer.Option(DEFAULT, "--ignore", help="Do not report these rule codes or prefixes (repeatable).", show_default=False),
    require_engines: Optional[List[str]] = typer.Option(
        DEFAULT, "--require-engines",
        help="Fail (exit 1, DF144) unless these readers would load the config: zlab-legacy, zlab, sglang, vllm, "
             "lmdeploy, speculators, tensorrt-llm, zlab-mlx, mlx-vlm, exllamav3-legacy, exllamav3, or all "
             "(comma list, repeatable).",
        show_default=False),
    report: Optional[str] = ReportOpt,
) -> None:
    """Resolve and check a draft from config.json and safetensors headers (no tensor data, no torch).

    Exit codes: 0 no errors (no warnings either with --strict); 1 an error found (or a warning with
    --strict, or a --require-engines reader that would not load it); 2 usage error or a draft or
    target that cannot be read.
    """
    from dflash_ckpt.commands.inspect_cmd import report_inspect
    from dflash_ckpt.run.inspect import parse_codes, parse_engines, run_inspect
    fmt = "json" if json_out else output_format
    want_json("inspect", fmt != "text", fmt)
    parse_codes(select or [], "--select"), parse_codes(ignore or [], "--ignore"), parse_engines(require_engines or [])
    args = list(drafts or [])
    if from_file:
        args += read_arg_file(from_file)
    if not args:
        raise typer.BadParameter("give at least one DRAFT (or --from-file)", param_hint="DRAFT")
    silence_progress(fmt != "text" or quiet, quiet=quiet)
    check_report(report)
    raise typer.Exit(report_inspect(
        lambda: run_inspect(InspectOptions(args, target, revision=revision, token=token, strict=strict, select=select or [],
                                           ignore=ignore or [], require_engines=require_engines or [])),
        json_out=fmt != "text", quiet=quiet, strict=strict, output_format=fmt, annotations=annotations, report=report))


take_defaults(inspect, InspectOptions)


def rules(
    code: Optional[str] = typer.Argument(None, help="A rule code such as DF211, or a prefix such as DF3 (the rules it starts, as --select takes it); all rules when omitted."),
    json_out: bool = PlainJsonOpt,
) -> None:
    """List the checks with their codes, or explain one with its fix.

    Exit codes: 0 listed; 2 an unknown code.
    """
    from dflash_ckpt.json_out import document, print_json
    from dflash_ckpt.rules import RULES

    want_json("rules", json_out)
    rule = None if code is None else RULES.get(code.upper())
    # a prefix (DF3, df31) lists the rules it starts, as --select reads it
    chosen = list(RULES.values()) if code is None else [rule] if rule is not None else [
        r for c, r in RULES.items() if code.strip() and c.startswith(code.strip().upper())]
    if not chosen:
        raise typer.BadParameter(f"unknown rule {code!r}: no rule code is or starts with it; `dflash-ckpt rules` lists them",
                                 param_hint="CODE")
    if json_out:  # one result per rule
        print_json(document("rules", [r.to_json() for r in chosen], 0))
        return
    from dflash_ckpt.console import make_console
    from dflash_ckpt.commands.inspect_report import render_rule, render_rules

    if rule is None:
        render_rules(make_console(), chosen)
    else:
        render_rule(make_console(), rule)


def schema(
    command: Optional[str] = typer.Argument(None, metavar="[COMMAND]", help="inspect, normalize, smoke-run, probe-taps, rules or schema; the whole schema when omitted."),
    json_out: bool = PlainJsonOpt,
) -> None:
    """Print the JSON Schema (draft 2020-12) of every command's --json document, or of one command's.

    Exit codes: 0 printed; 2 an unknown command.
    """
    from dflash_ckpt.json_out import document, print_json
    from dflash_ckpt.schema import COMMANDS, load_schema

    want_json("schema", json_out)
    if command is not None and command not in COMMANDS:
        raise typer.BadParameter(f"unknown command {command!r}; give one of {', '.join(COMMANDS)}", param_hint="COMMAND")
    doc = load_schema(command)
    print_json(document("schema", [{"for": command, "schema": doc}], 0) if json_out else doc)


def read_arg_file(path: str) -> list[str]:
    """Arguments from a text file (``-``: standard input): one per line, blank lines and ``#`` comments ignored.

    Read as every side file is (``sources.files``): a regular file only, so a FIFO or ``/dev/zero``
    named there is one line instead of a wait or an endless read, and at most
    ``limits.MAX_ARG_FILE_BYTES`` (standard input too: it is read no further than that).
    """
    from dflash_ckpt.errors import InputError
    from dflash_ckpt.limits import MAX_ARG_FILE_BYTES, human_bytes
    from dflash_ckpt.sources.files import read_capped_text

    what = "--from-file list"
    if path == "-":
        data = sys.stdin.buffer.read(MAX_ARG_FILE_BYTES + 1)
        if len(data) > MAX_ARG_FILE_BYTES:
            raise InputError(f"more than {human_bytes(MAX_ARG_FILE_BYTES)}, too large for a {what}", code="DF001",
                             path="<stdin>")
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError as err:
            raise InputError(f"not UTF-8 text (byte {err.start}); a {what} must be UTF-8", code="DF001",
                             path="<stdin>") from None
    else:
        text = read_capped_text(path, MAX_ARG_FILE_BYTES, what=what)
    lines = (line.split("#", 1)[0].strip() for line in text.splitlines())
    return [line for line in lines if line]


_core.callback()(_root)
for _name in _CORE_COMMANDS:
    _core.command(_name)(globals()[_name])
reflow_help(_core)


@functools.lru_cache(maxsize=None)
def _full_app() -> typer.Typer:
    """Every command of ``COMMANDS``, in order, and shell completion (``--install-completion``);
    a module of ``commands/`` imports only typer at import time."""
    import importlib

    full = typer.Typer(add_completion=True, **_SETTINGS)
    full.callback()(_root)
    for name, (module, _) in COMMANDS.items():
        if module is None:
            full.command(name)(globals()[name])
        else:
            importlib.import_module(f"dflash_ckpt.commands.{module}").register(full)
    reflow_help(full)
    return full


def __getattr__(name: str) -> Any:
    """``cli.app``: the whole CLI (``_full_app``), built when first asked for."""
    if name == "app":
        return _full_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def run(argv: list[str] | None = None) -> int:
    """Run the CLI and return its exit code; every error is one line on stderr.

    Tests call this in-process; ``main`` is the console script. The parser runs without click's
    own error printing, so a usage error (exit 2) is one ``PATH: DF004 error: ...`` line like
    every other error, never a boxed panel; a ``DFlashCkptError`` from any command is printed as
    one line, never a traceback.
    """
    hub_budget = sys.modules.get("dflash_ckpt.sources.hub.budget")
    if hub_budget is not None:  # an earlier command in this process: its Hub deadline is not ours
        hub_budget.reset()
    exc_mod = _click_exceptions()
    no_args_help = getattr(exc_mod, "NoArgsIsHelpError", ())
    args = sys.argv[1:] if argv is None else list(argv)
    want_json("", False)  # an earlier command in this process owes nothing now
    set_quiet(False)  # nor is it quiet because an earlier one was
    set_argv(args)  # what --report names as the command that made it
    try:
        result = _app_for(args)(args=args, prog_name=PROGRAM, standalone_mode=False)
    except no_args_help as exc:  # bare `dflash-ckpt`: the help, once
        # The error's constructor rendered the help already (typer's rich help prints as it is
        # built, and returns ""): asking the context for it again printed the panel twice.
        help_text = exc.format_message()
        if help_text.strip():
            print(help_text, file=sys.stderr)
        return 2
    except exc_mod.UsageError as exc:
        _owe_from_argv(args)  # a parse error comes before the command body could say so
        _owed_document(UsageError(" ".join(exc.format_message().split())))
        print(_usage_line(exc, args), file=sys.stderr)
        return 2
    except exc_mod.ClickException as exc:
        _owed_document(UsageError(" ".join(exc.format_message().split())))
        print(error_line(_command_path(args), "DF004", "error", " ".join(exc.format_message().split())), file=sys.stderr)
        return exc.exit_code
    except typer.Abort:
        print("interrupted", file=sys.stderr)
        return 130
    except DFlashCkptError as err:
        _owed_document(err)
        print(err.line(_command_path(args)), file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except OSError as err:  # the last net: a path no check foresaw (ENAMETOOLONG, EIO, ...)
        from dflash_ckpt.errors import InputError
        from dflash_ckpt.sources.base import os_error

        error = os_error(err, err.filename, code="DF001") if err.filename else InputError(err.strerror or str(err), code="DF001")
        _owed_document(error)
        print(error.line(_command_path(args)), file=sys.stderr)
        return 2
    except SystemExit as exc:
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    if result == 130:  # typer turns Ctrl-C inside a command into a silent Exit(130)
        print("interrupted", file=sys.stderr)
    return result if isinstance(result, int) else 0


def _app_for(args: list[str]) -> typer.Typer:
    """``_core`` when the command named is one of its own (and no shell completion is asked), else ``app``."""
    if any(k.startswith("_DFLASH_CKPT_COMPLETE") for k in os.environ):
        return _full_app()
    first = next((a for a in args if not a.startswith("-")), None)
    return _core if first in _CORE_COMMANDS else _full_app()


def _owe_from_argv(args: list[str]) -> None:
    """A command line that did not parse but names a command and asks for ``--json`` (or
    ``--output-format json``) still gets its envelope, with the usage error in ``error``."""
    command = next((a for a in args if not a.startswith("-")), None)
    if command not in COMMANDS:
        return
    wants = "--json" in args or "--output-format=json" in args or any(
        a == "--output-format" and b == "json" for a, b in zip(args, args[1:]))
    if wants:
        want_json(command, True)


def _owed_document(err: DFlashCkptError) -> None:
    """With ``--json``, the envelope on stdout for a run stopped before its document: ``error``
    filled, no results (after parsing: a parse error comes before any command asked for JSON)."""
    from dflash_ckpt.json_out import document, pending, print_document

    owed = pending()
    if owed is not None:
        command, output_format = owed
        print_document(document(command, [], err.exit_code, err), output_format)


def _command_path(args: list[str]) -> str:
    """``dflash-ckpt inspect`` for a line about the command line itself (the first command named)."""
    for arg in args:
        if not arg.startswith("-"):
            return f"{PROGRAM} {arg}" if arg in COMMANDS else PROGRAM
    return PROGRAM


def _click_exceptions() -> Any:
    """click's exception classes as typer raises them (typer 0.2x vendors click as typer._click)."""
    try:
        from typer._click import exceptions
    except ImportError:
        from click import exceptions
    return exceptions


def _positionals(ctx: Any, args: list[str]) -> list[str]:
    """The bare words of a command line after the command's name (option values left out; the
    command's flags, which take none, read from its click parameters)."""
    flags = {o for p in getattr(ctx.command, "params", []) if getattr(p, "is_flag", False) for o in p.opts + p.secondary_opts}
    words, skip = [], False
    for i, arg in enumerate(args):
        if skip:
            skip = False
            continue
        if arg.startswith("-"):
            skip = "=" not in arg and arg not in flags
            continue
        words.append(arg)
    return words[1:]  # the command's name first


def _stray_target(exc: Any, args: list[str]) -> str:
    """For ``smoke-run DRAFT TARGET``: what to write instead, naming the stray argument."""
    param = getattr(exc, "param", None)
    if exc.ctx is None or getattr(param, "name", None) != "target":
        return ""
    words = _positionals(exc.ctx, args)
    if len(words) < 2:
        return ""
    return (f"; {words[1]!r} was given as a second argument: the target goes after --target "
            f"({exc.ctx.command_path} {shlex.quote(words[0])} --target {shlex.quote(words[1])})")


def _usage_line(exc: Any, args: list[str]) -> str:
    path = exc.ctx.command_path if exc.ctx is not None else _command_path(args)
    message = " ".join(exc.format_message().split())
    stray = _stray_target(exc, args)
    if stray:
        message = message.rstrip(".") + stray
    what = "commands" if path == PROGRAM else "options"
    return error_line(path, "DF004", "error", f"{message} (`{path} --help` lists the {what})")
