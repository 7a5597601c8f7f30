"""Options every command shares, spelled once (as the ``hf`` CLI spells them), and what they switch.

Imported at every start of the CLI: typer and the standard library only.
"""

from __future__ import annotations

import os
import sys

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
