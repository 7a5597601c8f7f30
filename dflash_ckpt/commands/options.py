"""Options every command shares, spelled once (as the ``hf`` CLI spells them), and what they switch.

Imported at every start of the CLI: typer and the standard library only.
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from typing import Iterator

import typer

JsonOpt = typer.Option(False, "--json", help="Print one JSON document instead of the report (progress bars off).")
QuietOpt = typer.Option(False, "-q", "--quiet", help="Print errors only (progress bars off).")
RevisionOpt = typer.Option(None, "--revision", help="Hub revision (branch, tag or commit) of DRAFT; or write org/name@rev.", show_default=False)
TokenOpt = typer.Option(None, "--token", help="Hugging Face token for gated or private repos (default: HF_TOKEN or the saved login).", show_default=False)


def silence_progress(silent: bool) -> None:
    """With ``-q`` or ``--json``, turn off huggingface_hub's download bars (they write to stderr).

    The environment variable takes effect when huggingface_hub is imported later (the usual case:
    only the command bodies import it); if it is loaded already, its switch is turned directly. An
    explicit ``HF_HUB_DISABLE_PROGRESS_BARS`` of the user's wins either way.
    """
    if not silent or "HF_HUB_DISABLE_PROGRESS_BARS" in os.environ:
        return
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    if "huggingface_hub" in sys.modules:
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()


@contextmanager
def loading_note(command: str, draft: str, target: str, silent: bool) -> Iterator[None]:
    """While torch and the runtime load (seconds of silence otherwise), one line on a terminal's
    stderr saying so; it is erased when the block ends, so the command's own lines (or its one
    error line) follow on a clean line. Nothing with ``-q``/``--json`` or off a terminal."""
    show = not silent and sys.stderr.isatty()
    if show:
        from dflash_ckpt.errors import inert

        sys.stderr.write(inert(f"{command}: loading torch and the reference runtime for {draft} on {target} ..."))
        sys.stderr.flush()
    try:
        yield
    finally:
        if show:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()


def reflow(doc: str | None) -> str | None:
    """A command's docstring as help text that the terminal wraps, not the source file.

    typer's rich help keeps every line break after the first paragraph, so a docstring wrapped
    at 100 columns in the source breaks mid-sentence at 80 and leaves short lines at 120. Each
    paragraph becomes one line (list items, ``- ...``, keep their own line)."""
    if not doc:
        return doc
    import inspect
    import re

    paragraphs = inspect.cleandoc(doc).split("\n\n")
    out = []
    for para in paragraphs:
        lines = [line.strip() for line in para.splitlines() if line.strip()]
        text = ""
        for line in lines:
            if text and not re.match(r"([-*•]|\d+[.)]) ", line):
                text += " " + line
            else:
                text += ("\n" if text else "") + line
        out.append(text)
    return "\n\n".join(out)


def reflow_help(app: typer.Typer) -> None:
    """``reflow`` every command's help (its ``help=`` or its docstring) and the app's own."""
    for info in app.registered_commands:
        info.help = reflow(info.help or (info.callback.__doc__ if info.callback else None))
    if app.registered_callback is not None:
        cb = app.registered_callback
        cb.help = reflow(cb.help or (cb.callback.__doc__ if cb.callback else None))
