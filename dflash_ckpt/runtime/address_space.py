"""Is there address space for torch at all? Checked before ``import torch``, without importing it.

Under an address-space limit (``ulimit -v``, ``prlimit --as=N``) importing torch fails in ways
no handler can turn into one line: an ``ImportError`` ("failed to map segment"), a MemoryError,
OpenBLAS printing its own error and exiting 1, or ``std::bad_alloc`` aborting the process from
C++. The import maps every shared library of torch, numpy and tokenizers, so the address space
it needs is at least those files' size on disk plus what this process already maps; below that
(plus a margin for the interpreter's heap and OpenBLAS's buffers) the run is refused in one DF407
line before anything is imported. A failure of the import above the floor is caught and given the
same line (``torch_import_guard``). The memory pre-check (``memory.require_fits``) then counts the
run itself.

Measured (benchmarks/README.md, "memory limits"): on the tiny pair the imports peak at 629 MiB of
address space; the files come to 500 MiB and the process maps 19 MiB before them; the floor
(712 MiB there) sits under the 700-750 MiB where the tiny pair first passes.
"""

from __future__ import annotations

import importlib.util
import os
import resource
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from dflash_ckpt.errors import UsageError
from dflash_ckpt.limits import MiB, human_bytes

#: Packages whose shared libraries the run's imports map.
PACKAGES = ("torch", "numpy", "tokenizers", "safetensors")
#: Beyond the libraries: the interpreter's heap, Python modules, OpenBLAS's per-thread buffers
#: (the imports took 111 MiB more than the files on 2 cores) and the first kernels' workspace:
#: with no margin, a tiny pair under 640-680 MiB got a MemoryError, oneDNN's "could not create a
#: primitive" and a segfault (exit 139) in turn; from 700 MiB it passes.
MARGIN = 192 * MiB


def vm_size() -> int:
    """This process's address space in bytes (0 where it cannot be read)."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def library_bytes(packages: tuple[str, ...] = PACKAGES) -> int:
    """Bytes of the shared libraries of ``packages`` not imported yet (and their ``<pkg>.libs``
    folders), found without importing them."""
    total = 0
    for name in packages:
        if name in sys.modules:  # imported already: mapped, and counted in this process's size
            continue
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        if spec is None or not spec.origin:
            continue
        root = Path(spec.origin).parent
        for folder in (root, root.parent / f"{name}.libs"):
            if not folder.is_dir():
                continue
            for path in folder.rglob("*.so*"):
                try:
                    total += path.stat().st_size
                except OSError:
                    continue
    return total


def import_floor() -> int:
    """Address space the run's imports need at least: what is mapped now, the libraries, the margin."""
    return vm_size() + library_bytes() + MARGIN


def soft_limit() -> int | None:
    """RLIMIT_AS's soft limit; ``None`` without one."""
    soft = resource.getrlimit(resource.RLIMIT_AS)[0]
    return None if soft == resource.RLIM_INFINITY else soft


def require_import_floor(command: str) -> None:
    """Refuse (DF407, exit 2) a run whose address-space limit is below what importing torch maps."""
    limit = soft_limit()
    if limit is None or "torch" in sys.modules:  # loaded: the memory pre-check counts the run
        return
    floor = import_floor()
    if limit < floor:
        raise UsageError(
            f"the address-space limit (RLIMIT_AS, ulimit -v) is {human_bytes(limit)}, below the "
            f"{human_bytes(floor)} that loading torch and running its CPU kernels need at least; raise the limit "
            "(a tiny pair needs about 1 GiB, a real one its weights and more)", code="DF407", path=command)


@contextmanager
def torch_import_guard(command: str) -> Iterator[None]:
    """Under an address-space limit, an import that fails for want of memory is one DF407 line."""
    limit = soft_limit()
    try:
        yield
    except (ImportError, MemoryError, OSError) as err:
        if limit is None or not isinstance(err, MemoryError) and "map" not in str(err) and "memory" not in str(err).lower():
            raise
        first = (str(err).splitlines() or [""])[0][:200] or type(err).__name__
        raise UsageError(
            f"loading torch failed under the address-space limit (RLIMIT_AS) of {human_bytes(limit)} "
            f"({type(err).__name__}: {first}); raise the limit", code="DF407", path=command) from None
