"""Will the run fit? Its peak memory, counted from the config shapes, against what this process may use.

``smoke-run`` asks this before loading anything, so a pair too big for the machine is refused in
one line (DF407, exit 2) naming the bytes needed and available, instead of dying half-way (a
"unable to mmap" traceback, a MemoryError, or an OOM kill). What is counted (``RunEstimate``):

- weights in the run dtype: the larger of the files' tensors (``needed_bytes``, read from the
  safetensors headers) and the config's own shapes (a config whose ``intermediate_size`` is far
  above the stored weights is counted by the config, since the model is built from it);
- KV caches at capacity (target and draft: both are preallocated);
- activations of the largest forward (the teacher-forced pass over prompt + output: hidden
  states, q/k/v, the MLP, attention scores over the whole cache as CPU SDPA materialises them)
  and logits over the vocabulary (in the run dtype plus the float32 copy the judge makes);
- a quantized target's dequantization temporaries: layers are dequantized one at a time, the
  largest one's peak counted from the headers (``draftspec.quant.dequant_peak_bytes``), which the
  header checks bound by the layer's own size before anything is expanded;
- the transformers backend's overhead (its cache objects and temporaries; measured 0.10x the
  weights on the Qwen3-4B shape, counted as 0.15x) and, against an address-space limit, the
  safetensors files it keeps mapped.

What is available (``memory_limits``): on CUDA the device's free memory; on the host the
smallest of MemAvailable, the RLIMIT_AS room left (the limit minus this process's current
address space) and the cgroup's room (``memory.max - memory.current``, or v1's
``memory.limit_in_bytes - memory.usage_in_bytes``). An out-of-memory error that still happens
during the run is turned into the same kind of line (``out_of_memory``).
"""

from __future__ import annotations

import errno
import os
import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping

import torch

from dflash_ckpt.draftspec.specs import Dims, DraftSpec, TargetSpec
from dflash_ckpt.errors import UsageError
from dflash_ckpt.runtime.address_space import soft_limit, vm_size

#: Tensor-name fragments of vision and audio towers and their projectors: not loaded, not counted.
_VISION = re.compile(r"(^|\.)(visual|vision_tower|vision_model|vision|mm_projector|multi_modal_projector|"
                     r"embed_vision|audio_tower|embed_audio|vit)\.")
_ST_BYTES = {"F64": 8, "F32": 4, "BF16": 2, "F16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
             "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}
#: The transformers backend's memory beyond its weights, as a fraction of them (0.10x measured on
#: the Qwen3-4B shape, benchmarks/README.md "real size"; counted with margin).
HF_OVERHEAD = 0.15
#: Keys whose presence means experts: the dense count from the config does not apply.
GIB = 2 ** 30
#: Tensors of a quantized layer other than its packed weight (``runtime/quant``), not kept once dequantized.
_QUANT_AUX = (".qzeros", ".scales", ".g_idx", ".weight_scale", ".weight_scale_inv", ".weight_zero_point",
              ".weight_shape", ".weight_g_idx")


def needed_bytes(tensors: Mapping[str, Any], dtype: torch.dtype) -> int:
    """Bytes the text model's weights take in ``dtype`` (MXFP4 blocks and quantized layers count dequantized).

    ``tensors`` maps names to objects with ``dtype`` (safetensors code) and ``numel``. Float
    tensors are cast to ``dtype``; an MXFP4 ``*_blocks`` byte holds two values; its ``*_scales``
    go away once dequantized; vision towers are not loaded.
    """
    size = torch.empty((), dtype=dtype).element_size()
    total = 0
    for name, info in tensors.items():
        if _VISION.search(name):
            continue
        if name.endswith("_scales") and info.dtype == "U8":
            continue
        if name.endswith(_QUANT_AUX):
            continue  # scales, zero points, group indices: gone once dequantized
        if name.endswith((".qweight", ".weight_packed")) and info.dtype == "I32":
            # AWQ/GPTQ/compressed-tensors: counted as int4 (8 values a word) dequantized; an 8-bit
            # layer (4 a word) is counted twice over, on the safe side (the config count is exact)
            total += 8 * info.numel * size
            continue
        if info.dtype in ("F8_E4M3", "I8") and name.endswith(".weight"):
            total += info.numel * size  # FP8 / int8 weights dequantized into the run dtype
            continue
        if name.endswith("_blocks") and info.dtype == "U8":
            total += 2 * info.numel * size
        elif info.dtype in ("F32", "BF16", "F16", "F64"):
            total += info.numel * size
        else:
            total += info.numel * _ST_BYTES.get(info.dtype, 4)
    return total


@dataclass(frozen=True)
class Shapes:
    """The dimensions a memory count needs, read from a (text) config."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied: bool
    dense: bool

    @classmethod
    def of(cls, dims: Dims, *, tied: bool = False, dense: bool = True) -> Shapes | None:
        """``None`` when the dimensions lack the basic sizes (the count then uses the files only)."""
        hidden, layers, heads = dims.hidden_size, dims.num_hidden_layers, dims.num_attention_heads
        if not (hidden and layers and heads and dims.num_key_value_heads and dims.head_dim):
            return None
        return cls(hidden, layers, heads, dims.num_key_value_heads, dims.head_dim, dims.intermediate_size or 0,
                   dims.vocab_size or 0, tied, dense)

    @classmethod
    def of_target(cls, spec: TargetSpec) -> Shapes | None:
        return cls.of(spec.dims, tied=spec.tie_word_embeddings(), dense=spec.dense)

    @classmethod
    def of_draft(cls, spec: DraftSpec) -> Shapes | None:
        """The draft's shapes (its embeddings and head are the target's, so ties do not count)."""
        return cls.of(spec.dims)

    def params(self, *, embeddings: bool = True) -> int:
        """Parameters of a dense Qwen3/Llama decoder of these shapes (norms included)."""
        h, d = self.hidden, self.head_dim
        attn = h * (self.heads + 2 * self.kv_heads) * d + self.heads * d * h + 2 * d
        layer = attn + 3 * h * self.intermediate + 2 * h
        emb = self.vocab * h * (1 if self.tied else 2) if embeddings else 0
        return self.layers * layer + emb + h

    def kv_bytes(self, capacity: int, elt: int) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * capacity * elt


@dataclass
class RunEstimate:
    """Bytes a run holds at its peak, by part (``total`` is what is compared)."""

    parts: dict[str, int] = field(default_factory=dict)
    #: Bytes mapped from files but not resident (the transformers backend's safetensors
    #: mappings): they count against an address-space limit only.
    mapped: int = 0

    @property
    def total(self) -> int:
        return sum(self.parts.values())

    def describe(self) -> str:
        return ", ".join(f"{name} {value / GIB:.2f} GiB" for name, value in self.parts.items() if value)


def estimate_run(*, target: Shapes | None, target_file_bytes: int, target_dtype: torch.dtype,
                 draft: Shapes | None, draft_file_bytes: int, draft_dtype: torch.dtype,
                 capacity: int, longest: int, block: int, backend: str, taps: int,
                 prepacked: bool = False, dequant_bytes: int = 0) -> RunEstimate:
    """The peak of a smoke-run: ``capacity`` cache positions, ``longest`` tokens in the largest
    single forward (prompt + output, the teacher-forced pass), ``block`` positions verified.
    ``prepacked``: the weights are reordered for oneDNN (``runtime/prepack.py``), which holds one
    more copy of the lm_head (the tied embedding table keeps its plain copy; an untied head's
    plain copy is freed only after its packed one is made). ``dequant_bytes``: a quantized
    target's largest layer's dequantization temporaries (``draftspec.quant.dequant_peak_bytes``)."""
    t_elt = torch.empty((), dtype=target_dtype).element_size()
    d_elt = torch.empty((), dtype=draft_dtype).element_size()
    ts, ds = target, draft
    t_weights = target_file_bytes
    if ts is not None and ts.dense:
        t_weights = max(t_weights, ts.params() * t_elt)
    d_weights = draft_file_bytes
    if ds is not None:  # the draft borrows the target's embeddings and head
        d_weights = max(d_weights, (ds.params(embeddings=False) + ds.hidden * taps * ds.hidden) * d_elt)
    est = RunEstimate()
    est.parts["weights"] = t_weights + d_weights
    if dequant_bytes:
        est.parts["dequantization"] = dequant_bytes
    kv = 0
    if ts is not None:
        kv += ts.kv_bytes(capacity, t_elt)
    if ds is not None:
        kv += ds.kv_bytes(capacity, d_elt)
    est.parts["KV caches"] = kv
    if ts is not None:
        n = max(longest, block)
        h = ts.hidden
        hidden_states = n * (4 * h + (ts.heads + 2 * ts.kv_heads) * ts.head_dim + 3 * ts.intermediate) * t_elt
        scores = 2 * ts.heads * n * capacity * 4  # float32 scores and softmax over the cache
        features = n * taps * h * t_elt
        est.parts["activations"] = hidden_states + scores + features
        est.parts["logits"] = n * ts.vocab * (t_elt + 4 + 4)  # run dtype, float32 copy, ranks/compare
        if prepacked and backend == "native":
            est.parts["prepacked lm_head"] = ts.vocab * ts.hidden * t_elt
    if backend == "transformers":
        est.parts["transformers overhead"] = int(HF_OVERHEAD * t_weights)
        est.mapped = target_file_bytes
    return est


# -- what is available -------------------------------------------------------------------------


def _meminfo_available() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return None


def address_space_room() -> int | None:
    """RLIMIT_AS's soft limit minus this process's current address space; ``None`` without a
    limit (the whole limit when the address space cannot be read)."""
    soft = soft_limit()
    return None if soft is None else max(soft - vm_size(), 0)


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # "max" (no limit) reads as None


def cgroup_room(root: Path = Path("/sys/fs/cgroup"), self_cgroup: Path = Path("/proc/self/cgroup")) -> int | None:
    """The memory this process's cgroup may still take (v2 ``memory.max - memory.current``, v1
    ``memory.limit_in_bytes - memory.usage_in_bytes``), the tightest along the path to the
    root; ``None`` without a limit."""
    try:
        lines = self_cgroup.read_text().splitlines()
    except OSError:
        return None
    rooms: list[int] = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hier, controllers, rel = parts
        if hier == "0" and controllers == "":
            base, limit_name, used_name = root, "memory.max", "memory.current"
        elif "memory" in controllers.split(","):
            base, limit_name, used_name = root / "memory", "memory.limit_in_bytes", "memory.usage_in_bytes"
        else:
            continue
        folder = base / rel.lstrip("/")
        while True:
            limit, used = _read_int(folder / limit_name), _read_int(folder / used_name)
            if limit is not None and limit < 1 << 60:  # v1 writes "no limit" as a huge number
                rooms.append(max(limit - (used or 0), 0))
            if folder == base or base not in folder.parents:
                break
            folder = folder.parent
    return min(rooms) if rooms else None


def memory_limits(device: torch.device) -> dict[str, int]:
    """What bounds this run's memory, by name: CUDA's free bytes on a GPU; on the host
    MemAvailable, RLIMIT_AS's room and the cgroup's room, where set."""
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return {"free CUDA memory": int(free)}
    out: dict[str, int] = {}
    for name, value in (("MemAvailable", _meminfo_available()), ("RLIMIT_AS room", address_space_room()),
                        ("cgroup memory room", cgroup_room())):
        if value is not None:
            out[name] = value
    return out


def require_fits(needed: int | RunEstimate, device: torch.device, where: str | None, *,
               target_dtype: torch.dtype | None = None, lead: str = "") -> None:
    """Refuse (DF407, exit 2) before loading a run whose peak does not fit every limit; the
    refusal is located at ``where`` (``None``: at no file), ``lead`` starts its text."""
    est = needed if isinstance(needed, RunEstimate) else RunEstimate({"weights": needed})
    short: list[tuple[int, int, str]] = []
    for name, room in memory_limits(device).items():
        need = est.total + (est.mapped if name == "RLIMIT_AS room" else 0)
        if need > room:
            short.append((need - room, room, name))
    if not short:
        return
    _, room, name = max(short)
    need = est.total + (est.mapped if name == "RLIMIT_AS room" else 0)
    mapped = f", files mapped {est.mapped / GIB:.2f} GiB" if name == "RLIMIT_AS room" and est.mapped else ""
    advice = "use a machine or device with more memory, a shorter --max-new-tokens, or fewer/shorter prompts"
    if target_dtype == torch.float32:
        advice += ", or --target-dtype bfloat16 (the target runs in float32 now)"
    raise UsageError(
        f"{lead}the run needs {need / GIB:.2f} GiB ({need} bytes) at its peak on {device} "
        f"({est.describe()}{mapped}) but only {room / GIB:.2f} GiB ({room} bytes) are free ({name}); {advice}",
        code="DF407", path=where)


#: Messages of out-of-memory errors raised as other types (torch's allocators, mmap failures).
_OOM_TEXT = re.compile(r"out of memory|can't allocate memory|cannot allocate memory|unable to mmap|"
                       r"failed to allocate|std::bad_alloc", re.I)


def is_out_of_memory(exc: BaseException) -> bool:
    if isinstance(exc, MemoryError):
        return True
    oom = getattr(torch, "OutOfMemoryError", None)
    if oom is not None and isinstance(exc, oom):
        return True
    if isinstance(exc, OSError) and exc.errno == errno.ENOMEM:
        return True
    return isinstance(exc, (RuntimeError, OSError)) and bool(_OOM_TEXT.search(str(exc)))


@contextmanager
def out_of_memory(where: str) -> Iterator[None]:
    """Turn an out-of-memory error inside the block into one DF407 line (exit 2): the run did
    not fit; it says nothing about the pair (exit 1 would read as a failed verdict)."""
    try:
        yield
    except BaseException as exc:
        if not is_out_of_memory(exc):
            raise
        first = (str(exc).splitlines() or [type(exc).__name__])[0][:300] or type(exc).__name__
        raise UsageError(f"ran out of memory during the run ({type(exc).__name__}: {first}); the memory "
                         "pre-check passed, so another process took memory meanwhile or the limit is too tight "
                         "for this run's temporaries; free memory, raise the limit, or use a shorter "
                         "--max-new-tokens", code="DF407", path=where) from None
