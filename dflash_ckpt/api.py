"""The Python API: each command as a function, keywords named as the CLI's long options.

``inspect``, ``normalize``, ``smoke_run`` and ``probe_taps`` return a result with ``.ok``,
``.exit_code``, ``.findings``, ``.to_dict()`` (the command's ``--json`` result, one element of
``results``) and ``.envelope()`` (the whole ``--json`` document). They print nothing, never call
``sys.exit`` and show no progress bar unless asked (``progress`` / ``copy_progress``; Hub download
bars stay off unless ``HF_HUB_DISABLE_PROGRESS_BARS`` is set otherwise). Every problem is a
``DFlashCkptError`` with ``.code`` (the DF rule code), ``.exit_code`` and ``.message``: one that
stops a run; an argument of the wrong type, an unknown keyword or a missing argument (DF010,
checked before anything is read); a missing ``run`` extra (DF004, naming the install line). Each
signature is made from its command's options dataclass (``run/options.py``: ``api_types.api_command``),
so the keywords are the CLI's long options with its defaults, written once; a path takes an
``os.PathLike`` too and ``prompt`` one text or a list. Each function calls the ``run_<command>``
function the CLI runs (with a call's own Hub deadline and no download bars), with the run's own
keywords (``progress``, ``log``), so a result here is the CLI's document. Importing this module
imports nothing heavy: each function imports its command's run when called (torch only for
smoke_run and probe_taps).
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from typing import TYPE_CHECKING, Callable, Iterator

from dflash_ckpt.api_types import ProgressBar, api_command
from dflash_ckpt.errors import DFlashCkptError
from dflash_ckpt.run.inspect_options import InspectOptions
from dflash_ckpt.run.options import NormalizeOptions, ProbeOptions, SmokeOptions, require_run_extra

if TYPE_CHECKING:
    from dflash_ckpt.canonical.run import Outcome
    from dflash_ckpt.run.inspect import InspectRun
    from dflash_ckpt.run.probe_result import ProbeResult
    from dflash_ckpt.run.smoke_result import SmokeResult

__all__ = ["DFlashCkptError", "inspect", "normalize", "probe_taps", "smoke_run"]


@contextmanager
def _call() -> Iterator[None]:
    """One API call: its own Hub deadline, as each CLI run has (an earlier call's is not ours),
    and no download bars (``HF_HUB_DISABLE_PROGRESS_BARS``, restored after; a value the caller
    set wins), as ``--json`` runs have none."""
    budget = sys.modules.get("dflash_ckpt.sources.hub.budget")
    if budget is not None:
        budget.reset()
    if "HF_HUB_DISABLE_PROGRESS_BARS" in os.environ:
        yield
        return
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    try:
        yield
    finally:
        os.environ.pop("HF_HUB_DISABLE_PROGRESS_BARS", None)


@api_command(InspectOptions)
def inspect(options: InspectOptions) -> InspectRun:
    """Check a draft folder or Hub repo id (and its pairing with ``target``) from config.json and
    safetensors headers, as ``dflash-ckpt inspect`` does. ``select``, ``ignore`` and
    ``require_engines``: a code or name, a comma list, or a list of them.

    An unreadable draft is a result (``.exit_code`` 2, its error in ``.to_dict()["error"]``), as
    in the CLI's document; an unreadable target or a bad option raises ``DFlashCkptError``. A
    sequence of drafts gives one result each in ``.envelope()["results"]``.
    """
    from dflash_ckpt.run.inspect import run_inspect

    if not options.draft:
        raise DFlashCkptError("draft=[] names no draft; give at least one", code="DF010", key="draft",
                              path="dflash_ckpt.inspect()")
    with _call():
        return run_inspect(options)


@api_command(NormalizeOptions)
def normalize(options: NormalizeOptions, *, progress: bool = False) -> Outcome:
    """Rewrite a draft's config.json into the canonical nested form, as ``dflash-ckpt normalize``
    does: into the new folder ``out``, or with ``in_place=True``, ``check=True`` or ``dry_run=True``.
    ``progress=True`` shows a copy bar on stderr. A refusal raises ``DFlashCkptError``, nothing written.
    """
    from dflash_ckpt.run.normalize import run_normalize

    with _call():
        return run_normalize(options, progress=progress)


@contextmanager
def _caller_torch_threads() -> Iterator[None]:
    """The caller's torch thread count, restored when the call returns or raises: a run sets its
    own (``--threads``, or one on a small CPU), which is the run's business, not the caller's."""
    import torch

    before = torch.get_num_threads()
    try:
        yield
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)


@api_command(SmokeOptions)
def smoke_run(options: SmokeOptions, *, progress: ProgressBar | None = None,
              log: Callable[[str], None] | None = None) -> SmokeResult:
    """Decode with the target alone and with DFlash, check the outputs match and measure
    acceptance and speed, as ``dflash-ckpt smoke-run`` does (needs the ``run`` extra). ``prompt``:
    one text or a list (default: the built-in prompts); ``prompts``: a JSONL file; ``suite``: one of
    ``math``, ``code``, ``chat``, ``long``, ``all`` instead of either; ``progress``: a
    rich ``Progress`` to show, ``log``: a callable for the loading line. ``temperature`` > 0 (or
    ``sampling="generation-config"``) samples, verifying blocks by the ``verify`` rule;
    ``engine="vllm-serve"`` runs the printed serve line in vLLM's server, ``concurrency`` requests at
    once in its load phase.
    """
    require_run_extra("smoke-run")
    from dflash_ckpt.run.smoke import run_smoke_run

    with _call(), _caller_torch_threads():
        return run_smoke_run(options, progress=progress, log=log)


@api_command(ProbeOptions)
def probe_taps(options: ProbeOptions, *, log: Callable[[str], None] | None = None, copy_progress: bool = False,
               progress: ProgressBar | None = None) -> ProbeResult:
    """Recover (or check) the draft's target_layer_ids by measuring acceptance with candidate tap
    sets, as ``dflash-ckpt probe-taps`` does (needs the ``run`` extra). ``write``: a new folder for
    a normalized copy with the winner (``copy_progress=True`` shows a copy bar); a refused ``write``
    is in ``.to_dict()["write"]`` and the exit code.
    """
    require_run_extra("probe-taps")
    from dflash_ckpt.run.probe import run_probe_taps

    with _call(), _caller_torch_threads():
        return run_probe_taps(options, log=log, copy_progress=copy_progress, progress=progress)
