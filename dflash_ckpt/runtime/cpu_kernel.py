"""The reference runtime's own bf16 matrix product for CPUs whose oneDNN has no bf16 path.

Why: torch's CPU bf16 ``F.linear`` takes oneDNN only where the CPU has AVX-512 (BW, VL, DQ) or
AVX-NE-CONVERT (then ``prepack`` reorders the weights once). On an AVX2-only x86 CPU (an AMD
EPYC of this project's machines) it falls back to a generic kernel that streams a decode step's
weights at about half the memory's speed and runs a 16-row verify block at about 10 GFLOP/s,
15 times one decode step (benchmarks/README.md has the figures). ``kernels/bf16_linear.c``
widens bf16 to fp32 in registers and multiplies with AVX2 FMA: about 1.6x on a decode step's
products and 5x on a verify block's, with the same values up to the order of the fp32 sums
(within bf16 rounding of torch's; ``--no-compile`` keeps torch's path, the tests' oracle).

How: built once per source and compiler with the system's C compiler (``$CC``, else ``cc``) in
a private temporary folder, and kept in the user's cache (``$DFLASH_CKPT_KERNEL_DIR``, else
``$XDG_CACHE_HOME/dflash-ckpt/kernels``) with the sha256 of its bytes beside it, each written to a
temporary name and renamed. A library is code (``dlopen`` runs its constructors), so one is
loaded only from a cache that ``kernel_cache`` finds private (ours, writable by no one else, no
symbolic link) and only when its bytes hash to the digest written beside it, and then from a
private copy of the verified bytes; otherwise the kernel is built for this process alone and
``cache_note()`` says why. Checked once against torch's fp32 product before any use. No compiler,
a CPU without AVX2 and FMA, a failed build, load or check, or any other failure of this optional
path: ``kernel()`` is None, ``why_not()`` says why, and the runtime keeps torch's path; a call
that returns an error during the run hands the rest of it to torch's path (``failed()``).
``DFLASH_CKPT_NO_KERNEL=1`` turns it off.
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
import torch.nn.functional as F

from dflash_ckpt.runtime import kernel_cache

SOURCE = Path(__file__).with_name("kernels") / "bf16_linear.c"
#: Flags of the build: with OpenMP when the compiler has it (threads split the weight rows).
_FLAGS = ("-O3", "-mavx2", "-mfma", "-shared", "-fPIC")
_reason: list[str] = []
_cache_note: list[str] = []
#: Set when this process wrote its build into the cache.
_stored: list[bool] = []
#: Set when a call of the loaded kernel failed: torch's path runs from then on, and it says why.
_failed: list[str] = []


def why_not() -> str | None:
    """Why the kernel is not used on this machine (None when it is, or was never asked for)."""
    reasons = _failed or _reason
    return reasons[0] if reasons else None


def cache_note() -> str | None:
    """How and why the kernel in use was not taken from the cache, when it was not: built for
    this process alone (the cache was refused by ``kernel_cache``'s rule, or could not be
    written), or rebuilt into the cache (it held a library that may not be loaded). None when
    the cache served it, or a fresh cache took the first build."""
    if not _cache_note or why_not():
        return None
    how = "rebuilt into the cache" if _stored else "built for this run alone"
    return f"{how} ({'; '.join(_cache_note)})"


@functools.lru_cache(maxsize=1)
def kernel() -> ctypes.CDLL | None:
    """The loaded, checked kernel library, or None (``why_not`` says why). Built at most once a
    process; a cached build is reused. Any failure of this optional path, foreseen or not, is a
    reason and torch's path, never an error of the run."""
    _reason.clear()
    _cache_note.clear()
    _stored.clear()
    _failed.clear()
    try:
        lib = _load()
    except _Refused as exc:
        _reason.append(str(exc))
        return None
    except Exception as exc:  # noqa: BLE001 - an optional accelerator: whatever breaks, torch's path runs
        _reason.append(f"the kernel failed to load ({type(exc).__name__}: {str(exc)[:200]})")
        return None
    return lib


class _Refused(Exception):
    """The kernel cannot be used here; the message says why."""


def _load() -> ctypes.CDLL:
    if os.environ.get("DFLASH_CKPT_NO_KERNEL", "") not in ("", "0"):
        raise _Refused("turned off by DFLASH_CKPT_NO_KERNEL")
    if platform.machine().lower() not in ("x86_64", "amd64") or not _cpu_has("avx2", "fma"):
        raise _Refused("the CPU has no AVX2 and FMA")
    lib = _library()
    try:
        fn = lib.dflash_bf16_linear
    except AttributeError:
        raise _Refused("the built kernel has no dflash_bf16_linear") from None
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
    """Where built kernels are kept (used only where ``kernel_cache``'s rule holds)."""
    if os.environ.get("DFLASH_CKPT_KERNEL_DIR"):
        return Path(os.environ["DFLASH_CKPT_KERNEL_DIR"])
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "dflash-ckpt" / "kernels"


def library_name(cc: str) -> str:
    """The cached library's file name: keyed by the source, the compiler's version and the flags."""
    version = _run([cc, "--version"]).stdout[:200]
    tag = hashlib.sha256(SOURCE.read_bytes() + version.encode() + " ".join(_FLAGS).encode()).hexdigest()[:16]
    return f"bf16_linear-{tag}.so"


def _compiler() -> str:
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise _Refused("no C compiler (set CC, or install gcc)")
    return cc


def _library() -> ctypes.CDLL:
    """The kernel library, loaded from verified bytes only: the private cache's copy when its
    digest holds, else a fresh build (stored in the cache when the cache is private and can
    take it; loaded from a private temporary folder either way)."""
    cc = _compiler()
    name = library_name(cc)
    where = cache_dir()
    try:
        dir_fd, where_text = kernel_cache.open_private_dir(where)
    except kernel_cache.Unsafe as exc:
        _cache_note.append(f"the kernel cache is not used: {exc}")
        dir_fd, where_text = None, None
    except OSError as exc:
        _cache_note.append(f"the kernel cache is not used: {where}: {exc.strerror or exc}")
        dir_fd, where_text = None, None
    try:
        if dir_fd is not None:
            try:
                data = kernel_cache.read_verified(dir_fd, name, where_text or str(where))
            except kernel_cache.Unsafe as exc:
                _cache_note.append(f"a cached kernel is not loaded: {exc}")
                data = None
            if data is not None:
                return _dlopen(data, where_text, name)
        data = _compile(cc, name)
        near = None
        if dir_fd is not None:
            try:
                kernel_cache.store(dir_fd, name, data)
                near = where_text
                _stored.append(True)
            except OSError as exc:
                _cache_note.append(f"the kernel cache cannot be written: {where_text}/{name}: {exc.strerror or exc}")
        return _dlopen(data, near, name)
    finally:
        if dir_fd is not None:
            os.close(dir_fd)


def _dlopen(data: bytes, near: str | None, name: str) -> ctypes.CDLL:
    try:
        return kernel_cache.load_bytes(data, near, name)
    except OSError as exc:
        raise _Refused(f"the built kernel does not load: {exc}") from None


def _compile(cc: str, name: str) -> bytes:
    """The library's bytes, compiled into a fresh private temporary folder (mode 0700)."""
    with tempfile.TemporaryDirectory(prefix="dflash-ckpt-build-") as folder:
        out = os.path.join(folder, name)
        for extra in (("-fopenmp",), ()):  # OpenMP when the compiler has it
            done = _run([cc, *_FLAGS, *extra, str(SOURCE), "-o", out])
            if done.returncode == 0:
                break
        else:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise _Refused(f"{cc} could not build {SOURCE.name}: {last[:200]}")
        try:
            dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
            try:
                return kernel_cache.read_built(dir_fd, name, out)
            finally:
                os.close(dir_fd)
        except (kernel_cache.Unsafe, OSError) as exc:
            raise _Refused(f"{cc} built {SOURCE.name}, but {exc}") from None


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
        got = torch.empty(x.shape[0], w.shape[0], dtype=torch.bfloat16)
        if rc := _call(fn, x, w, b, got, threads=2):
            raise _Refused(f"the built kernel returned error {rc} in its check")
        want = (x.float() @ w.float().T + b.float()).to(torch.bfloat16)
        ulp = want.float().abs().clamp_min(1e-3).log2().floor().sub(7).exp2()
        if not bool(((got.float() - want.float()).abs() <= ulp).all()):
            raise _Refused("the built kernel failed its check against torch")


def _call(fn: ctypes._CFuncPtr, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, out: torch.Tensor,
          threads: int) -> int:
    """The kernel's product into ``out``; its return code (0: done; else its buffers could not be
    allocated, and ``out`` holds nothing)."""
    return int(fn(x.data_ptr(), w.data_ptr(), 0 if b is None else b.data_ptr(), out.data_ptr(),
                  x.shape[0], w.shape[0], w.shape[1], threads))


def usable(weight: torch.Tensor) -> bool:
    """Whether ``weight`` can run through the kernel: 2-D, contiguous bf16 on a CPU, kernel built."""
    return (weight.dim() == 2 and weight.dtype == torch.bfloat16 and weight.device.type == "cpu"
            and not weight.is_meta and weight.is_contiguous() and kernel() is not None and not _failed)


def failed() -> str | None:
    """Why the loaded kernel stopped being used during the run (a call returned an error), or None."""
    return _failed[0] if _failed else None


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear(x, weight, bias)`` for bf16 ``x`` and a ``usable`` weight, by the kernel; by
    torch's path once a call of the kernel has failed (``failed`` says why): an optional path
    that breaks is not the run's error (a real shortage of memory then shows in torch's own)."""
    lib = kernel()
    if lib is None or _failed:
        return F.linear(x, weight, bias)
    flat = x.reshape(-1, x.shape[-1]).contiguous()
    if bias is not None:
        bias = bias.to(torch.bfloat16).contiguous()
    out = torch.empty(flat.shape[0], weight.shape[0], dtype=torch.bfloat16)
    if rc := _call(lib.dflash_bf16_linear, flat, weight, bias, out, torch.get_num_threads()):
        _failed.append(f"a call of the kernel returned error {rc} (its buffers could not be allocated)")
        return F.linear(x, weight, bias)
    return out.view(*x.shape[:-1], weight.shape[0])
