"""Read a safetensors header, and only the header, through a ``Source``.

The format: 8 bytes little-endian header length N, N bytes of JSON
(``{name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}}``), then the data.
Two reads per file (8 bytes, then N), so the cost is proportional to the header whatever the
size of the weights.
"""

from __future__ import annotations

import json
import math
import struct
from typing import Any, NamedTuple

from dflash_ckpt.errors import InputError
from dflash_ckpt.sources.base import Source

#: A header larger than this is corruption, not a model (real headers are tens of kilobytes).
MAX_HEADER_BYTES = 100 * 1024 * 1024

#: Bits per element of every dtype the format knows.
DTYPE_BITS: dict[str, int] = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8,
    "I16": 16, "U16": 16, "F16": 16, "BF16": 16,
    "I32": 32, "U32": 32, "F32": 32,
    "I64": 64, "U64": 64, "F64": 64,
    "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
}


class HeaderError(Exception):
    """A header that cannot be used; ``code`` is the rule (DF203 unreadable, DF204 truncated)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class TensorInfo(NamedTuple):
    name: str
    dtype: str
    shape: tuple[int, ...]
    file: str
    begin: int
    end: int

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


class SafetensorsHeader:
    """The parsed header of one file: its tensors and the sizes the truncation check needs."""

    def __init__(self, file: str, file_size: int, header_len: int) -> None:
        self.file = file
        self.file_size = file_size
        self.header_len = header_len
        self.tensors: dict[str, TensorInfo] = {}
        self.metadata: dict[str, Any] | None = None

    @property
    def data_len(self) -> int:
        return max((t.end for t in self.tensors.values()), default=0)


def read_header(source: Source, name: str) -> SafetensorsHeader:
    """Parse the header of ``name``; ``HeaderError`` says what is wrong, ``InputError`` on I/O."""
    where = source.where(name)
    size = source.size(name)
    if size < 8:
        raise HeaderError("DF203", f"{where}: {size} bytes, shorter than the 8-byte header length")
    (header_len,) = struct.unpack("<Q", source.read(name, 0, 8))
    if header_len > MAX_HEADER_BYTES:
        raise HeaderError(
            "DF203",
            f"{where}: header length {header_len} exceeds the {MAX_HEADER_BYTES}-byte cap; "
            "not a safetensors file or corrupt",
        )
    if 8 + header_len > size:
        raise HeaderError(
            "DF204",
            f"{where}: file has {size} bytes but its header alone needs {8 + header_len}; "
            "the download was cut short",
        )
    raw = source.read(name, 8, header_len)
    try:
        parsed = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as err:
        detail = f"line {err.lineno} column {err.colno}" if isinstance(err, json.JSONDecodeError) else "bytes"
        raise HeaderError("DF203", f"{where}: header is not UTF-8 JSON ({detail})") from None
    if not isinstance(parsed, dict):
        raise HeaderError("DF203", f"{where}: header is not a JSON object")
    header = SafetensorsHeader(file=name, file_size=size, header_len=header_len)
    for key, entry in parsed.items():
        if key == "__metadata__":
            header.metadata = entry if isinstance(entry, dict) else None
            continue
        header.tensors[key] = _tensor_info(key, entry, name, where)
    data_avail = size - 8 - header_len
    if header.data_len > data_avail:
        raise HeaderError(
            "DF204",
            f"{where}: header places tensor data up to byte {8 + header_len + header.data_len} "
            f"but the file has {size} bytes; the download was cut short",
        )
    return header


def _tensor_info(key: str, entry: Any, file: str, where: str) -> TensorInfo:
    if not isinstance(entry, dict):
        raise HeaderError("DF203", f"{where}: header entry {key!r} is not an object")
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if not isinstance(dtype, str):
        raise HeaderError("DF203", f"{where}: tensor {key!r} has no dtype string")
    if not isinstance(shape, list) or not all(_is_nonneg_int(d) for d in shape):
        raise HeaderError("DF203", f"{where}: tensor {key!r} shape {shape!r} is not a list of sizes")
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(_is_nonneg_int(o) for o in offsets)
        or offsets[0] > offsets[1]
    ):
        raise HeaderError("DF203", f"{where}: tensor {key!r} data_offsets {offsets!r} are invalid")
    bits = DTYPE_BITS.get(dtype)
    if bits is not None:
        expected = (math.prod(shape) * bits + 7) // 8
        if offsets[1] - offsets[0] != expected:
            raise HeaderError(
                "DF203",
                f"{where}: tensor {key!r} ({dtype} {shape}) spans {offsets[1] - offsets[0]} bytes, "
                f"its shape needs {expected}",
            )
    return TensorInfo(key, dtype, tuple(shape), file, offsets[0], offsets[1])


def _is_nonneg_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


__all__ = ["DTYPE_BITS", "HeaderError", "InputError", "SafetensorsHeader", "TensorInfo", "read_header"]
