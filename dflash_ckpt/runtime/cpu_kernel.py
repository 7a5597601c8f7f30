"""The reference runtime's own bf16 matrix product for CPUs whose oneDNN has no bf16 path.

Why: torch's CPU bf16 ``F.linear`` takes oneDNN only where the CPU has AVX-512 (BW, VL, DQ) or
AVX-NE-CONVERT (then ``prepack`` reorders the weights once). On an AVX2-only x86 CPU (an AMD
EPYC of this project's machines) it falls back to a generic kernel that streams a decode step's
weights at about half the memory's speed and runs a 16-row verify block at about 10 GFLOP/s,
15 times one decode step (benchmarks/README.md has the figures). ``kernels/bf16_linear.c``
widens bf16 to fp32 in registers and multiplies with AVX2 FMA: about 1.6x on a decode step's
products and 5x on a verify block's, with the same values up to the order of the fp32 sums
(within bf16 rounding of torch's; ``--no-compile`` keeps torch's path, the tests' oracle).

How: built once per source and compiler with the system's C compiler (``$CC``, else ``cc``)
into the user's cache (``$DFLASH_CKPT_KERNEL_DIR``, else ``$XDG_CACHE_HOME/dflash-ckpt/kernels``),
written to a temporary name and renamed, so concurrent runs never load a half-written file;
loaded with ctypes; checked once against torch's fp32 product before any use. No compiler, a
CPU without AVX2 and FMA, a failed build or a failed check: ``kernel()`` is None, ``why_not()``
says why, and the runtime keeps torch's path. ``DFLASH_CKPT_NO_KERNEL=1`` turns it off.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch

SOURCE = Path(__file__).with_name("kernels") / "bf16_linear.c"
#: Flags of the build: with OpenMP when the compiler has it (threads split the weight rows).
_FLAGS = ("-O3", "-mavx2", "-mfma", "-shared", "-fPIC")
_reason: list[str] = []


def why_not() -> str | None:
    """Why the kernel is not used on this machine (None when it is, or was never asked for)."""
    return _reason[0] if _reason else None


@functools.lru_cache(maxsize=1)
def kernel() -> ctypes.CDLL | None:
    """The loaded, checked kernel library, or None (``why_not`` says why). Built at most once a
    process; a cached build is reused."""
    _reason.clear()
    try:
        lib = _load()
    except _Refused as exc:
        _reason.append(str(exc))
        return None
    return lib


class _Refused(Exception):
    """The kernel cannot be used here; the message says why."""


def _load() -> ctypes.CDLL:
    if os.environ.get("DFLASH_CKPT_NO_KERNEL", "") not in ("", "0"):
        raise _Refused("turned off by DFLASH_CKPT_NO_KERNEL")
    if platform.machine().lower() not in ("x86_64", "amd64") or not _cpu_has("avx2", "fma"):
        raise _Refused("the CPU has no AVX2 and FMA")
    path = _build()
    try:
        lib = ctypes.CDLL(str(path))
    except OSError as exc:
        raise _Refused(f"the built kernel does not load: {exc}") from None
    fn = lib.dflash_bf16_linear
    fn.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_int64] * 3 + [ctypes.c_int]
    fn.restype = ctypes.c_int
    _self_check(fn)
    return lib


def _cpu_has(*flags: str) -> bool:
    """Whether /proc/cpuinfo lists every flag (Linux; elsewhere: no)."""
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return False
    for line in text.splitlines():
        if line.startswith("flags"):
            have = set(line.split(":", 1)[1].split())
            return all(f in have for f in flags)
    return False


def cache_dir() -> Path:
    """Where built kernels are kept."""
    if os.environ.get("DFLASH_CKPT_KERNEL_DIR"):
        return Path(os.environ["DFLASH_CKPT_KERNEL_DIR"])
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "dflash-ckpt" / "kernels"


def _build() -> Path:
    """The built library for this source and compiler: reused when present, else compiled."""
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise _Refused("no C compiler (set CC, or install gcc)")
    source = SOURCE.read_bytes()
    version = _run([cc, "--version"]).stdout[:200]
    tag = hashlib.sha256(source + version.encode() + " ".join(_FLAGS).encode()).hexdigest()[:16]
    out_dir = cache_dir()
    path = out_dir / f"bf16_linear-{tag}.so"
    if path.is_file():
        return path
    try:
        out_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        raise _Refused(f"{out_dir}: cannot create the kernel cache ({exc.strerror}); set DFLASH_CKPT_KERNEL_DIR") from None
    fd, tmp = tempfile.mkstemp(prefix=".bf16_linear-", suffix=".so", dir=out_dir)
    os.close(fd)
    try:
        for extra in (("-fopenmp",), ()):  # OpenMP when the compiler has it
            done = _run([cc, *_FLAGS, *extra, str(SOURCE), "-o", tmp])
            if done.returncode == 0:
                break
        else:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise _Refused(f"{cc} could not build {SOURCE.name}: {last[:200]}")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def _run(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise _Refused(f"{cmd[0]} did not run: {exc}") from None


def _self_check(fn: ctypes._CFuncPtr) -> None:
    """Odd shapes (tails of every loop), one row and many, with a bias, against torch's fp32
    product rounded to bf16: at most one bf16 ulp apart (the fp32 sums' order differs)."""
    gen = torch.Generator().manual_seed(0)
    for m, n, k in ((1, 13, 45), (7, 13, 45), (5, 10, 64)):
        x = torch.randn(m, k, generator=gen).to(torch.bfloat16)
        w = torch.randn(n, k, generator=gen).to(torch.bfloat16)
        b = torch.randn(n, generator=gen).to(torch.bfloat16)
        got = _call(fn, x, w, b, threads=2)
        want = (x.float() @ w.float().T + b.float()).to(torch.bfloat16)
        ulp = want.float().abs().clamp_min(1e-3).log2().floor().sub(7).exp2()
        if not bool(((got.float() - want.float()).abs() <= ulp).all()):
            raise _Refused("the built kernel failed its check against torch")


def _call(fn: ctypes._CFuncPtr, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, threads: int) -> torch.Tensor:
    out = torch.empty(x.shape[0], w.shape[0], dtype=torch.bfloat16)
    if fn(x.data_ptr(), w.data_ptr(), 0 if b is None else b.data_ptr(), out.data_ptr(),
          x.shape[0], w.shape[0], w.shape[1], threads):
        raise MemoryError("dflash_bf16_linear: out of memory for its buffers")
    return out


def usable(weight: torch.Tensor) -> bool:
    """Whether ``weight`` can run through the kernel: 2-D, contiguous bf16 on a CPU, kernel built."""
    return (weight.dim() == 2 and weight.dtype == torch.bfloat16 and weight.device.type == "cpu"
            and not weight.is_meta and weight.is_contiguous() and kernel() is not None)


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear(x, weight, bias)`` for bf16 ``x`` and a ``usable`` weight, by the kernel."""
    lib = kernel()
    assert lib is not None, "cpu_kernel.linear called where the kernel is not usable"
    flat = x.reshape(-1, x.shape[-1]).contiguous()
    if bias is not None:
        bias = bias.to(torch.bfloat16).contiguous()
    out = _call(lib.dflash_bf16_linear, flat, weight, bias, torch.get_num_threads())
    return out.view(*x.shape[:-1], weight.shape[0])
