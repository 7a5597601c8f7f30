"""Load safetensors checkpoints (one file or shards named by the index) into the runtime modules.

Only ``*.safetensors`` files are opened, through ``safetensors``; pickle files are never read.
Modules are built on the meta device and receive the checkpoint's tensors directly, cast to the
requested dtype, so a 4B target costs one copy of its weights and no random initialisation. Then
q/k/v and gate/up projections are fused (``fuse_projections``: one matmul each, the checkpoint's
parameters kept as views of the fused weights, so nothing is held twice).

Key layouts:
- target: Hugging Face names, ``<prefix>embed_tokens.weight``, ``<prefix>layers.N.*``,
  ``<prefix>norm.weight`` with ``<prefix>`` = ``model.`` for plain causal LMs and e.g.
  ``model.language_model.`` for multimodal wrappers (``text_config``); ``lm_head.weight`` (or a
  prefixed one), absent when the embeddings are tied;
- draft: unprefixed names (``fc.weight``, ``layers.N.*``; DFlash2 adds ``layers.N.*_conv.*`` and
  ``candidate_selector.*``, codebooks without ``.weight``); a ``model.`` prefix is accepted.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import torch
from safetensors import safe_open
from torch import nn

from dflash_ckpt.errors import InputError, UsageError
from dflash_ckpt.runtime.args import DraftArgs, TargetArgs
from dflash_ckpt.runtime.draft import DFlashDraft
from dflash_ckpt.runtime.draft2 import make_draft
from dflash_ckpt.runtime.target import TargetModel
from dflash_ckpt.sources.local import LocalSource
from dflash_ckpt.sources.weights import WeightInventory, load_inventory

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32, "fp32": torch.float32, "float": torch.float32,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
    "float16": torch.float16, "fp16": torch.float16, "half": torch.float16,
}
_ST_DTYPES = {"F32": "float32", "BF16": "bfloat16", "F16": "float16"}


def parse_dtype(name: str, option: str) -> torch.dtype:
    """``bfloat16``/``bf16``, ``float16``/``fp16``/``half``, ``float32``/``fp32``."""
    try:
        return DTYPES[name.lower()]
    except KeyError:
        raise UsageError(f"{option} {name!r}: use bfloat16, float16 or float32") from None


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def inventory(folder: Path, label: str) -> WeightInventory:
    """Tensor names, files and dtypes from the safetensors headers; reading problems are fatal."""
    inv = load_inventory(LocalSource(folder, label=label))
    if inv.problems:
        first = inv.problems[0]
        raise InputError(first.message, code=first.code)
    if not inv.tensors:
        raise InputError(f"{folder}: no *.safetensors weights (pickle files are never opened)", code="DF201")
    return inv


def stored_dtype(inv: WeightInventory) -> str | None:
    """The dtype most parameters are stored in (``bfloat16``, ``float16``, ``float32``)."""
    counts: Counter[str] = Counter()
    for info in inv.tensors.values():
        if info.dtype in _ST_DTYPES:
            counts[_ST_DTYPES[info.dtype]] += info.numel
    return counts.most_common(1)[0][0] if counts else None


def _load_into(
    module: nn.Module,
    folder: Path,
    inv: WeightInventory,
    names: dict[str, str | None],
    *,
    dtype: torch.dtype,
    device: torch.device,
    config_where: str,
) -> None:
    """Assign checkpoint tensor ``names[param]`` to each parameter (``None``: leave it, tied)."""
    expected = dict(module.named_parameters(remove_duplicate=False))
    by_file: dict[str, list[tuple[str, str]]] = {}
    for param, key in names.items():
        if key is None:
            continue
        info = inv.tensors.get(key)
        if info is None:
            raise InputError(
                f"{folder}: tensor '{key}' is missing from the safetensors files; the weights do "
                f"not match {config_where} (or a shard is absent)",
                code="DF212",
            )
        want = tuple(expected[param].shape)
        if tuple(info.shape) != want:
            raise InputError(
                f"{folder / info.file}: tensor '{key}' has shape {list(info.shape)} but {config_where} "
                f"implies {list(want)}",
                code="DF213",
            )
        by_file.setdefault(info.file, []).append((param, key))
    state: dict[str, torch.Tensor] = {}
    for file, pairs in by_file.items():
        with safe_open(str(folder / file), framework="pt", device="cpu") as fh:
            for param, key in pairs:
                state[param] = fh.get_tensor(key).to(device=device, dtype=dtype)
    module.load_state_dict(state, strict=False, assign=True)


def _find_target_prefix(inv: WeightInventory, folder: Path) -> str:
    """The prefix in front of ``embed_tokens.weight``; wrappers keep the text model deeper."""
    cands = [k[: -len("embed_tokens.weight")] for k in inv.tensors if k.endswith("embed_tokens.weight")]
    if not cands:
        raise InputError(f"{folder}: no '*embed_tokens.weight' tensor; not a Hugging Face causal LM checkpoint", code="DF212")
    cands.sort(key=lambda p: ("language_model" not in p, len(p)))
    return cands[0]


def load_target(folder: Path, args: TargetArgs, *, dtype: torch.dtype, device: torch.device,
                label: str | None = None, inv: WeightInventory | None = None) -> TargetModel:
    inv = inv or inventory(folder, label or str(folder))
    where = str(folder / "config.json")
    prefix = _find_target_prefix(inv, folder)
    with torch.device("meta"):
        model = TargetModel(args)
    heads = sorted((k for k in inv.tensors if k.endswith("lm_head.weight")), key=len)
    names: dict[str, str | None] = {}
    for param, _ in model.named_parameters(remove_duplicate=False):
        if param != "lm_head.weight":
            names[param] = prefix + param
        elif args.tie_word_embeddings:
            names[param] = None  # tied: HF ignores a stored head and uses the embeddings
        elif heads:
            names[param] = heads[0]
        else:
            raise InputError(
                f"{folder}: no lm_head.weight tensor and {where} does not set tie_word_embeddings "
                "to true; add the head, or set the key if the model ties its embeddings",
                code="DF212",
            )
    _load_into(model, folder, inv, names, dtype=dtype, device=device, config_where=where)
    if names["lm_head.weight"] is None:
        model.tie_weights()
    model.rotary.to(device)
    return model.fuse_projections().eval()


def load_draft(folder: Path, args: DraftArgs, *, dtype: torch.dtype, device: torch.device,
               label: str | None = None, inv: WeightInventory | None = None) -> DFlashDraft:
    inv = inv or inventory(folder, label or str(folder))
    prefix = "model." if "fc.weight" not in inv.tensors and "model.fc.weight" in inv.tensors else ""
    with torch.device("meta"):
        model = make_draft(args)  # DFlash2Draft for a DFlash2 config
    names = {param: prefix + param for param, _ in model.named_parameters()}
    _load_into(model, folder, inv, names, dtype=dtype, device=device, config_where=str(folder / "config.json"))
    for table in model.rotary:
        table.to(device)
    return model.fuse_projections().eval()
