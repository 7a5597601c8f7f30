"""Is a weight tensor filled? Bounded byte samples of safetensors data, no torch, no whole-file reads.

A preallocated or never-filled shard (a download that reserved the file and never wrote it, a
conversion that wrote headers and zeros) has a valid header and reads back as zeros, and so does a
sparse file. Every check that reads headers passes it; a run on it is worse than a crash: every
logit ties, both sides pick token 0, and the outputs "match" at full acceptance. So before a pair
is loaded, ``smoke-run`` and ``probe-taps`` sample the data of the weight matrices.

What is read, per file (in the order the index or folder lists them): up to ``PER_FILE``
matrices (every ``.weight`` tensor of two or more dimensions in a float dtype; the embedding and
the LM head always), each at ``SLICES`` places (start, middle, end) of ``SLICE_BYTES``. Only a
tensor whose samples are all one value is read further: whole when it is at most
``WHOLE_BYTES``, else at ``CONFIRM_SLICES`` more places spread over it. So a healthy 16 GB target
costs a few MiB of reads, and a tensor is reported only when every byte read of it is one
repeated element. Vectors (norm weights, biases) are not judged: several families (Gemma,
Qwen3-Next) store zero-centred norms whose weight is legitimately all zeros, and zero biases are
ordinary. Quantized integer tensors (packed weights, zero points) and scales are skipped too.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterable

from dflash_ckpt.rules import Finding, finding
from dflash_ckpt.sources.safetensors_header import TensorInfo
from dflash_ckpt.sources.weights import WeightInventory

#: Bytes per element of the float dtypes judged.
FLOAT_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1}
SLICE_BYTES = 1024
SLICES = 3
CONFIRM_SLICES = 16
CONFIRM_SLICE_BYTES = 4096
WHOLE_BYTES = 256 * 1024
PER_FILE = 64
_SKIP_PARTS = ("scale", "zero", "g_idx", "qweight", "absmax", "quant")
_ALWAYS = ("embed_tokens.weight", "lm_head.weight")


@dataclass(frozen=True)
class ConstantTensor:
    """A matrix whose every sampled element holds one value."""

    name: str
    file: str
    dtype: str
    shape: tuple[int, ...]
    #: The value as a float (``0.0`` for zeros of either sign).
    value: float
    bytes_read: int
    #: Whether the whole tensor was read (else ``bytes_read`` of it, spread over it).
    whole: bool

    @property
    def zero(self) -> bool:
        return self.value == 0.0

    @property
    def nbytes(self) -> int:
        return FLOAT_BYTES[self.dtype] * math.prod(self.shape)


def judged(info: TensorInfo) -> bool:
    """Whether a tensor is one this check judges: a float matrix named ``*.weight``, not a scale."""
    lower = info.name.lower()
    return (info.dtype in FLOAT_BYTES and len(info.shape) >= 2 and lower.endswith(".weight")
            and not any(p in lower for p in _SKIP_PARTS) and info.end > info.begin)


def chosen(tensors: Iterable[TensorInfo], per_file: int = PER_FILE) -> list[TensorInfo]:
    """The tensors sampled in one file: the embedding and LM head, then an even spread of the rest
    (by name, so a run samples the same ones every time), ``per_file`` in all."""
    pool = sorted((t for t in tensors if judged(t)), key=lambda t: t.name)
    first = [t for t in pool if t.name.endswith(_ALWAYS)]
    rest = [t for t in pool if not t.name.endswith(_ALWAYS)]
    room = max(per_file - len(first), 0)
    if len(rest) > room:
        step = len(rest) / room if room else 0
        rest = [rest[int(i * step)] for i in range(room)]
    return first + rest


def _offsets(size: int, count: int, width: int, esz: int) -> list[tuple[int, int]]:
    """``count`` windows of ``width`` bytes spread over ``size`` bytes, element aligned."""
    width = min(width, size) // esz * esz or esz
    if count <= 1 or size <= width:
        return [(0, min(width, size))]
    span = size - width
    return [((span * i // (count - 1)) // esz * esz, width) for i in range(count)]


def _one_value(chunk: bytes, elem: bytes) -> bool:
    esz = len(elem)
    return len(chunk) % esz == 0 and chunk == elem * (len(chunk) // esz)


def _value(elem: bytes, dtype: str) -> float:
    if dtype == "BF16":
        return float(struct.unpack("<f", b"\x00\x00" + elem)[0])
    if dtype in ("F16", "F32", "F64"):
        return float(struct.unpack({"F16": "<e", "F32": "<f", "F64": "<d"}[dtype], elem)[0])
    # FP8: only zero matters for the message; any other constant is shown by its bits.
    return 0.0 if elem in (b"\x00", b"\x80") else float(elem[0])


def _read(fh: BinaryIO, base: int, info: TensorInfo, windows: list[tuple[int, int]]) -> list[bytes]:
    out = []
    for start, width in windows:
        fh.seek(base + info.begin + start)
        out.append(fh.read(width))
    return out


def sample_tensor(fh: BinaryIO, base: int, info: TensorInfo) -> ConstantTensor | None:
    """The tensor as a ``ConstantTensor`` when every byte read of it is one repeated element; else
    None. ``base`` is where the file's data starts (8 + header length)."""
    esz = FLOAT_BYTES[info.dtype]
    size = info.end - info.begin
    chunks = _read(fh, base, info, _offsets(size, SLICES, SLICE_BYTES, esz))
    if not chunks or not chunks[0] or len(chunks[0]) < esz:
        return None  # short read: the header checks report a truncated file
    elem = chunks[0][:esz]
    zero = bytes(esz)
    neg_zero = bytes(esz - 1) + b"\x80"

    def constant(parts: list[bytes]) -> bool:
        return all(_one_value(p, elem) or (elem in (zero, neg_zero) and _zeros(p, esz)) for p in parts)

    if not constant(chunks):
        return None
    whole = size <= WHOLE_BYTES
    more = _read(fh, base, info, [(0, size)] if whole else _offsets(size, CONFIRM_SLICES, CONFIRM_SLICE_BYTES, esz))
    if sum(map(len, more)) < min(size, esz) or not constant(more):
        return None
    read = sum(map(len, chunks)) + sum(map(len, more))
    return ConstantTensor(info.name, info.file, info.dtype, tuple(info.shape), _value(elem, info.dtype), read, whole)


def _zeros(chunk: bytes, esz: int) -> bool:
    """Every element is +0 or -0 (the sign bit is the top bit of the last byte, little endian)."""
    if not chunk.strip(b"\x00"):
        return True
    if len(chunk) % esz:
        return False
    return all(chunk[i:i + esz - 1] == bytes(esz - 1) and chunk[i + esz - 1] in (0, 0x80) for i in range(0, len(chunk), esz))


def constant_tensors(folder: Path, inv: WeightInventory, per_file: int = PER_FILE) -> list[ConstantTensor]:
    """Every sampled matrix of the checkpoint in ``folder`` whose data reads back as one value."""
    found: list[ConstantTensor] = []
    for name, header in inv.headers.items():
        tensors = chosen(header.tensors.values(), per_file)
        if not tensors:
            continue
        base = 8 + header.header_len
        try:
            with open(Path(folder) / name, "rb") as fh:
                for info in tensors:
                    hit = sample_tensor(fh, base, info)
                    if hit is not None:
                        found.append(hit)
        except OSError:
            continue  # unreadable now: the loader reports it in its own words
    return found



def unfilled_weights(draft_dir: Path, draft_inv: WeightInventory | None, target_dir: Path,
                     target_inv: WeightInventory | None) -> list[Finding]:
    """DF413 for the draft's and the target's sampled matrices that read back as one value (an
    inventory that could not be read is skipped: its own findings stop the run)."""
    out: list[Finding] = []
    for role, folder, inv in (("draft", draft_dir, draft_inv), ("target", target_dir, target_inv)):
        if inv is not None and inv.tensors:
            out += constant_weight_findings(role, inv.where, constant_tensors(folder, inv))
    return out


def _shown(t: ConstantTensor) -> str:
    value = "all zeros" if t.zero else f"one value ({t.value:g}) everywhere"
    how = "the whole tensor" if t.whole else f"{t.bytes_read:,} bytes spread over its {t.nbytes:,}"
    return f"'{t.name}' {list(t.shape)} {t.dtype} reads back as {value} ({how} read)"


def constant_weight_findings(role: str, where: dict[str, str], found: Sequence[ConstantTensor]) -> list[Finding]:
    """DF413, one per file holding sampled matrices that read back as one value; ``role`` is
    ``draft`` or ``target``, ``where`` maps a file name to how messages name it."""
    by_file: dict[str, list[ConstantTensor]] = {}
    for t in found:
        by_file.setdefault(t.file, []).append(t)
    out = []
    for file, tensors in by_file.items():
        path = where.get(file, file)
        more = f", and {len(tensors) - 1} more matrices of this file too" if len(tensors) > 1 else ""
        zeros = all(t.zero for t in tensors)
        cause = ("a preallocated or never-filled shard (or a sparse file) reads back so"
                 if zeros else "an export wrote a fill value, not trained weights")
        effect = ("a run on it ties the logits, so the outputs would match and every draft be accepted while "
                  "measuring nothing" if role == "target" else "a draft so filled predicts nothing")
        out.append(finding(
            "DF413",
            f"{path}: the {role}'s tensor {_shown(tensors[0])}{more}; {cause}, and {effect}; download the "
            "file again (or re-export the checkpoint)",
            path=path, key=tensors[0].name,
        ))
    return out


__all__ = ["ConstantTensor", "chosen", "constant_tensors", "constant_weight_findings", "judged", "sample_tensor",
           "unfilled_weights"]
