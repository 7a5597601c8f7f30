"""One plan per run: everything ``smoke-run`` and ``probe-taps`` need, resolved once.

From the options and the ``DraftSpec`` that passed inspect's checks, ``plan_run`` works out the
backend's target settings, the draft's runtime settings, the block size (``--block-size`` or the
trained one), the cache capacity (and whether the prompts fit the target's positions), the device,
the dtypes and the weight inventories. The runtime then takes these plain values; nothing
downstream reads a config or a safetensors header again, nor works out the block size anew.

The options shared by both commands (``RunOptions``) are validated here too, once, before
anything is read; the backend string is checked with them.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import torch

from dflash_ckpt.errors import InputError, UsageError
from dflash_ckpt.draftspec.layout import ANCHOR_FIRST, ONE_PLUS_N, BlockLayout
from dflash_ckpt.runtime.args import DraftArgs
from dflash_ckpt.runtime.backend import BACKENDS, TargetPlan, plan_target
from dflash_ckpt.runtime.loading import inventory, parse_dtype, stored_dtype
from dflash_ckpt.sources.prompts import Prompt, PromptEncoder, gather_prompts
from dflash_ckpt.sources.base import user_path
from dflash_ckpt.sources.resolve import local_folder
from dflash_ckpt.sources.weights import WeightInventory
from dflash_ckpt.draftspec.specs import DraftSpec

WEIGHT_FILES = ["config.json", "*.safetensors", "*.safetensors.index.json"]
TARGET_FILES = [*WEIGHT_FILES, "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                "special_tokens_map.json", "chat_template.jinja", "chat_template.json"]
#: At most this many logical CPUs counts as a small CPU: one thread there by default, because
#: OpenMP threads spin-waiting against other processes made runs 10-100x slower.
SMALL_CPU = 4
#: ``--layout`` values: the two block layouts (``draftspec/layout.py``).
LAYOUTS = (ONE_PLUS_N, ANCHOR_FIRST)


@dataclass
class RunOptions:
    """The options of a command that loads the pair and decodes prompts (same flags in both).

    Defaults are the CLI's (``commands/options.py`` spells them); ``prompts`` are ``-p`` texts,
    ``prompts_file`` is ``--prompts``.
    """

    draft: str
    target: str
    prompts: list[str] = field(default_factory=list)
    prompts_file: str | None = None
    max_new_tokens: int = 128
    min_acceptance: float = 2.0
    draft_dtype: str = "bfloat16"
    target_dtype: str | None = None
    device: str = "auto"
    thinking: bool = False
    chat_template: bool = True
    tokenizer: str | None = None
    block_size: int | None = None
    ignore_eos: bool = False
    revision: str | None = None
    token: str | None = None
    #: ``auto``, ``native`` or ``transformers`` (``runtime/backend.py``).
    backend: str = "auto"
    #: ``--layout``: run the draft as ``1+N`` or ``anchor-first`` whatever its config declares.
    layout: str | None = None

    def validate(self) -> None:
        """Usage errors (exit 2) in the options, before anything is read: the shared ones, then
        the command's own (``validate_own``), then the dtypes."""
        if self.max_new_tokens < 1:
            raise UsageError(f"--max-new-tokens {self.max_new_tokens}: must be at least 1")
        if self.block_size is not None and self.block_size < 2:
            raise UsageError(f"--block-size {self.block_size}: must be at least 2 (anchor plus one draft)")
        if not math.isfinite(self.min_acceptance) or self.min_acceptance < 0:
            raise UsageError(f"--min-acceptance {self.min_acceptance}: must be a number >= 0")
        if self.backend not in BACKENDS:
            raise UsageError(f"--backend {self.backend!r}: use auto, native or transformers")
        if self.layout is not None and self.layout not in LAYOUTS:
            raise UsageError(f"--layout {self.layout!r}: use 1+N or anchor-first")
        self.validate_own()
        parse_dtype(self.draft_dtype, "--draft-dtype")
        if self.target_dtype is not None:
            parse_dtype(self.target_dtype, "--target-dtype")

    def validate_own(self) -> None:
        """The command's own checks (none here)."""


@dataclass(frozen=True)
class RunPlan:
    """What a run loads and how, resolved once from the checked spec and the options."""

    target: TargetPlan
    draft_args: DraftArgs
    #: ``--block-size``, else the trained one.
    block_size: int
    trained_block_size: int
    #: Cache positions: the longest prompt, ``-n`` new tokens, one verify block and the bonus token.
    capacity: int
    device: torch.device
    draft_dtype: torch.dtype
    target_dtype: torch.dtype
    target_inv: WeightInventory
    draft_inv: WeightInventory

    @property
    def backend(self) -> str:
        return self.target.backend


def plan_run(opts: RunOptions, *, draft: DraftSpec, draft_dir: Path, target_dir: Path, target_label: str,
             target_config: dict[str, Any], target_where: str, backend: str,
             prompts: Sequence[Prompt], encoded: Sequence[Sequence[int]],
             target_inv: WeightInventory | None = None) -> RunPlan:
    """The plan for ``backend`` (``native`` or ``transformers``, from ``select_backend``), after
    inspect's checks passed; refuses (exit 2) prompts that do not fit the target's positions.
    ``target_inv``: the target's headers when the caller read them already (they are read once)."""
    target = plan_target(backend, target_config, target_where)
    draft_args = with_layout(DraftArgs.from_spec(draft), opts.layout)
    block = opts.block_size or draft_args.block_size
    capacity = max(len(ids) for ids in encoded) + opts.max_new_tokens + draft_args.block_layout.verify_width(block) + 1
    if target.max_position_embeddings:
        require_positions_fit(prompts, encoded, opts.max_new_tokens, draft_args.block_layout.verify_width(block),
                              target.max_position_embeddings, target_where)
    device, draft_dtype, target_dtype, target_inv = resolve_dtypes(opts, target_dir, target_label, target.dtype, target_inv)
    return RunPlan(target=target, draft_args=draft_args, block_size=block, trained_block_size=draft_args.block_size,
                   capacity=capacity, device=device, draft_dtype=draft_dtype, target_dtype=target_dtype,
                   target_inv=target_inv, draft_inv=read_weights(draft, draft_dir))


def with_layout(args: DraftArgs, layout: str | None) -> DraftArgs:
    """``args`` run in ``layout`` (``--layout``), else as the config declares it."""
    if layout is None:
        return args
    return dataclasses.replace(args, block_layout=BlockLayout(layout, "--layout", {}))


def read_weights(spec: DraftSpec, folder: Path) -> WeightInventory:
    """The draft's inventory as the checks read it (headers are read once per run); the runtime's
    own reading when the spec was built without weights."""
    inv = spec.weights
    if inv is None or inv.problems or not inv.tensors:
        return inventory(Path(folder), spec.label)
    return inv


def require_positions_fit(prompts: Sequence[Prompt], encoded: Sequence[Sequence[int]], max_new_tokens: int,
                    block_size: int, max_positions: int, where: str) -> None:
    """Refuse (exit 2) a run whose longest prompt plus ``-n`` new tokens and one block of drafts
    would pass the target's ``max_position_embeddings``: rope is undefined there, and the caches
    would be sized for it before anything failed."""
    longest = max(range(len(prompts)), key=lambda i: len(encoded[i]))
    need = len(encoded[longest]) + max_new_tokens + block_size
    if need <= max_positions:
        return
    room = max_positions - len(encoded[longest]) - block_size
    fix = f"use -n {room} or less" if room >= 1 else "shorten the prompt"
    raise UsageError(
        f"-n/--max-new-tokens {max_new_tokens}: prompt {prompts[longest].name!r} ({len(encoded[longest])} tokens) "
        f"plus {max_new_tokens} new tokens and a block of {block_size} needs {need} positions, past "
        f"max_position_embeddings {max_positions} of {where}; {fix}"
    )


def resolve_folders(opts: RunOptions) -> tuple[Path, str, Path, str]:
    """``(draft folder, draft label, target folder, target label)``: local folders, or Hub
    snapshots of only the files the run reads."""
    draft_dir, draft_label = local_folder(opts.draft, revision=opts.revision, token=opts.token, role="draft", allow_patterns=WEIGHT_FILES)
    target_dir, target_label = local_folder(opts.target, token=opts.token, role="target", allow_patterns=TARGET_FILES)
    return draft_dir, draft_label, target_dir, target_label


def encode_prompts(opts: RunOptions, target_dir: str | Path) -> tuple[list[Prompt], PromptEncoder, list[list[int]]]:
    """The prompts (``-p``/``--prompts``, or the defaults), the encoder (the target's tokenizer
    unless ``--tokenizer``) and each prompt's token ids; a prompt of no tokens is a usage error."""
    prompts = gather_prompts(opts.prompts, opts.prompts_file)
    tok_dir = user_path(opts.tokenizer, "--tokenizer") if opts.tokenizer else Path(target_dir)
    if opts.tokenizer and not tok_dir.is_dir():
        raise InputError(f"--tokenizer {opts.tokenizer}: no such folder", code="DF001")
    encoder = PromptEncoder(tok_dir, chat_template=opts.chat_template, thinking=opts.thinking)
    encoder.prepare(prompts)  # every rendering in one child process
    encoded = [encoder.encode(p) for p in prompts]
    for p, ids in zip(prompts, encoded):
        if not ids and encoder.uses_template:  # the template dropped the prompt, whatever it was
            what = "no text" if not encoder.render(p) else "text of no tokens"
            raise InputError(
                f"the chat template renders prompt {p.name!r} as {what}; the template "
                "is broken (it drops the messages): fix it, or run with --no-chat-template", code="DF002",
                path=encoder.template_file)
        if not ids:
            raise UsageError(f"prompt {p.name!r} encodes to no tokens; give some text")
    return prompts, encoder, encoded


def resolve_dtypes(opts: RunOptions, target_dir: str | Path, target_label: str, config_dtype: str | None,
                   target_inv: WeightInventory | None = None) -> tuple[torch.device, torch.dtype, torch.dtype, WeightInventory]:
    """``(device, draft dtype, target dtype, target inventory)``. The target runs in
    ``--target-dtype``, else its config's dtype (``config_dtype``), else its stored one. The
    inventory is read here unless the caller read it already (``target_inv``)."""
    device = pick_device(opts.device)
    draft_dtype = parse_dtype(opts.draft_dtype, "--draft-dtype")
    if target_inv is None:
        target_inv = inventory(Path(target_dir), target_label)
    target_dtype = parse_dtype(opts.target_dtype or config_dtype or stored_dtype(target_inv) or "float32", "--target-dtype")
    return device, draft_dtype, target_dtype, target_inv


def pick_device(name: str) -> torch.device:
    """``auto``: CUDA when present, else CPU; an explicit CUDA device must exist."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(name)
    except RuntimeError:
        raise UsageError(f"--device {name!r}: use auto, cpu, cuda or cuda:N") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise UsageError(f"--device {name}: CUDA is not available here (torch {torch.__version__}); use --device cpu")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise UsageError(f"--device {name}: only {torch.cuda.device_count()} CUDA device(s)")
    elif dev.type != "cpu":
        raise UsageError(f"--device {name!r}: the reference runtime runs on cpu or cuda")
    return dev


def set_threads(requested: int | None, device: torch.device) -> int:
    """``--threads``, else one thread on a small CPU (unless OMP_NUM_THREADS says otherwise),
    else torch's default; returns the count in use."""
    if requested is not None:
        torch.set_num_threads(requested)
    elif device.type == "cpu" and (os.cpu_count() or 1) <= SMALL_CPU and "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(1)
    return torch.get_num_threads()
