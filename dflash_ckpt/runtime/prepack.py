"""Prepacked oneDNN weights for the CPU's bf16 matrix products: what makes a decode step memory-bound.

Why: at batch 1 a decode step reads every weight once, so its floor is the weights' bytes over
the bandwidth one core streams. torch's plain bf16 ``F.linear`` on a CPU reorders the weight
into oneDNN's blocked layout inside every call and streams about half that bandwidth (17 GB/s
against 35-40 GB/s for ``x.sum()`` on this machine; the 151936-row lm_head 16 GB/s); a weight
reordered once (``torch.ops.mkldnn._reorder_linear_weight``, what inductor's freezing pass and
vLLM's CPU path do) streams at the memory's speed, and gives bit-identical results (the same
oneDNN kernel, only the reorder moved out of the step). benchmarks/README.md has the figures.

How: ``prepack(model)`` reorders the weight of every linear the decoding forwards run through
``linear`` and hangs the packed copy on the weight tensor (``PACKED``); ``linear`` uses it
when no gradient is wanted. With ``release`` the plain weight's storage is then freed (its
shape, dtype and device stay, so ``model.dtype`` and cache sizing still work), so the model
costs its weights once; a tensor still needed elsewhere (the tied embedding table the lm_head
shares) keeps its plain copy. ``unpack(model)`` restores every plain weight from the packed
one and drops the packs: the model is then exactly the loaded one again (training, or code
that reads the weights' values after a packed run, needs that).

Why private ops (``torch.ops.mkldnn._reorder_linear_weight``, ``_linear_pointwise``): torch has
no public call that keeps a weight in oneDNN's blocked layout for a plain tensor input.
``torch.utils.mkldnn.MkldnnLinear`` converts every input to and from an mkldnn tensor and
measured 1.4-2x slower than this path (28 bf16 3072 x 1024 layers at one row, one thread, this
AMX Xeon, 2026-12-06: plain 151-162 ms, packed 78 ms, MkldnnLinear 110-154 ms); inductor's
freezing pass packs the same way, behind a private config. ``can_pack`` asks first, so a torch
without them keeps the plain path.

Only bf16 weights on a CPU with oneDNN are packed (fp16 needs AVX512-FP16 or AVX-NE-CONVERT,
and fp32 gains nothing measured here). Where this CPU's oneDNN has no bf16 path (AVX2-only x86),
``prepack`` instead marks each such weight for the runtime's own AVX2 kernel (``cpu_kernel``,
``KERNEL``): nothing is reordered or freed, the plain weight is what it reads. Anything else
keeps the plain path.
"""

from __future__ import annotations

import functools
from typing import Iterator

import torch
import torch.nn.functional as F
from torch import nn

from dflash_ckpt.runtime import cpu_kernel

#: Attribute on a weight tensor holding its packed oneDNN copy.
PACKED = "_dflash_packed"
#: Attribute on a weight tensor that runs through ``cpu_kernel`` (True when set).
KERNEL = "_dflash_kernel"
#: Attribute on a weight tensor whose plain storage was freed: its size in bytes.
_RELEASED = "_dflash_released_bytes"


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear(x, weight, bias)``, through ``weight``'s packed copy when it has one, or the AVX2
    kernel when ``prepack`` marked it, and no gradient is wanted; the input is flattened to 2-D (a
    3-D view with a storage offset takes a slow path in torch's CPU bf16 linear)."""
    packed = getattr(weight, PACKED, None)
    grad = torch.is_grad_enabled() and weight.requires_grad
    if grad and hasattr(weight, _RELEASED):
        raise RuntimeError("these weights are prepacked for inference (runtime.prepack); call "
                           "prepack.unpack(model) before a forward that needs gradients")
    if packed is None or grad or x.dtype != weight.dtype:
        # dtype and device asked again: a marked model may have been cast or moved since
        if (not grad and getattr(weight, KERNEL, False) and x.dtype == weight.dtype == torch.bfloat16
                and x.device.type == weight.device.type == "cpu"):
            return cpu_kernel.linear(x, weight, bias)
        return F.linear(x, weight, bias)
    flat = x.reshape(-1, x.shape[-1])
    out = torch.ops.mkldnn._linear_pointwise(flat, packed, bias, "none", [], "")
    return out.view(*x.shape[:-1], weight.shape[0])


def can_pack(weight: torch.Tensor) -> bool:
    """Whether ``weight`` gets a packed copy: 2-D bf16 on a CPU whose oneDNN packs bf16."""
    return (weight.dim() == 2 and weight.dtype == torch.bfloat16 and weight.device.type == "cpu"
            and not weight.is_meta and torch.backends.mkldnn.is_available() and torch.backends.mkldnn.enabled
            and onednn_packs_bf16())


@functools.lru_cache(maxsize=1)
def onednn_packs_bf16() -> bool:
    """Whether this CPU's oneDNN has the bf16 linear path at all: it needs AVX-512 (BW, VL, DQ)
    or AVX-NE-CONVERT, so an AVX2-only CPU (seen on an AMD EPYC of this project's machines) has
    mkldnn but refuses the reorder; a torch that dropped the private op has no path either.
    Asked once, of a 2 x 2 weight."""
    try:
        torch.ops.mkldnn._reorder_linear_weight(torch.zeros(2, 2, dtype=torch.bfloat16), 1)
    except (RuntimeError, AttributeError):
        return False
    return True


def _sites(model: nn.Module) -> Iterator[tuple[nn.Module, str]]:
    """``(module, attribute)`` of every weight the decoding forwards pass to ``linear``: each
    module's fused buffers (its ``FUSED`` table: q/k/v, k/v, gate/up) and the linears its
    ``LINEARS`` table names (o_proj, down_proj, the draft's q_proj and fc, the lm_head). Only
    those: a module that calls a linear itself (DFlash2's convolution, its selector) keeps it."""
    for mod in model.modules():
        for name, _ in getattr(mod, "FUSED", ()):
            if isinstance(getattr(mod, name, None), torch.Tensor):
                yield mod, name
        for name in getattr(mod, "LINEARS", ()):
            child = getattr(mod, name, None)
            if isinstance(child, nn.Linear):
                yield child, "weight"


@torch.no_grad()
def prepack(model: nn.Module, *, release: bool = True, keep: tuple[torch.Tensor, ...] = ()) -> int:
    """Pack every weight of ``model``'s decoding forwards that ``can_pack``; returns how many.

    ``release``: free each packed weight's plain storage, unless it is (or shares storage with)
    a tensor in ``keep`` or an ``nn.Embedding`` weight of ``model`` (a tied lm_head). Calling it
    again packs nothing twice."""
    kept = {t.untyped_storage().data_ptr() for t in keep}
    kept |= {m.weight.untyped_storage().data_ptr() for m in model.modules() if isinstance(m, nn.Embedding)}
    done = 0
    for mod, attr in _sites(model):
        w = getattr(mod, attr)
        if getattr(w, PACKED, None) is not None or getattr(w, KERNEL, False):
            continue
        if not can_pack(w):
            if cpu_kernel.usable(w):
                setattr(w, KERNEL, True)
                done += 1
            continue
        try:
            packed = torch.ops.mkldnn._reorder_linear_weight(w.detach(), 1)
        except RuntimeError:  # a oneDNN build without this path for the dtype: keep the plain one
            continue
        setattr(w, PACKED, packed)
        done += 1
        storage = w.untyped_storage()
        if release and storage.data_ptr() not in kept and w.is_contiguous() and storage.nbytes() == w.nbytes:
            _release(model, w)
    return done


def _release(model: nn.Module, w: torch.Tensor) -> None:
    """Free ``w``'s plain storage: every tensor of ``model`` on it (the fused buffer and the
    parameters that are its row blocks) is moved, shape and strides kept, onto a new storage
    that is then shrunk to nothing (a loaded storage cannot be shrunk itself: reading the file
    into it through numpy made it fixed-size)."""
    old = w.untyped_storage()
    nbytes = old.nbytes()
    users = [t for _, t in (*model.named_parameters(remove_duplicate=False), *model.named_buffers(remove_duplicate=False))
             if t is not None and t.untyped_storage().data_ptr() == old.data_ptr()]
    fresh = torch.UntypedStorage(0, device=w.device)
    fresh.resize_(nbytes)  # an allocation nothing touches: not resident
    for t in {id(t): t for t in [w, *users]}.values():
        t.set_(fresh, t.storage_offset(), t.shape, t.stride())
    fresh.resize_(0)
    setattr(w, _RELEASED, nbytes)


@torch.no_grad()
def unpack(model: nn.Module) -> int:
    """Restore every plain weight ``prepack`` freed (from its packed copy: the same values) and
    drop every packed copy; returns how many weights were packed."""
    done = 0
    for mod, attr in _sites(model):
        w = getattr(mod, attr)
        if getattr(w, KERNEL, False):
            delattr(w, KERNEL)
            done += 1
            continue
        packed = getattr(w, PACKED, None)
        if packed is None:
            continue
        nbytes = getattr(w, _RELEASED, None)
        if nbytes is not None:
            w.untyped_storage().resize_(nbytes)
            w.copy_(packed.to_dense())
            delattr(w, _RELEASED)
        delattr(w, PACKED)
        done += 1
    return done


def released(weight: torch.Tensor | None) -> bool:
    """Whether ``weight``'s plain storage was freed by ``prepack`` (only its packed copy is left)."""
    return weight is not None and hasattr(weight, _RELEASED)


def is_packed(model: nn.Module) -> bool:
    """Whether any weight of ``model`` runs through a packed copy."""
    return any(getattr(getattr(mod, attr), PACKED, None) is not None for mod, attr in _sites(model))


def uses_kernel(model: nn.Module) -> bool:
    """Whether any weight of ``model`` runs through the own AVX2 kernel (``cpu_kernel``)."""
    return any(getattr(getattr(mod, attr), KERNEL, False) for mod, attr in _sites(model))


def cpu_linear_path(*models: object) -> str:
    """How the models' bf16 linears run on a CPU: ``onednn-packed``, ``avx2-kernel`` or ``torch``
    (also once a call of the kernel failed and torch's path took over)."""
    mods = [m for m in models if isinstance(m, nn.Module)]
    if any(is_packed(m) for m in mods):
        return "onednn-packed"
    return "avx2-kernel" if any(uses_kernel(m) for m in mods) and not cpu_kernel.failed() else "torch"


def slow_path_note(*models: object) -> str | None:
    """A loading line when bf16 weights on a CPU kept torch's slow path because the AVX2 kernel
    was refused (no compiler, a failed build, the switch, a call that failed): why, and what would
    change it; or, when the kernel runs but was not taken from its cache, why it was built for
    this process alone (a cache that is not private, or cannot be written) or rebuilt (a cached
    library that may not be loaded). None when a fast path runs from the cache or none was ever
    wanted."""
    mods = [m for m in models if isinstance(m, nn.Module)]
    why = cpu_kernel.why_not()
    bf16_cpu = any(p.dtype == torch.bfloat16 and p.device.type == "cpu" for m in mods for p in m.parameters())
    path = cpu_linear_path(*mods)
    if path == "avx2-kernel" and (note := cpu_kernel.cache_note()):
        return f"the AVX2 kernel was {note}; docs/runtime-speed.md says what the cache needs"
    if why is None or not bf16_cpu or path != "torch":
        return None
    return (f"bf16 products run on torch's slower path: the AVX2 kernel is not used ({why}); "
            "docs/runtime-speed.md says what it needs")


def kernel_failed_note() -> str | None:
    """A line when a call of the AVX2 kernel failed during the run, so torch's path ran the rest
    (the figures then mix both paths); None when none did."""
    why = cpu_kernel.failed()
    return None if why is None else f"bf16 products ran on torch's slower path after the AVX2 kernel failed ({why})"


def prepack_pair(target: nn.Module, draft: nn.Module) -> tuple[int, float]:
    """``prepack`` a target and its draft for a CPU run: ``(weights packed, seconds)``. The
    draft reads the target's embeddings and lm_head, which ``prepack(target)`` packs (keeping
    the tied table's plain copy for the embedding lookups). A transformers-backend target is a
    wrapper around transformers' own modules, whose forward calls torch's linear, not ours: it is
    left as loaded."""
    import time

    t0 = time.perf_counter()
    n = (prepack(target) if isinstance(target, nn.Module) else 0) + prepack(draft)
    return n, time.perf_counter() - t0
