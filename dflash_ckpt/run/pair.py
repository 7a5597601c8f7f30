"""Opening a draft/target pair for a run, once, in one order for smoke-run and probe-taps.

``resolve_pair`` finds both folders (local, or Hub snapshots of only the files a run reads);
``open_pair`` reads both specs, runs every refusal and the checks in the order its docstring
gives (each command's difference is passed in: probe-taps' tap set in memory, smoke-run's
inspect report), encodes the prompts, plans the run (``runtime/plan.plan_run``: backend
settings, block size, capacity, device, dtypes, inventories), works out the stop tokens and,
where this process loads the models, refuses a pair the device cannot hold (DF407) or whose
weights no training filled (DF413). ``OpenPair.load`` sets the threads and loads both models.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from dflash_ckpt.checks.acceptance import refuse_unimplemented
from dflash_ckpt.checks.target_config import require_target_config
from dflash_ckpt.draftspec.specs import DraftSpec, TargetSpec, read_draft_spec, read_target_spec
from dflash_ckpt.errors import InputError, UsageError
from dflash_ckpt.rules import Finding
from dflash_ckpt.run.options import RunOptions
from dflash_ckpt.sources.base import user_path
from dflash_ckpt.sources.local import LocalSource
from dflash_ckpt.sources.prompts import Prompt, PromptEncoder, gather_prompts, stop_token_ids
from dflash_ckpt.sources.resolve import local_folder

if TYPE_CHECKING:
    from dflash_ckpt.engine_runners.smoke_engine import EngineRun
    from dflash_ckpt.run.sampling_settings import SamplingSettings
    from dflash_ckpt.runtime.device_errors import MemoryBudget
    from dflash_ckpt.runtime.plan import RunPlan
    from dflash_ckpt.sources.weights import WeightInventory

#: A command's own step on the draft, given the target: a refusal, or the draft as it is run.
Prepare = Callable[[DraftSpec, TargetSpec], DraftSpec]
#: A command's checks on the prepared pair: the findings that refuse it (errors, exit 1).
Check = Callable[[DraftSpec, TargetSpec], list[Finding]]

#: What a run reads of the draft, and of the target (its tokenizer and chat template too).
WEIGHT_FILES = ["config.json", "*.safetensors", "*.safetensors.index.json"]
TARGET_FILES = [*WEIGHT_FILES, "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                "special_tokens_map.json", "chat_template.jinja", "chat_template.json"]


@dataclass(frozen=True)
class PairFolders:
    """Both folders on disk and the labels the messages name them by."""

    draft_dir: Path
    draft_label: str
    target_dir: Path
    target_label: str


def resolve_pair(opts: RunOptions) -> PairFolders:
    """Local folders, or Hub snapshots of only the files the run reads."""
    draft_dir, draft_label = local_folder(opts.draft, revision=opts.revision, token=opts.token, role="draft",
                                          allow_patterns=WEIGHT_FILES)
    target_dir, target_label = local_folder(opts.target, token=opts.token, role="target", allow_patterns=TARGET_FILES)
    return PairFolders(Path(draft_dir), draft_label, Path(target_dir), target_label)


def encode_prompts(opts: RunOptions, target_dir: str | Path) -> tuple[list[Prompt], PromptEncoder, list[list[int]]]:
    """The prompts (``--suite``, ``-p``/``--prompts``, or the defaults), the encoder (the target's tokenizer
    unless ``--tokenizer``) and each prompt's token ids; a prompt of no tokens is a usage error."""
    if opts.suite:  # the package's prompts by task, named <suite>-NN (sources/suites.py)
        from dflash_ckpt.sources.suites import suite_prompts

        prompts = [Prompt(name, text) for _suite, name, text in suite_prompts(opts.suite)]
    else:
        prompts = gather_prompts(opts.prompt, opts.prompts)
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


@dataclass
class OpenPair:
    """A checked pair with its prompts encoded and its run planned (nothing loaded yet)."""

    folders: PairFolders
    draft: DraftSpec
    target: TargetSpec
    prompts: list[Prompt]
    encoder: PromptEncoder
    encoded: list[list[int]]
    plan: RunPlan
    #: ``-n``: the new tokens each prompt is given (memory, the engine's request).
    max_new_tokens: int
    #: The target's end-of-sequence ids (none with ``--ignore-eos``).
    stops: list[int]
    #: ``--suite`` prompts left out: longer than the target's positions allow (``fit_suite``, DF433).
    skipped: list[str] = field(default_factory=list)
    #: The memory estimate and the free memory it was held against, where this process loads the models.
    budget: MemoryBudget | None = None

    def check_memory(self, *, prepacked: bool) -> MemoryBudget:
        """Refuse (DF407, exit 2) a pair whose weights, caches and activations would not fit the
        device (``runtime/memory.py``; ``prepacked``: the CPU weights will be packed where oneDNN
        packs them), before anything is loaded; returns the estimate and the free memory it was
        held against (named again if the run later runs out of memory); a quantized target's
        dequantization is counted from its headers."""
        from dflash_ckpt.draftspec.quant import dequant_peak_bytes
        from dflash_ckpt.runtime.device_errors import DeviceFailures, MemoryBudget
        from dflash_ckpt.runtime.memory import Shapes, estimate_run, memory_limits, needed_bytes, require_fits
        from dflash_ckpt.runtime.prepack import onednn_packs_bf16

        plan = self.plan
        prepacked = prepacked and plan.device.type == "cpu" and onednn_packs_bf16()
        scheme = self.target.quant_scheme()
        dequant = dequant_peak_bytes(scheme, plan.target_inv.tensors) if scheme is not None else 0
        longest = max(len(ids) for ids in self.encoded) + self.max_new_tokens
        est = estimate_run(target=Shapes.of_target(self.target),
                           target_file_bytes=needed_bytes(plan.target_inv.tensors, plan.target_dtype),
                           target_dtype=plan.target_dtype, draft=Shapes.of_draft(self.draft),
                           draft_file_bytes=needed_bytes(plan.draft_inv.tensors, plan.draft_dtype),
                           draft_dtype=plan.draft_dtype, capacity=plan.capacity, longest=longest,
                           block=plan.block_size, backend=plan.backend,
                           taps=len(plan.draft_args.target_layer_ids), prepacked=prepacked,
                           dequant_bytes=dequant)
        with DeviceFailures(plan.device, where=self.folders.target_label, dtype=plan.target_dtype):
            require_fits(est, plan.device, self.folders.target_label, target_dtype=plan.target_dtype)
            return MemoryBudget(est.total, memory_limits(plan.device))

    def load(self, threads: int | None, say: Callable[[str], None], what: str, draft_what: str = "") -> tuple[Any, Any, int]:
        """``(target model, draft model, threads in use)``: the loading line said (``what``: the
        target's description, ``draft_what`` in front of the draft's dtype), the threads set
        (``--threads``, else one on a small CPU), both models loaded."""
        from dflash_ckpt.runtime.loading import dtype_name, load_draft
        from dflash_ckpt.runtime.plan import set_threads

        plan, f = self.plan, self.folders
        say(f"loading target {f.target_label} ({what}, {dtype_name(plan.target_dtype)}, {plan.backend} backend) and draft "
            f"{f.draft_label} ({draft_what}{dtype_name(plan.draft_dtype)}) on {plan.device}")
        used = set_threads(threads, plan.device)
        target = plan.target.load(f.target_dir, plan.target_dtype, plan.device, f.target_label, plan.target_inv)
        draft = load_draft(f.draft_dir, plan.draft_args, dtype=plan.draft_dtype, device=plan.device,
                           label=f.draft_label, inv=plan.draft_inv)
        return target, draft, used


@dataclass(frozen=True)
class Refused:
    """A pair refused before anything is loaded (exit 1): by its command's checks, or by weights
    no training filled (DF413, sampled only on a pair that passed the checks)."""

    checks: list[Finding]
    unfilled: list[Finding]

    @property
    def findings(self) -> list[Finding]:
        return self.checks + self.unfilled


def open_pair(opts: RunOptions, folders: PairFolders, *, check: Check, prepare: Prepare | None = None,
              engine: EngineRun | None = None, sampling: SamplingSettings | None = None,
              loads: bool = True, prepacks: bool = False) -> OpenPair | Refused:
    """The whole opening of a pair, one order for every command, so the same bad pair meets the
    same first error whichever command opens it:

    1. both specs read, the draft's then the target's (input errors, exit 1); a draft the
       reference runtime does not implement (``refuse_unimplemented``, DF151, exit 2: keys that
       change acceptance, a head it has no module for), first of the refusals because no target
       and no fix of the pair makes it runnable;
    2. a target config the runtime refuses (``require_target_config``, DF142, exit 2);
    3. the command's step on the draft (``prepare``, if any: probe-taps works out k from
       ``fc.weight`` and gives the draft a valid tap set in memory);
    4. the engine's refusal of the pair (``engine``: DF422-DF424, exit 2);
    5. the backend (``select_backend``: what neither runs, exit 2);
    6. the target's headers, read once (unreadable: input error), and the target's shapes (DF142);
    7. the command's checks (``check``): errors refuse the pair (``Refused``, exit 1);
    8. the prompts encoded, the run planned (positions: DF004), the stops; the engine's request
       and its memory (``engine.prepare``, with ``sampling``);
    9. where this process loads the models (``loads``; ``prepacks``: the CPU weights will be
       packed): the device's memory (DF407, about the machine), then weights no training filled
       (DF413, ``Refused``), before anything is loaded.
    """
    from dflash_ckpt.runtime.backend import select_backend
    from dflash_ckpt.runtime.loading import inventory
    from dflash_ckpt.sources.weight_sample import unfilled_weights

    draft = read_draft_spec(LocalSource(folders.draft_dir, label=folders.draft_label))
    target = read_target_spec(LocalSource(folders.target_dir, label=folders.target_label))
    refuse_unimplemented(draft)
    require_target_config(target)  # either backend, before anything is built
    if prepare is not None:
        draft = prepare(draft, target)
    if engine is not None:
        engine.refuse_pair(draft, target)  # before an engine starts
    backend = select_backend(opts.backend, target)
    headers = inventory(folders.target_dir, folders.target_label)
    require_target_config(target, headers.tensors)
    errors = check(draft, target)
    if errors:
        return Refused(errors, [])
    pair = plan_pair(opts, folders, draft=draft, target=target, backend=backend, target_inv=headers)
    if engine is not None:
        engine.prepare(pair, sampling)
    if not loads:
        return pair
    pair.budget = pair.check_memory(prepacked=prepacks)  # about the machine, before DF413
    unfilled = unfilled_weights(folders.draft_dir, pair.plan.draft_inv, folders.target_dir, pair.plan.target_inv)
    return Refused([], unfilled) if unfilled else pair


def plan_pair(opts: RunOptions, folders: PairFolders, *, draft: DraftSpec, target: TargetSpec, backend: str,
              target_inv: WeightInventory) -> OpenPair:
    """The checked pair with its prompts encoded and its run planned (``backend``: ``native`` or
    ``transformers``, from ``select_backend``; ``target_inv``: the target's headers, read once)."""
    from dflash_ckpt.runtime.plan import blocks, plan_run

    prompts, encoder, encoded = encode_prompts(opts, folders.target_dir)
    sizes = blocks(opts, draft)
    skipped: list[str] = []
    if opts.suite is not None:  # the package's prompts, not the user's: fit them
        prompts, encoded, skipped = fit_suite(opts.max_new_tokens, sizes.verify_width, target.max_position_embeddings,
                                             prompts, encoded)
    plan = plan_run(opts, draft=draft, target=target, blocks=sizes, draft_dir=folders.draft_dir,
                    target_dir=folders.target_dir, backend=backend, prompts=prompts, encoded=encoded,
                    target_inv=target_inv)
    stops = [] if opts.ignore_eos else stop_token_ids(folders.target_dir, target.eos_values, encoder.eos_token_id)
    return OpenPair(folders, draft, target, prompts, encoder, encoded, plan, opts.max_new_tokens, stops, skipped)


def fit_suite(max_new_tokens: int, width: int, limit: int | None, prompts: list[Prompt],
              encoded: list[list[int]]) -> tuple[list[Prompt], list[list[int]], list[str]]:
    """A suite's prompts that fit the target's ``max_position_embeddings`` with ``-n`` new tokens
    and one verify block, and the names of those left out (a user's own prompts are never dropped:
    one that does not fit is refused, DF004). When none fits, all are kept, so the refusal names
    the longest and the ``-n`` that would fit."""
    if not limit:
        return prompts, encoded, []
    fits = [len(ids) + max_new_tokens + width <= limit for ids in encoded]
    if all(fits) or not any(fits):
        return prompts, encoded, []
    kept = [(p, ids) for p, ids, ok in zip(prompts, encoded, fits) if ok]
    return [p for p, _ in kept], [ids for _, ids in kept], [p.name for p, ok in zip(prompts, fits) if not ok]


__all__ = ["Check", "OpenPair", "PairFolders", "Prepare", "Refused", "TARGET_FILES", "WEIGHT_FILES", "encode_prompts", "open_pair", "resolve_pair"]
