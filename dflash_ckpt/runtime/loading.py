"""Load safetensors checkpoints (one file or shards named by the index) into the runtime modules.

Only ``*.safetensors`` files are opened (their headers parsed by ``sources.safetensors_header``,
their data read as raw bytes); pickle files are never read. Modules are built on the meta device,
given storage with q/k/v and gate/up already fused (``layers.materialize``: one buffer per group,
the checkpoint's parameters its row blocks), and each tensor is read from the file straight into
its place, cast to the requested dtype on the way when needed. So a 4B target costs one copy of
its weights, no random initialisation, no fusing copy, and no file mapping kept alive.

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
from typing import Any, BinaryIO

import torch
from torch import nn

from dflash_ckpt.draftspec.quant import require_layer
from dflash_ckpt.draftspec.quant import QuantScheme
from dflash_ckpt.errors import InputError, UsageError
from dflash_ckpt.draftspec.draft_settings import DraftSettings
from dflash_ckpt.draftspec.target_settings import TargetSettings
from dflash_ckpt.runtime.draft import DFlashDraft
from dflash_ckpt.runtime.draft2 import make_draft
from dflash_ckpt.runtime.layers import materialize
from dflash_ckpt.runtime.target import TargetModel
from dflash_ckpt.sources.local import LocalSource
from dflash_ckpt.sources.safetensors_header import TensorInfo
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
        raise InputError("no *.safetensors weights (pickle files are never opened)", code="DF201", path=folder)
    return inv


def stored_dtype(inv: WeightInventory) -> str | None:
    """The dtype most parameters are stored in (``bfloat16``, ``float16``, ``float32``)."""
    counts: Counter[str] = Counter()
    for info in inv.tensors.values():
        if info.dtype in _ST_DTYPES:
            counts[_ST_DTYPES[info.dtype]] += info.numel
    return counts.most_common(1)[0][0] if counts else None


#: safetensors dtype codes the reader maps to torch dtypes (the weights of supported models).
_TORCH_DTYPES: dict[str, torch.dtype] = {
    "F64": torch.float64, "F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8, "BOOL": torch.bool,
    "F8_E4M3": torch.float8_e4m3fn,
}
#: Stored dtypes that are never a layer's weight as is (FP8 and int8 weights need their scales).
_QUANTIZED_DTYPES = ("F8_E4M3", "I8")
#: Bytes read per chunk when a tensor is cast or moved on the way (bounds the temporary copy).
_CHUNK_BYTES = 64 << 20


def _load_into(
    module: nn.Module,
    folder: Path,
    inv: WeightInventory,
    names: dict[str, str | None],
    *,
    dtype: torch.dtype,
    device: torch.device,
    config_where: str,
    scheme: QuantScheme | None = None,
) -> None:
    """Read checkpoint tensor ``names[param]`` into each parameter (``None``: leave it, tied).

    The meta-device module is first given real storage (``layers.materialize``: fused q/k/v,
    k/v and gate/up buffers whose row blocks are the parameters), then each tensor's bytes are
    read from its file straight into that storage (``_read_into``). No file stays mapped and no
    tensor is held twice, so a loaded model costs its weights once (docs: benchmarks/README.md,
    "real size"). A layer stored quantized under ``scheme`` is checked against its headers
    first and dequantized into its place after the plain tensors are read, one layer at a time
    (``runtime/quant``), so a quantized target costs its dequantized weights once too.
    """
    expected = dict(module.named_parameters(remove_duplicate=False))
    by_file: dict[str, list[tuple[str, str]]] = {}
    quantized: list[tuple[str, str]] = []
    for param, key in names.items():
        if key is None:
            continue
        info = inv.tensors.get(key)
        base = key.removesuffix(".weight")
        if scheme is not None and key.endswith(".weight") and (info is None or info.dtype in _QUANTIZED_DTYPES) \
                and scheme.is_quantized(base, inv.tensors):
            out_features, in_features = tuple(expected[param].shape)
            require_layer(scheme, base, inv.tensors, out_features, in_features)
            quantized.append((param, base))
            continue
        if info is None:
            raise InputError(
                f"tensor '{key}' is missing from the safetensors files; the weights do "
                f"not match {config_where} (or a shard is absent)",
                code="DF212", path=folder,
            )
        want = tuple(expected[param].shape)
        if tuple(info.shape) != want:
            raise InputError(
                f"tensor '{key}' has shape {list(info.shape)} but {config_where} "
                f"implies {list(want)}",
                code="DF213", path=folder / info.file,
            )
        if info.dtype in _QUANTIZED_DTYPES:
            raise InputError(f"tensor '{key}' is stored as {info.dtype}, a quantized weight, but "
                             f"{config_where} has no quantization_config saying how to scale it; restore the config "
                             "the quantizer wrote", code="DF182", path=folder / info.file)
        if info.dtype not in _TORCH_DTYPES:
            raise InputError(f"tensor '{key}' is stored as {info.dtype}, which the native "
                             "runtime does not read; use --backend transformers", code="DF213", path=folder / info.file)
        by_file.setdefault(info.file, []).append((param, key))
    materialize(module, dtype=dtype, device=device)
    params = dict(module.named_parameters(remove_duplicate=False))
    for file, pairs in by_file.items():
        data_start = 8 + inv.headers[file].header_len
        with open(folder / file, "rb", buffering=0) as fh:
            for param, key in pairs:
                _read_into(params[param].detach(), fh, data_start, inv.tensors[key], folder / file)
    if quantized:
        assert scheme is not None
        _fill_dequantized(params, quantized, scheme, folder, inv)


def _fill_dequantized(params: dict[str, nn.Parameter], layers: list[tuple[str, str]], scheme: QuantScheme,
                      folder: Path, inv: WeightInventory) -> None:
    """Dequantize each layer (``(param, base)``) from its stored tensors into its parameter."""
    from dflash_ckpt.runtime.quant import dequantize_layer  # torch-only formats, on the run path

    handles: dict[str, BinaryIO] = {}

    def read(name: str) -> torch.Tensor:
        info = inv.tensors.get(name)
        if info is None:
            raise KeyError(name)
        if info.dtype not in _TORCH_DTYPES:
            raise InputError(f"tensor '{name}' is stored as {info.dtype}; a {scheme.method} "
                             "layer's tensors are int32, int8, e4m3 or float", code="DF181", path=folder / info.file)
        fh = handles.get(info.file)
        if fh is None:
            fh = handles[info.file] = open(folder / info.file, "rb", buffering=0)
        out = torch.empty(info.shape, dtype=_TORCH_DTYPES[info.dtype])
        _readinto(fh, 8 + inv.headers[info.file].header_len + info.begin, out.view(-1).view(torch.uint8).numpy(),
                  folder / info.file, info)
        return out

    try:
        for param, base in layers:
            dest = params[param].detach()
            dest.copy_(dequantize_layer(scheme, base, read, tuple(dest.shape)))
    finally:
        for fh in handles.values():
            fh.close()


def _read_into(dest: torch.Tensor, fh: BinaryIO, data_start: int, info: TensorInfo, path: Path) -> None:
    """Fill ``dest`` with the tensor ``info`` of the open file ``fh``: read in place when the
    dtype and device match (the usual bf16-on-CPU case), else in row chunks cast on the way."""
    src_dtype = _TORCH_DTYPES[info.dtype]
    flat = dest.view(-1)
    if src_dtype == dest.dtype and dest.device.type == "cpu" and dest.is_contiguous():
        _readinto(fh, data_start + info.begin, flat.view(torch.uint8).numpy(), path, info)
        return
    per = torch.empty((), dtype=src_dtype).element_size()
    step = max(1, _CHUNK_BYTES // per)
    for at in range(0, flat.numel(), step):
        n = min(step, flat.numel() - at)
        tmp = torch.empty(n, dtype=src_dtype)
        _readinto(fh, data_start + info.begin + at * per, tmp.view(torch.uint8).numpy(), path, info)
        flat[at:at + n].copy_(tmp)


def _readinto(fh: BinaryIO, offset: int, buf: Any, path: Path, info: TensorInfo) -> None:
    view = memoryview(buf).cast("B")
    fh.seek(offset)
    got = 0
    while got < len(view):
        n = fh.readinto(view[got:])
        if not n:
            raise InputError(f"tensor '{info.name}' ends past the end of the file (it changed while "
                             "loading, or was truncated); download it again", code="DF204", path=path)
        got += n


def _find_target_prefix(inv: WeightInventory, folder: Path) -> str:
    """The prefix in front of ``embed_tokens.weight``; wrappers keep the text model deeper."""
    cands = [k[: -len("embed_tokens.weight")] for k in inv.tensors if k.endswith("embed_tokens.weight")]
    if not cands:
        raise InputError("no '*embed_tokens.weight' tensor; not a Hugging Face causal LM checkpoint", code="DF212",
                         path=folder)
    cands.sort(key=lambda p: ("language_model" not in p, len(p)))
    return cands[0]


def load_target(folder: Path, args: TargetSettings, *, dtype: torch.dtype, device: torch.device,
                label: str | None = None, inv: WeightInventory | None = None,
                scheme: QuantScheme | None = None) -> TargetModel:
    """The target, its quantized layers (``scheme``, from ``draftspec.quant.read_scheme``)
    dequantized into ``dtype`` while loading."""
    inv = inv or inventory(folder, label or str(folder))
    where = str(folder / "config.json")
    prefix = _find_target_prefix(inv, folder)
    with torch.device("meta"):
        model = TargetModel(args)
    heads = sorted((k for k in inv.tensors if k.endswith("lm_head.weight")), key=len)
    if not heads and scheme is not None and scheme.is_quantized("lm_head", inv.tensors):
        heads = ["lm_head.weight"]  # a quantized head: its packed tensors stand for the weight
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
                f"no lm_head.weight tensor and {where} does not set tie_word_embeddings "
                "to true; add the head, or set the key if the model ties its embeddings",
                code="DF212", path=folder,
            )
    _load_into(model, folder, inv, names, dtype=dtype, device=device, config_where=where, scheme=scheme)
    if names["lm_head.weight"] is None:
        model.tie_weights()
    model.rotary.to(device)
    return model.derive_tables().eval()


def load_draft(folder: Path, args: DraftSettings, *, dtype: torch.dtype, device: torch.device,
               label: str | None = None, inv: WeightInventory | None = None) -> DFlashDraft:
    inv = inv or inventory(folder, label or str(folder))
    prefix = "model." if "fc.weight" not in inv.tensors and "model.fc.weight" in inv.tensors else ""
    with torch.device("meta"):
        model = make_draft(args)  # DFlash2Draft for a DFlash2 config
    names = {param: prefix + param for param, _ in model.named_parameters()}
    _load_into(model, folder, inv, names, dtype=dtype, device=device, config_where=str(folder / "config.json"))
    for table in model.rotary:
        table.to(device)
    return model.eval()
