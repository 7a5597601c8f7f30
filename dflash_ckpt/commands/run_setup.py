"""The set-up ``smoke-run`` and ``probe-taps`` share: the options both take, the two folders, the
prompts as token ids, the device, thread count and dtypes.

One copy for both commands, so that probe-taps loads and measures a pair exactly as smoke-run
does (its finalists' tau is smoke-run's tau) and the two validate the same flags the same way.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import torch

from dflash_ckpt.errors import InputError, UsageError
from dflash_ckpt.runtime.loading import inventory, parse_dtype, stored_dtype
from dflash_ckpt.sources.prompts import Prompt, PromptEncoder, gather_prompts
from dflash_ckpt.sources.resolve import local_folder
from dflash_ckpt.sources.weights import WeightInventory

#: Why 2.0: see ``commands/smoke_run.py``'s docstring.
DEFAULT_MIN_ACCEPTANCE = 2.0
DEFAULT_MAX_NEW_TOKENS = 128
WEIGHT_FILES = ["config.json", "*.safetensors", "*.safetensors.index.json"]
TARGET_FILES = [*WEIGHT_FILES, "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                "special_tokens_map.json", "chat_template.jinja", "chat_template.json"]
#: At most this many logical CPUs counts as a small CPU: one thread there by default, because
#: OpenMP threads spin-waiting against other processes made runs 10-100x slower.
SMALL_CPU = 4


@dataclass
class RunOptions:
    """The options of a command that loads the pair and decodes prompts (same flags in both)."""

    draft: str
    target: str
    prompts: list[str] = field(default_factory=list)
    prompts_file: str | None = None
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    min_acceptance: float = DEFAULT_MIN_ACCEPTANCE
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

    def validate(self) -> None:
        """Usage errors (exit 2) in the options, before anything is read: the shared ones, then
        the command's own (``validate_own``), then the dtypes."""
        if self.max_new_tokens < 1:
            raise UsageError(f"--max-new-tokens {self.max_new_tokens}: must be at least 1")
        if self.block_size is not None and self.block_size < 2:
            raise UsageError(f"--block-size {self.block_size}: must be at least 2 (anchor plus one draft)")
        self.validate_own()
        parse_dtype(self.draft_dtype, "--draft-dtype")
        if self.target_dtype is not None:
            parse_dtype(self.target_dtype, "--target-dtype")

    def validate_own(self) -> None:
        """The command's own checks (none here)."""


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
    tok_dir = Path(opts.tokenizer).expanduser() if opts.tokenizer else Path(target_dir)
    if opts.tokenizer and not tok_dir.is_dir():
        raise InputError(f"--tokenizer {opts.tokenizer}: no such folder", code="DF001")
    encoder = PromptEncoder(tok_dir, chat_template=opts.chat_template, thinking=opts.thinking)
    encoder.prepare(prompts)  # every rendering in one child process
    encoded = [encoder.encode(p) for p in prompts]
    for p, ids in zip(prompts, encoded):
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
