"""CUDA failures as one coded line (exit 2), never a traceback: the one place torch's exceptions are read.

A run on a GPU can fail for reasons that say nothing about the pair: the device ran out of
memory after the pre-check passed (another process took it, or temporaries the estimate does not
count), the device is busy (exclusive-process mode, another job) or was lost (fallen off the bus,
an uncorrectable ECC error, a launch failure), the NVIDIA driver is older than the CUDA torch was
built for, or the GPU lacks the kernels the dtype needs (bfloat16 below compute capability 8.0:
DF318's case). torch raises these as ``torch.cuda.OutOfMemoryError`` or as a ``RuntimeError``
whose text names the CUDA error; ``device_failure`` reads them into a ``UsageError`` (exit 2: the
run did not happen, the pair is not judged) and ``DeviceFailures`` applies it to a block.

The texts matched are CUDA's and torch's own messages (``cudaGetErrorString``, torch's driver
check): a message that matches none of them is left alone and stays a traceback, a bug to fix
rather than a failure to name wrongly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import torch

from dflash_ckpt.errors import UsageError

GIB = 1 << 30


@dataclass(frozen=True)
class MemoryBudget:
    """The memory pre-check's figures (``runtime/memory.py``): its estimate of the run's peak and
    each limit's free bytes when it ran, named (``free CUDA memory`` on a GPU)."""

    needed: int
    limits: dict[str, int] = field(default_factory=dict)

    def describe(self) -> str:
        if not self.limits:
            return f"the pre-check estimated {self.needed / GIB:.2f} GiB"
        name, room = min(self.limits.items(), key=lambda kv: kv[1])
        return f"the pre-check estimated {self.needed / GIB:.2f} GiB against {room / GIB:.2f} GiB free ({name})"


_OOM = re.compile(r"CUDA out of memory|CUBLAS_STATUS_ALLOC_FAILED|CUDNN_STATUS_ALLOC_FAILED|"
                  r"CUDA error: out of memory", re.I)
_BUSY = re.compile(r"busy or unavailable|CUDA error: device busy", re.I)
_LOST = re.compile(r"fallen off the bus|unspecified launch failure|uncorrectable ECC error|"
                   r"CUDA error: unknown error|CUDA error: launch timed out|device not ready|"
                   r"CUDA driver is shutting down|no CUDA-capable device is detected", re.I)
#: Any other CUDA error (an illegal memory access, a device-side assert, a failed capture): named
#: as CUDA's, with the advice to report it when it repeats (it may be this tool's bug).
_CUDA = re.compile(r"CUDA error|CUBLAS_STATUS_|CUDNN_STATUS_|cudaError", re.I)
_DRIVER = re.compile(r"driver version is insufficient|NVIDIA driver on your system is too old|"
                     r"found no NVIDIA driver|CUDA driver initialization failed|"
                     r"forward compatibility was attempted on non supported HW", re.I)
_NO_KERNEL = re.compile(r"no kernel image is available|CUBLAS_STATUS_ARCH_MISMATCH", re.I)
_DTYPE = re.compile(r"bfloat16|bf16|CUBLAS_STATUS_NOT_SUPPORTED|CUBLAS_STATUS_ARCH_MISMATCH|"
                    r"no kernel image is available", re.I)


def device_failure(exc: BaseException, device: torch.device | str | None, *, where: str | None,
                   budget: MemoryBudget | None = None, dtype: torch.dtype | None = None,
                   capability: tuple[int, int] | None = None) -> UsageError | None:
    """``exc`` read as a CUDA failure of the run on ``device`` (None: not known, "the GPU"): one
    coded ``UsageError`` (exit 2), or None when it is not one. ``budget``: the memory pre-check's figures, named beside an
    out-of-memory error; ``dtype`` and ``capability``: the run's dtype and the GPU's compute
    capability, which decide DF318's case (bfloat16 below 8.0)."""
    if not isinstance(exc, RuntimeError):  # torch.cuda.OutOfMemoryError is a RuntimeError too
        return None
    text = str(exc)
    line = (text.strip().splitlines() or [""])[0][:300]
    first = f"{type(exc).__name__}: {line}" if line else type(exc).__name__
    device = "the GPU" if device is None else device
    oom = getattr(torch.cuda, "OutOfMemoryError", None)
    if (oom is not None and isinstance(exc, oom)) or _OOM.search(text):
        pre = f"{budget.describe()}, so " if budget is not None else ""
        return UsageError(f"ran out of memory on {device} during the run ({first}); {pre}another process took "
                          "device memory meanwhile or this run's temporaries outgrew the estimate; free the GPU "
                          "(nvidia-smi shows who holds it), use a GPU with more memory, or a shorter "
                          "--max-new-tokens", code="DF407", path=where)
    below = capability is not None and capability < (8, 0)
    if below and dtype == torch.bfloat16 and _DTYPE.search(text):
        major, minor = capability  # type: ignore[misc]
        return UsageError(f"{device} (compute capability {major}.{minor}, below 8.0) has no bfloat16 kernel this run "
                          f"needs ({first}); DFlash drafts run in bfloat16 (float16 accepts ~0): run on a GPU of "
                          "capability 8.0 or later (Ampere, e.g. A100, RTX 30xx) or on the CPU (--device cpu)",
                          code="DF318", path=where)
    if _BUSY.search(text):
        return UsageError(f"{device} is busy or unavailable ({first}): another process holds it (exclusive-process "
                          "compute mode) or it is reserved; free it (nvidia-smi) or pick another with --device cuda:N",
                          code="DF419", path=where)
    if _DRIVER.search(text):
        return UsageError(f"the NVIDIA driver does not match torch {torch.__version__} (CUDA "
                          f"{torch.version.cuda or '?'}): {first}; update the driver, or install a torch built for "
                          "the CUDA version the driver supports (nvidia-smi shows it)", code="DF419", path=where)
    if _NO_KERNEL.search(text):
        return UsageError(f"torch {torch.__version__} (CUDA {torch.version.cuda or '?'}) has no kernels for {device}"
                          f"{_capability(capability)} ({first}); install a torch build that supports this GPU, or "
                          "run on the CPU (--device cpu)", code="DF419", path=where)
    if _LOST.search(text):
        return UsageError(f"{device} failed during the run ({first}); the device may be lost or faulty: check "
                          "nvidia-smi and the kernel log (Xid errors), then rerun; the pair was not judged",
                          code="DF419", path=where)
    if _CUDA.search(text):
        return UsageError(f"a CUDA error ended the run on {device} ({first}); rerun, and if it repeats, report it "
                          "with this line and the output of nvidia-smi (rerunning with --no-compile skips the CUDA "
                          "graphs); the pair was not judged", code="DF419", path=where)
    return None


def _capability(capability: tuple[int, int] | None) -> str:
    return f" (compute capability {capability[0]}.{capability[1]})" if capability is not None else ""


def _device_capability(device: torch.device | None) -> tuple[int, int] | None:
    """The GPU's compute capability, or None (off CUDA, not known, or when asking fails too: a
    lost device)."""
    if device is None or device.type != "cuda":
        return None
    try:
        return tuple(torch.cuda.get_device_capability(device))  # type: ignore[return-value]
    except Exception:  # noqa: BLE001 - a lost device fails this too; the line names the first error
        return None


class DeviceFailures:
    """A block in which a CUDA failure (``device_failure``) ends the run as one coded line;
    ``budget`` may be set inside the block, once the memory pre-check has run."""

    def __init__(self, device: torch.device | None, *, where: str | None, dtype: torch.dtype | None = None) -> None:
        self.device, self.where, self.dtype = device, where, dtype
        self.budget: MemoryBudget | None = None

    def __enter__(self) -> DeviceFailures:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any) -> bool:
        if not isinstance(exc, RuntimeError):
            return False
        err = device_failure(exc, self.device, where=self.where, budget=self.budget, dtype=self.dtype,
                             capability=_device_capability(self.device))
        if err is None:
            return False
        raise err from None


__all__ = ["DeviceFailures", "MemoryBudget", "device_failure"]
