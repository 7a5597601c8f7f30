"""Each command's options and every default, once: one dataclass per command, torch-free
(inspect's in ``run/inspect_options.py``, so that inspect starts without building these).

The fields are the CLI's long options (``--no-chat-template`` is ``no_chat_template``, ``-p`` is
``prompt``, ``--prompts`` the JSONL file), with the CLI's defaults: each ``commands/*_cmd.py`` builds its dataclass by
keyword, each field from the typer parameter of its name (a test holds that every field is
passed so), ``api.py`` from its keywords (a test holds each API signature equal to the fields),
and the run functions in ``run/`` take them. ``validate`` raises the usage errors (exit 2) before
anything is read; it imports the runtime's checks (torch) only when called.

Only the standard library is imported here, so the CLI can read the defaults at start-up.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Sequence

from dflash_ckpt.run.inspect_options import PathText

#: Why 2.0: see ``dflash_ckpt/runtime/measure.py``'s docstring.
DEFAULT_MIN_ACCEPTANCE = 2.0
DEFAULT_MAX_NEW_TOKENS = 128
#: Candidates probe-taps' report lists (the JSON lists all).
DEFAULT_TOP = 5
#: ``--draft-dtype stored`` / ``--target-dtype stored``: run the dtype the weights are stored in
#: (what engines that load a checkpoint as it is do), read from the safetensors headers.
STORED = "stored"
#: ``--sampling``: the values of ``--temperature`` and its siblings, or the target's own
#: ``generation_config.json`` (``run/sampling_settings.from_generation_config``).
SAMPLING_SOURCES = ("options", "generation-config")
#: How to add the ``run`` extra, as README's set-up line installs it (from a clone, CPU torch first).
RUN_EXTRA_HINT = ('in the clone\'s root, pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu '
                  '(or the CUDA build), then pip install -e ".[run]"')


def require_run_extra(command: str) -> None:
    """A one-line usage error (exit 2) naming the install line when the ``run`` extra is missing
    (made before any module that imports torch: DF004, not a ``ModuleNotFoundError``)."""
    import importlib.util

    missing = [m for m in ("torch", "tokenizers", "jinja2") if importlib.util.find_spec(m) is None]
    if missing:
        from dflash_ckpt.errors import UsageError

        raise UsageError(f"{command} needs {', '.join(missing)}: {RUN_EXTRA_HINT}")


@dataclass
class NormalizeOptions:
    """``dflash-ckpt normalize DRAFT [OUT]``; checked against each other by ``run/normalize.make_request``."""

    draft: PathText
    out: str | Path | None = None
    in_place: bool = False
    no_backup: bool = False
    check: bool = False
    dry_run: bool = False
    force: bool = False
    copy: bool = False
    external_links: str = "copy"
    target_layer_ids: str | list[int] | None = None
    block_size: int | None = None
    mask_token_id: int | None = None
    num_target_layers: int | None = None
    layer_types: str | list[str] | None = None
    prefer: str | None = None
    no_mirrors: bool = False
    target: PathText | None = None
    revision: str | None = None
    token: str | None = None


@dataclass
class RunOptions:
    """The options of a command that loads the pair and decodes prompts (smoke-run, probe-taps:
    the same flags, spelled and defaulted alike). ``prompt``: the ``-p`` texts; ``prompts``: the
    JSONL file."""

    draft: PathText
    target: PathText
    prompt: list[str] = field(default_factory=list)
    prompts: PathText | None = None
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    min_acceptance: float = DEFAULT_MIN_ACCEPTANCE
    draft_dtype: str = "bfloat16"
    target_dtype: str | None = None
    device: str = "auto"
    #: ``auto``, ``native`` or ``transformers`` (``runtime/backend.py``).
    backend: str = "auto"
    block_size: int | None = None
    thinking: bool = False
    no_chat_template: bool = False
    tokenizer: PathText | None = None
    ignore_eos: bool = False
    revision: str | None = None
    token: str | None = None
    #: ``--layout``: run the draft as ``1+N`` or ``anchor-first`` whatever its config declares
    #: (smoke-run's option; probe-taps measures both layouts itself and forces none).
    layout: ClassVar[str | None] = None
    #: ``--suite``: a prompt suite of the package (``sources/suites.py``) in place of ``-p``/``--prompts``
    #: (smoke-run's option; probe-taps takes none).
    suite: ClassVar[str | None] = None

    @property
    def chat_template(self) -> bool:
        return not self.no_chat_template

    @property
    def custom_prompts(self) -> bool:
        """The user gave prompts (``-p`` or ``--prompts``), not the built-in ones."""
        return bool(self.prompt or self.prompts)

    def validate(self) -> None:
        """Usage errors (exit 2) in the options, before anything is read: the shared ones, then
        the command's own (``validate_own``), then the dtypes."""
        from dflash_ckpt.draftspec.layout import ANCHOR_FIRST, ONE_PLUS_N
        from dflash_ckpt.errors import UsageError
        from dflash_ckpt.runtime.backend import BACKENDS
        from dflash_ckpt.runtime.loading import parse_dtype

        if self.max_new_tokens < 1:
            raise UsageError(f"--max-new-tokens {self.max_new_tokens}: must be at least 1")
        if self.block_size is not None and self.block_size < 2:
            raise UsageError(f"--block-size {self.block_size}: must be at least 2 (anchor plus one draft)")
        if not math.isfinite(self.min_acceptance) or self.min_acceptance < 0:
            raise UsageError(f"--min-acceptance {self.min_acceptance}: must be a number >= 0")
        if self.backend not in BACKENDS:
            raise UsageError(f"--backend {self.backend!r}: use auto, native or transformers")
        if self.layout is not None and self.layout not in (ONE_PLUS_N, ANCHOR_FIRST):
            raise UsageError(f"--layout {self.layout!r}: use 1+N or anchor-first")
        self.validate_own()
        for option, name in (("--draft-dtype", self.draft_dtype), ("--target-dtype", self.target_dtype)):
            if name is not None and name != STORED:
                try:
                    parse_dtype(name, option)
                except UsageError:
                    raise UsageError(f"{option} {name!r}: use bfloat16, float16, float32 or stored") from None

    def validate_own(self) -> None:
        """The command's own checks (none here)."""


@dataclass
class SmokeOptions(RunOptions):
    """``dflash-ckpt smoke-run DRAFT --target TARGET``: ``RunOptions`` and smoke-run's own."""

    layout: str | None = None  # type: ignore[misc]  # smoke-run's --layout (a field here)
    suite: str | None = None  # type: ignore[misc]  # smoke-run's --suite (a field here)
    tie_tolerance: float | None = None
    threads: int | None = None
    no_compile: bool = False
    #: ``reference`` (our runtime), ``vllm`` or ``both`` (``engine_runners/``), and what goes through to vLLM.
    engine: str = "reference"
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    max_model_len: int | None = None
    engine_arg: list[str] = field(default_factory=list)
    engine_timeout: float | None = None
    #: ``--engine vllm-serve``: requests at once in the load phase (``None``: ``serve_load.DEFAULT_CONCURRENCY``).
    concurrency: int | None = None
    #: Sampling (``run/sampling_settings.py``): temperature 0 is greedy, the default, with its
    #: exact lossless check; ``verify`` names the rule (``match`` or ``rejection``); ``sampling``
    #: ``generation-config`` takes temperature, top-p and top-k from the target's file instead.
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int = 0
    verify: str = "match"
    sampling: str = "options"
    #: One untimed DFlash decode before the timed ones (the first run pays one-time costs).
    warmup: ClassVar[bool] = True

    @property
    def compile(self) -> bool:
        return not self.no_compile

    def validate_own(self) -> None:
        from dflash_ckpt.engine_runners.smoke_engine import validate_engine_options
        from dflash_ckpt.errors import UsageError

        validate_engine_options(self)
        if self.suite is not None:
            from dflash_ckpt.sources.suites import load_suite

            load_suite(self.suite)  # an unknown name: one DF004 line naming the choices
            if self.custom_prompts:
                raise UsageError(f"--suite {self.suite} runs the suite's prompts: give it or -p/--prompts, not both",
                                 key="--suite")
        if self.tie_tolerance is not None and (not math.isfinite(self.tie_tolerance) or self.tie_tolerance < 0):
            raise UsageError(f"--tie-tolerance {self.tie_tolerance}: must be a number >= 0")
        self.validate_threads()
        self.validate_sampling()

    def validate_threads(self) -> None:
        """``--threads`` from 1 to ``MAX_THREADS_PER_CPU`` per logical CPU: a larger count only
        oversubscribes the cores, and a huge one makes OpenMP reserve memory for every thread's
        stack and end the process (through the API: the caller's) with no line."""
        from dflash_ckpt.errors import UsageError
        from dflash_ckpt.limits import MAX_THREADS_PER_CPU

        if self.threads is None:
            return
        if self.threads < 1:
            raise UsageError(f"--threads {self.threads}: must be at least 1", key="--threads")
        cpus = os.cpu_count() or 1
        if self.threads > MAX_THREADS_PER_CPU * cpus:
            raise UsageError(f"--threads {self.threads}: at most {MAX_THREADS_PER_CPU * cpus} "
                             f"({MAX_THREADS_PER_CPU} per logical CPU; this machine has {cpus})", key="--threads")

    def validate_sampling(self) -> None:
        """DF004 lines for bad sampling values, before anything is read. vLLM samples too
        (``engine_runners/``): it verifies with its own rule, ``rejection``, which the report names."""
        from dflash_ckpt.errors import UsageError
        from dflash_ckpt.run.sampling_settings import make_settings

        if self.sampling not in SAMPLING_SOURCES:
            raise UsageError(f"--sampling {self.sampling!r}: use options or generation-config", key="--sampling")
        make_settings(self.temperature, self.top_p, self.top_k, self.seed, self.verify)


@dataclass
class ProbeOptions(RunOptions):
    """``dflash-ckpt probe-taps DRAFT --target TARGET``: ``RunOptions`` and probe-taps' own."""

    budget: int | None = None
    top: int = DEFAULT_TOP
    write: str | Path | None = None
    force: bool = False
    #: ``--layout-for``: the engines whose layout key ``--write`` records (``draftspec.layout_keys``).
    layout_for: Sequence[str] = ()

    def validate_own(self) -> None:
        from dflash_ckpt.errors import UsageError
        from dflash_ckpt.draftspec.layout_keys import require_layout_engines

        require_layout_engines(tuple(self.layout_for))
        if self.write is None:  # options that only change what --write does would be ignored without a word
            if self.layout_for:
                raise UsageError(f"--layout-for {' '.join(self.layout_for)}: names the engines whose layout key "
                                 "--write records; give --write OUT too, or drop --layout-for", key="--layout-for")
            if self.force:
                raise UsageError("--force: replaces --write's OUT folder (and writes a winner within noise); give "
                                 "--write OUT too, or drop --force", key="--force")
        if self.budget is not None and self.budget < 1:
            raise UsageError(f"--budget {self.budget}: must be at least 1 candidate")
        if self.top < 1:
            raise UsageError(f"--top {self.top}: must be at least 1")


__all__ = ["SAMPLING_SOURCES", "STORED", "DEFAULT_MAX_NEW_TOKENS", "DEFAULT_MIN_ACCEPTANCE", "DEFAULT_TOP", "NormalizeOptions",
           "ProbeOptions", "RunOptions", "SmokeOptions", "require_run_extra"]
