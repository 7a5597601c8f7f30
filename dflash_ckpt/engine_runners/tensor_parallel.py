"""Tensor parallel on vLLM's CPU build: one core list per rank, heads that divide, KV per rank.

Why: vLLM's CPU workers bind their OpenMP threads to cores; with ``VLLM_CPU_OMP_THREADS_BIND``
at ``auto`` it gives each rank a NUMA node, so ``--tensor-parallel-size 2`` on a one-node machine
has no cores for the second rank. ``cpu_bind`` splits the usable cores into one list per rank
(``0|1`` on two cores), unless the user set a binding. A size that does not divide the target's
or the draft's attention or KV heads fails inside the workers after a long start (DF004 here,
before anything starts). ``VLLM_CPU_KVCACHE_SPACE`` is per rank: the memory check counts it
``size`` times. The same flags carry ``--tensor-parallel-size 8`` to a GPU node, where vLLM
places the ranks itself.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Sequence

from dflash_ckpt.errors import UsageError

if TYPE_CHECKING:
    from dflash_ckpt.draftspec.specs import Dims


def refuse_heads(size: int, models: Sequence[tuple[str, Dims]]) -> None:
    """DF004 when ``size`` does not divide a model's attention or KV heads (``models``: each
    config's place and its decoded dimensions)."""
    if size <= 1:
        return
    for where, dims in models:
        for key, count in (("num_attention_heads", dims.num_attention_heads),
                           ("num_key_value_heads", dims.num_key_value_heads)):
            if count is not None and count % size:
                raise UsageError(f"--tensor-parallel-size {size}: key '{key}' is {count}, which {size} ranks cannot "
                                 f"split evenly ({where}); choose a size that divides it", key="--tensor-parallel-size",
                                 path=where)


def usable_cores() -> list[int]:
    """The cores this process may run on."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))


def cpu_bind(size: int, cores: Sequence[int] | None = None) -> str | None:
    """``VLLM_CPU_OMP_THREADS_BIND`` for ``size`` ranks: the cores split into ``size`` contiguous
    lists joined by ``|`` (``None`` for one rank). ``UsageError`` when there are fewer cores than
    ranks."""
    if size <= 1:
        return None
    cores = list(cores if cores is not None else usable_cores())
    if len(cores) < size:
        raise UsageError(f"--tensor-parallel-size {size}: vLLM's CPU build binds each rank to cores of its own, "
                         f"and this process may use {len(cores)} core(s)", key="--tensor-parallel-size")
    per, extra = divmod(len(cores), size)
    lists, at = [], 0
    for rank in range(size):
        n = per + (1 if rank < extra else 0)
        lists.append(",".join(map(str, cores[at:at + n])))
        at += n
    return "|".join(lists)


def cpu_env(size: int, cpu_build: bool) -> dict[str, str]:
    """What a CPU-build run at ``size`` ranks needs in its environment (a user's binding wins)."""
    if not cpu_build or size <= 1 or os.environ.get("VLLM_CPU_OMP_THREADS_BIND"):
        return {}
    bind = cpu_bind(size)
    return {"VLLM_CPU_OMP_THREADS_BIND": bind} if bind else {}


__all__ = ["cpu_bind", "cpu_env", "refuse_heads", "usable_cores"]
