"""One plan per run: everything ``smoke-run`` and ``probe-taps`` need, resolved once.

From the options and the ``DraftSpec`` that passed inspect's checks, ``plan_run`` works out the
backend's target settings, the draft's runtime settings, the block size (``--block-size`` or the
trained one), the cache capacity (and whether the prompts fit the target's positions), the device,
the dtypes and the weight inventories. The runtime then takes these plain values; nothing
downstream reads a config or a safetensors header again, nor works out the block size anew.

The options themselves, their defaults and their checks are the run layer's
(``run/options.py``); the folders and the prompts come from ``run/pair.py``.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, Sequence

import torch

from dflash_ckpt.errors import UsageError
from dflash_ckpt.draftspec.layout import BlockLayout
from dflash_ckpt.draftspec.draft_settings import DraftSettings
from dflash_ckpt.runtime.backend import TargetPlan, plan_target
from dflash_ckpt.runtime.loading import inventory, parse_dtype, stored_dtype
from dflash_ckpt.sources.prompts import Prompt
from dflash_ckpt.sources.weights import WeightInventory
from dflash_ckpt.draftspec.specs import DraftSpec, TargetSpec

#: ``--draft-dtype stored`` / ``--target-dtype stored`` (``run/options.STORED``; the runtime does
#: not import the run layer above it).
STORED = "stored"

#: At most this many logical CPUs counts as a small CPU: one thread there by default, because
#: OpenMP threads spin-waiting against other processes made runs 10-100x slower.
SMALL_CPU = 4


class PlanOptions(Protocol):
    """What the plan reads of a run's options (``run/options.RunOptions`` holds them all, with
    their defaults and checks; the runtime does not import the run layer above it)."""

    max_new_tokens: int
    block_size: int | None
    layout: str | None
    device: str
    draft_dtype: str
    target_dtype: str | None


@dataclass(frozen=True)
class Blocks:
    """The draft's runtime settings (in ``--layout``) and the block size a run uses, decided once
    (``blocks``); the verify width and every cache's capacity follow from them here."""

    draft_args: DraftSettings
    #: ``--block-size``, else the trained one: every loop below requires it.
    block_size: int

    @property
    def trained_block_size(self) -> int:
        return self.draft_args.block_size

    @property
    def verify_width(self) -> int:
        """Positions one verify forward takes: the block, or one more anchor-first."""
        return self.draft_args.block_layout.verify_width(self.block_size)

    def capacity(self, encoded: Sequence[Sequence[int]], max_new_tokens: int, *, layout: BlockLayout | None = None,
                 any_layout: bool = False) -> int:
        """Cache positions a run over ``encoded`` needs: the longest prompt, ``max_new_tokens`` new
        tokens, one verify block and the bonus token. The block is verified in ``layout`` (else the
        run's); ``any_layout``: in either (probe-taps runs both), the wider being the block and its anchor."""
        width = (self.block_size + 1 if any_layout else
                 (layout or self.draft_args.block_layout).verify_width(self.block_size))
        return max(len(ids) for ids in encoded) + max_new_tokens + width + 1


def blocks(opts: PlanOptions, draft: DraftSpec) -> Blocks:
    """The draft's settings in ``--layout`` (else as declared) and ``--block-size`` (else the trained one)."""
    args = with_layout(DraftSettings.from_spec(draft), opts.layout)
    return Blocks(args, opts.block_size if opts.block_size is not None else args.block_size)


@dataclass(frozen=True)
class RunPlan:
    """What a run loads and how, resolved once from the checked spec and the options."""

    target: TargetPlan
    blocks: Blocks
    #: Cache positions (``Blocks.capacity``) of the run's prompts; every loop below is sized with it.
    capacity: int
    device: torch.device
    draft_dtype: torch.dtype
    target_dtype: torch.dtype
    target_inv: WeightInventory
    draft_inv: WeightInventory

    @property
    def backend(self) -> str:
        return self.target.backend

    @property
    def draft_args(self) -> DraftSettings:
        return self.blocks.draft_args

    @property
    def block_size(self) -> int:
        return self.blocks.block_size

    @property
    def trained_block_size(self) -> int:
        return self.blocks.trained_block_size

    @property
    def verify_width(self) -> int:
        return self.blocks.verify_width


def plan_run(opts: PlanOptions, *, draft: DraftSpec, target: TargetSpec, blocks: Blocks, draft_dir: Path,
             target_dir: Path, backend: str, prompts: Sequence[Prompt], encoded: Sequence[Sequence[int]],
             target_inv: WeightInventory | None = None) -> RunPlan:
    """The plan for ``backend`` (``native`` or ``transformers``, from ``select_backend``), after
    inspect's checks passed; refuses (exit 2) prompts that do not fit the target's positions.
    ``target_inv``: the target's headers when the caller read them already (they are read once)."""
    tplan = plan_target(backend, target)
    if tplan.max_position_embeddings:
        require_positions_fit(prompts, encoded, opts.max_new_tokens, blocks.verify_width,
                              tplan.max_position_embeddings, target.where)
    draft_inv = read_weights(draft, draft_dir)
    device, draft_dtype, target_dtype, target_inv = resolve_dtypes(opts, target_dir, target.label, tplan.dtype,
                                                                   target_inv, draft_inv=draft_inv)
    return RunPlan(target=tplan, blocks=blocks, capacity=blocks.capacity(encoded, opts.max_new_tokens), device=device,
                   draft_dtype=draft_dtype, target_dtype=target_dtype, target_inv=target_inv, draft_inv=draft_inv)


def with_layout(args: DraftSettings, layout: str | None) -> DraftSettings:
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


def resolve_dtypes(opts: PlanOptions, target_dir: str | Path, target_label: str, config_dtype: str | None,
                   target_inv: WeightInventory | None = None, *, draft_inv: WeightInventory | None = None,
                   ) -> tuple[torch.device, torch.dtype, torch.dtype, WeightInventory]:
    """``(device, draft dtype, target dtype, target inventory)``. The draft runs in
    ``--draft-dtype``; the target in ``--target-dtype``, else its config's dtype
    (``config_dtype``), else its stored one. ``stored`` (either option) is the dtype most of that
    model's parameters are stored in (``draft_inv``/``target_inv``: an fp16-stored draft then runs
    in fp16, as an engine loading it as it is would). The target's inventory is read here unless
    the caller read it already (``target_inv``)."""
    device = pick_device(opts.device)
    if target_inv is None:
        target_inv = inventory(Path(target_dir), target_label)
    draft_name = opts.draft_dtype
    if draft_name == STORED:
        draft_name = (stored_dtype(draft_inv) if draft_inv is not None else None) or "float32"
    draft_dtype = parse_dtype(draft_name, "--draft-dtype")
    target_name = opts.target_dtype
    if target_name == STORED:
        target_name = stored_dtype(target_inv)
    target_dtype = parse_dtype(target_name or config_dtype or stored_dtype(target_inv) or "float32", "--target-dtype")
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
