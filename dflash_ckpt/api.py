"""The Python API: each command as a function, keywords named as the CLI's long options.

``inspect``, ``normalize``, ``smoke_run`` and ``probe_taps`` return a result with ``.ok``,
``.exit_code``, ``.findings``, ``.to_dict()`` (the command's ``--json`` result, one element of
``results``) and ``.envelope()`` (the whole ``--json`` document). They print nothing, never call
``sys.exit`` and show no progress bar unless asked (``progress`` / ``copy_progress``; Hub download
bars stay off unless ``HF_HUB_DISABLE_PROGRESS_BARS`` is set otherwise). Every problem is a
``DFlashCkptError`` with ``.code`` (the DF rule code), ``.exit_code`` and ``.message``: one that
stops a run; an argument of the wrong type, an unknown keyword or a missing argument (DF010,
checked against these signatures by ``api_types.checked_call`` before anything is read); a
missing ``run`` extra (DF004, naming the install line). Keywords are the CLI's long options with
its defaults; ``prompt`` is one text or a list. Each signature spells the fields of its command's
options dataclass (``run/options.py``, a test holds them equal) and the run's own keywords
(``progress``, ``log``); each fills the dataclass and calls the ``run_<command>`` function the CLI
runs (with a call's own Hub deadline and no download bars), so a result here is the CLI's
document. Importing this module imports nothing heavy: each function imports its command's run
when called (torch only for smoke_run and probe_taps).
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from typing import TYPE_CHECKING, Callable, Iterator, Sequence

from dflash_ckpt.api_types import ProgressBar, checked_call, path_text, texts
from dflash_ckpt.errors import DFlashCkptError

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


def _need_run_extra(command: str) -> None:
    """The ``run`` extra's check, made before any module that imports torch: DF004 naming the
    install line, not a ``ModuleNotFoundError``."""
    from dflash_ckpt.run.options import require_run_extra

    require_run_extra(command)


@checked_call
def inspect(draft: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], target: str | os.PathLike[str] | None = None,
            *, revision: str | None = None, token: str | None = None, strict: bool = False,
            select: str | Sequence[str] | None = (), ignore: str | Sequence[str] | None = (),
            require_engines: str | Sequence[str] | None = ()) -> InspectRun:
    """Check a draft folder or Hub repo id (and its pairing with ``target``) from config.json and
    safetensors headers, as ``dflash-ckpt inspect`` does. ``select``, ``ignore`` and
    ``require_engines``: a code or name, a comma list, or a list of them.

    An unreadable draft is a result (``.exit_code`` 2, its error in ``.to_dict()["error"]``), as
    in the CLI's document; an unreadable target or a bad option raises ``DFlashCkptError``. A
    sequence of drafts gives one result each in ``.envelope()["results"]``.
    """
    from dflash_ckpt.run.inspect import run_inspect
    from dflash_ckpt.run.options import InspectOptions, fill

    drafts = os.fspath(draft) if isinstance(draft, (str, os.PathLike)) else [os.fspath(d) for d in draft]
    if not drafts:
        raise DFlashCkptError("draft=[] names no draft; give at least one", code="DF010", key="draft",
                              path="dflash_ckpt.inspect()")
    options = fill(InspectOptions, locals(), draft=drafts, target=path_text(target), select=texts(select),
                   ignore=texts(ignore), require_engines=texts(require_engines))
    with _call():
        return run_inspect(options)


@checked_call
def normalize(draft: str | os.PathLike[str], out: str | os.PathLike[str] | None = None, *, in_place: bool = False,
              no_backup: bool = False, check: bool = False, dry_run: bool = False, force: bool = False,
              copy: bool = False, external_links: str = "copy",
              target_layer_ids: str | Sequence[int] | None = None, block_size: int | None = None,
              mask_token_id: int | None = None, num_target_layers: int | None = None,
              layer_types: str | Sequence[str] | None = None, prefer: str | None = None, no_mirrors: bool = False,
              target: str | os.PathLike[str] | None = None, revision: str | None = None, token: str | None = None,
              progress: bool = False) -> Outcome:
    """Rewrite a draft's config.json into the canonical nested form, as ``dflash-ckpt normalize``
    does: into the new folder ``out``, or with ``in_place=True``, ``check=True`` or ``dry_run=True``.
    ``progress=True`` shows a copy bar on stderr. A refusal raises ``DFlashCkptError``, nothing written.
    """
    from dflash_ckpt.run.normalize import run_normalize
    from dflash_ckpt.run.options import NormalizeOptions, fill

    options = fill(NormalizeOptions, locals(), draft=os.fspath(draft), out=path_text(out), target=path_text(target),
                   target_layer_ids=target_layer_ids if isinstance(target_layer_ids, (str, type(None))) else list(target_layer_ids),
                   layer_types=layer_types if isinstance(layer_types, (str, type(None))) else list(layer_types))
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


@checked_call
def smoke_run(draft: str | os.PathLike[str], target: str | os.PathLike[str], *, prompt: str | Sequence[str] | None = (),
              prompts: str | os.PathLike[str] | None = None, suite: str | None = None, max_new_tokens: int = 128, min_acceptance: float = 2.0,
              draft_dtype: str = "bfloat16",
              target_dtype: str | None = None, device: str = "auto",
              backend: str = "auto", block_size: int | None = None, layout: str | None = None,
              thinking: bool = False, no_chat_template: bool = False, tokenizer: str | os.PathLike[str] | None = None,
              ignore_eos: bool = False, tie_tolerance: float | None = None, revision: str | None = None,
              token: str | None = None, threads: int | None = None, no_compile: bool = False,
              engine: str = "reference", tensor_parallel_size: int = 1, pipeline_parallel_size: int = 1,
              max_model_len: int | None = None, engine_arg: str | Sequence[str] | None = (),
              engine_timeout: float | None = None, concurrency: int | None = None, temperature: float = 0.0,
              top_p: float = 1.0, top_k: int = 0,
              seed: int = 0, verify: str = "match", sampling: str = "options",
              progress: ProgressBar | None = None, log: Callable[[str], None] | None = None) -> SmokeResult:
    """Decode with the target alone and with DFlash, check the outputs match and measure
    acceptance and speed, as ``dflash-ckpt smoke-run`` does (needs the ``run`` extra). ``prompt``:
    one text or a list (default: the built-in prompts); ``prompts``: a JSONL file; ``suite``: one of
    ``math``, ``code``, ``chat``, ``long``, ``all`` instead of either; ``progress``: a
    rich ``Progress`` to show, ``log``: a callable for the loading line. ``temperature`` > 0 (or
    ``sampling="generation-config"``) samples, verifying blocks by the ``verify`` rule;
    ``engine="vllm-serve"`` runs the printed serve line in vLLM's server, ``concurrency`` requests at
    once in its load phase.
    """
    _need_run_extra("smoke-run")
    from dflash_ckpt.run.options import SmokeOptions, fill
    from dflash_ckpt.run.smoke import run_smoke_run

    options = fill(SmokeOptions, locals(), draft=os.fspath(draft), target=os.fspath(target), prompt=texts(prompt),
                   prompts=path_text(prompts), tokenizer=path_text(tokenizer), engine_arg=texts(engine_arg))
    with _call(), _caller_torch_threads():
        return run_smoke_run(options, progress=progress, log=log)


@checked_call
def probe_taps(draft: str | os.PathLike[str], target: str | os.PathLike[str], *, prompt: str | Sequence[str] | None = (),
               prompts: str | os.PathLike[str] | None = None, budget: int | None = None, max_new_tokens: int = 128,
               min_acceptance: float = 2.0, write: str | os.PathLike[str] | None = None, force: bool = False,
               top: int = 5, draft_dtype: str = "bfloat16",
               target_dtype: str | None = None, device: str = "auto",
               backend: str = "auto", block_size: int | None = None,
               thinking: bool = False, no_chat_template: bool = False, tokenizer: str | os.PathLike[str] | None = None,
               ignore_eos: bool = False, revision: str | None = None, token: str | None = None,
               layout_for: str | Sequence[str] | None = (),
               log: Callable[[str], None] | None = None, copy_progress: bool = False,
               progress: ProgressBar | None = None) -> ProbeResult:
    """Recover (or check) the draft's target_layer_ids by measuring acceptance with candidate tap
    sets, as ``dflash-ckpt probe-taps`` does (needs the ``run`` extra). ``write``: a new folder for
    a normalized copy with the winner (``copy_progress=True`` shows a copy bar); a refused ``write``
    is in ``.to_dict()["write"]`` and the exit code.
    """
    _need_run_extra("probe-taps")
    from dflash_ckpt.run.options import ProbeOptions, fill
    from dflash_ckpt.run.probe import run_probe_taps

    options = fill(ProbeOptions, locals(), draft=os.fspath(draft), target=os.fspath(target), prompt=texts(prompt),
                   prompts=path_text(prompts), write=path_text(write), tokenizer=path_text(tokenizer),
                   layout_for=texts(layout_for))
    with _call(), _caller_torch_threads():
        return run_probe_taps(options, log=log, copy_progress=copy_progress, progress=progress)
