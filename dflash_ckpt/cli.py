"""The ``dflash-ckpt`` command line.

Commands live in small modules that register themselves on ``app``; heavy imports (torch,
huggingface_hub's HTTP stack) happen inside the command bodies, so ``inspect`` starts fast.
Exit codes: 0 clean, 1 findings/check failed, 2 usage error or unreadable input.
"""

from __future__ import annotations

import sys
from typing import List, Optional

import typer

from dflash_ckpt import __version__
from dflash_ckpt.errors import DFlashCkptError

app = typer.Typer(
    name="dflash-ckpt",
    help="Check, normalize and smoke-run DFlash speculative-decoding draft checkpoints.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

# Options shared by every command, spelled as the `hf` CLI spells them.
JsonOpt = typer.Option(False, "--json", help="Print one JSON document instead of the report.")
QuietOpt = typer.Option(False, "-q", "--quiet", help="Print errors only.")
RevisionOpt = typer.Option(None, "--revision", help="Hub revision (branch, tag or commit) of DRAFT; or write org/name@rev.")
TokenOpt = typer.Option(None, "--token", help="Hugging Face token for gated or private repos (default: HF_TOKEN or the saved login).", show_default=False)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"dflash-ckpt {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Show the version and exit."),
) -> None:
    """Check, normalize and smoke-run DFlash speculative-decoding draft checkpoints."""


@app.command()
def inspect(
    drafts: List[str] = typer.Argument(None, metavar="DRAFT...", help="Draft folders or Hub repo ids (org/name, or org/name@rev).", show_default=False),
    target: Optional[str] = typer.Option(None, "--target", "-t", help="Target model folder or Hub repo id, to check the pairing."),
    from_file: Optional[str] = typer.Option(None, "--from-file", help="Read more DRAFT arguments from a file, one per line (# comments)."),
    revision: Optional[str] = RevisionOpt,
    token: Optional[str] = TokenOpt,
    json_out: bool = JsonOpt,
    quiet: bool = QuietOpt,
    strict: bool = typer.Option(False, "--strict", help="Warnings count as errors."),
) -> None:
    """Resolve and check a draft from config.json and safetensors headers (no tensor data, no torch)."""
    from dflash_ckpt.commands.inspect_cmd import run_inspect

    args = list(drafts or [])
    if from_file:
        args += read_arg_file(from_file)
    if not args:
        raise typer.BadParameter("give at least one DRAFT (or --from-file)", param_hint="DRAFT")
    raise typer.Exit(run_inspect(args, target=target, revision=revision, token=token, json_out=json_out, quiet=quiet, strict=strict))


@app.command()
def rules(
    code: Optional[str] = typer.Argument(None, help="A rule code such as DF211; all rules when omitted."),
    json_out: bool = JsonOpt,
) -> None:
    """List the checks with their codes, or explain one with its fix."""
    from dflash_ckpt.checks.inspection import print_json
    from dflash_ckpt.rules import RULES

    rule = None if code is None else RULES.get(code.upper())
    if code is not None and rule is None:
        raise typer.BadParameter(f"unknown rule {code!r}; `dflash-ckpt rules` lists them", param_hint="CODE")
    if json_out:
        print_json([r.to_json() for r in RULES.values()] if rule is None else rule.to_json())
        return
    from dflash_ckpt.commands.output import make_console, render_rule, render_rules

    if rule is None:
        render_rules(make_console(), RULES.values())
    else:
        render_rule(make_console(), rule)


def read_arg_file(path: str) -> list[str]:
    """Arguments from a text file: one per line, blank lines and ``#`` comments ignored."""
    from dflash_ckpt.errors import InputError
    from dflash_ckpt.sources.base import describe_os_error

    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except OSError as err:
        raise InputError(describe_os_error(err, path), code="DF001") from None
    except UnicodeDecodeError:
        raise InputError(f"{path}: not UTF-8 text", code="DF001") from None
    return [line.split("#", 1)[0].strip() for line in lines if line.split("#", 1)[0].strip()]


def _register_optional_commands() -> None:
    """Commands in their own modules; each module imports only typer at import time."""
    from dflash_ckpt.commands import normalize_cmd, probe_cmd, smoke_cmd

    normalize_cmd.register(app)
    smoke_cmd.register(app)
    probe_cmd.register(app)


_register_optional_commands()


def run(argv: list[str] | None = None) -> int:
    """Run the CLI and return its exit code; user errors become one line on stderr.

    Tests call this in-process; ``main`` is the console script. Usage errors are the parser's
    (exit 2); a ``DFlashCkptError`` from any command is printed as one line, never a traceback.
    """
    try:
        app(args=argv, prog_name="dflash-ckpt")
    except SystemExit as exc:
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    except DFlashCkptError as err:
        print(f"error: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return 0


def main() -> None:
    """Console entry point."""
    sys.exit(run())
