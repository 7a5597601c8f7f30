"""The Python API: each command as a function, keywords named as the CLI's long options.

``inspect``, ``normalize``, ``smoke_run`` and ``probe_taps`` return a result with ``.ok``,
``.exit_code``, ``.findings``, ``.to_dict()`` (the command's ``--json`` result, one element of
``results``) and ``.envelope()`` (the whole ``--json`` document). They print nothing, never call
``sys.exit`` and show no progress bar unless asked (``progress`` / ``copy_progress``; Hub download
bars stay off unless ``HF_HUB_DISABLE_PROGRESS_BARS`` is set otherwise); a problem
that stops a run is raised as ``DFlashCkptError`` with ``.code`` (the DF rule code), ``.exit_code``
and ``.message``. Each wraps the ``run_<command>`` function the CLI runs (with a call's own Hub
deadline and no download bars), so a result here is the CLI's document. Importing this module imports nothing heavy:
each function imports its command's run when called (torch only for smoke_run and probe_taps).
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Iterator, Sequence

from dflash_ckpt.errors import DFlashCkptError

if TYPE_CHECKING:
    from dflash_ckpt.commands.inspect_cmd import InspectRun
    from dflash_ckpt.commands.probe_run import ProbeResult
    from dflash_ckpt.commands.smoke_run import SmokeResult
    from dflash_ckpt.normalize.run import Outcome

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


def inspect(draft: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], target: str | os.PathLike[str] | None = None,
            **options: Any) -> InspectRun:
    """Check a draft folder or Hub repo id (and its pairing with ``target``) from config.json and
    safetensors headers, as ``dflash-ckpt inspect`` does. Options: ``revision``, ``token``,
    ``strict``, ``select``, ``ignore``, ``require_engines`` (lists of codes or names).

    An unreadable draft is a result (``.exit_code`` 2, its error in ``.to_dict()["error"]``), as
    in the CLI's document; an unreadable target or a bad option raises ``DFlashCkptError``. A
    sequence of drafts gives one result each in ``.envelope()["results"]``.
    """
    from dflash_ckpt.commands.inspect_cmd import run_inspect

    drafts = os.fspath(draft) if isinstance(draft, (str, os.PathLike)) else [os.fspath(d) for d in draft]
    with _call():
        return run_inspect(drafts, None if target is None else os.fspath(target), **options)


def normalize(draft: str | os.PathLike[str], out: str | os.PathLike[str] | None = None, **options: Any) -> Outcome:
    """Rewrite a draft's config.json into the canonical nested form, as ``dflash-ckpt normalize``
    does: into the new folder ``out``, or with ``in_place=True``, ``check=True`` or ``dry_run=True``.
    Other options are the CLI's (``force``, ``copy``, ``target_layer_ids``, ``block_size``, ...;
    ``progress=True`` shows a copy bar on stderr). A refusal raises ``DFlashCkptError``, nothing written.
    """
    from dflash_ckpt.commands.normalize_run import run_normalize

    with _call():
        return run_normalize(os.fspath(draft), out, **options)


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


def smoke_run(draft: str | os.PathLike[str], target: str | os.PathLike[str], **options: Any) -> SmokeResult:
    """Decode with the target alone and with DFlash, check the outputs match and measure
    acceptance and speed, as ``dflash-ckpt smoke-run`` does (needs the ``run`` extra). Options are
    the CLI's long options (``prompt``: a list of texts, ``max_new_tokens``, ``device``,
    ``backend``, ...); ``progress``: a rich ``Progress`` to show, ``log``: a callable for the loading line.
    """
    from dflash_ckpt.commands.options import require_run_extra
    from dflash_ckpt.commands.smoke_run import run_smoke_run

    require_run_extra("smoke-run")
    with _call(), _caller_torch_threads():
        return run_smoke_run(os.fspath(draft), os.fspath(target), **options)


def probe_taps(draft: str | os.PathLike[str], target: str | os.PathLike[str], **options: Any) -> ProbeResult:
    """Recover (or check) the draft's target_layer_ids by measuring acceptance with candidate tap
    sets, as ``dflash-ckpt probe-taps`` does (needs the ``run`` extra). Options are the CLI's long
    options (``budget``, ``max_new_tokens``, ``write``, ``force``, ...; ``copy_progress=True``
    shows a copy bar with ``write``). A refused ``write`` is in ``.to_dict()["write"]`` and the exit code.
    """
    from dflash_ckpt.commands.options import require_run_extra
    from dflash_ckpt.commands.probe_run import run_probe_taps

    require_run_extra("probe-taps")
    with _call(), _caller_torch_threads():
        return run_probe_taps(os.fspath(draft), os.fspath(target), **options)
