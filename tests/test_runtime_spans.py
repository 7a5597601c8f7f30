"""Attention bounded by the used length (runtime/static.py span buckets) and rope tables that
captured CUDA graphs can keep reading (runtime/rope.py), checked on the CPU."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import tiny_models as tm
from dflash_ckpt.draftspec.rope_spec import RopeSpec
from dflash_ckpt.runtime.generate import decode
from dflash_ckpt.runtime.eager_dflash import dflash_decode
from dflash_ckpt.runtime.rope import RotaryTable
from dflash_ckpt.runtime.static import StaticRunner, span_buckets

PROMPT = [1, 87, 85, 263, 201, 74, 75, 2, 1, 30, 40, 50, 60]

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def fp32(tmp_path_factory: pytest.TempPathFactory):
    return tm.load_runtime_pair(*tm.make_pair(tmp_path_factory.mktemp("pair")))


def test_span_buckets() -> None:
    assert span_buckets(4096) == [64, 128, 256, 512, 1024, 2048, 4096]
    assert span_buckets(300) == [64, 128, 256, 300]
    assert span_buckets(40) == [40]


class KeyLengths(TorchDispatchMode):
    """The key length of every attention call."""

    def __init__(self) -> None:
        super().__init__()
        self.keys: list[int] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        if "scaled_dot_product" in func.name():
            self.keys.append(args[1].shape[-2])
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("capacity", [128, 1024, 4096])
def test_steps_attend_over_the_used_span_not_the_capacity(fp32, capacity: int) -> None:
    """At 64 used positions every decode, draft and verify step attends over 64 keys (the
    first bucket), whatever the capacity: the cost follows the context."""
    target, draft = fp32
    runner = StaticRunner(target, draft, capacity, block_size=8)
    with torch.inference_mode():
        runner._prefill(list(range(1, 49)), runner.taps)
        runner.t_pos.fill_(48)
        runner.pos.fill_(48)
        rec = KeyLengths()
        with rec:
            for name in ("draft", "verify", "decode"):
                runner._run(name, 56 if name != "decode" else 49)
    assert rec.keys and set(rec.keys) == {64}
    rec = KeyLengths()
    with torch.inference_mode(), rec:
        runner._run("decode", 65)
    assert set(rec.keys) == {min(128, capacity)}


@pytest.mark.slow
def test_runs_crossing_span_buckets_give_the_generic_tokens(fp32) -> None:
    """Decoding from 13 to 153 positions crosses the 64 and 128 buckets of a 300-position cache."""
    target, draft = fp32
    tc, dc = target.new_cache(300), draft.new_cache(300)
    runner = StaticRunner(target, draft, 300, block_size=8)
    ref = decode(target, PROMPT, max_new_tokens=140, cache=tc)
    assert runner.decode(PROMPT, max_new_tokens=140).tokens == ref.tokens
    generic = dflash_decode(target, draft, PROMPT, max_new_tokens=140, target_cache=tc, draft_cache=dc, block_size=8)
    static = runner.dflash(PROMPT, max_new_tokens=140)
    assert static.tokens == generic.tokens == ref.tokens
    assert static.acceptance_lengths == generic.acceptance_lengths


def test_rope_tables_keep_their_address() -> None:
    """Graphs captured after ``grow`` read cos/sin by address: growing within the capacity,
    moving to the same device and a new cache change nothing; a real growth makes new tables
    and keeps the old ones alive with their values (an older graph reads valid memory)."""
    table = RotaryTable(RopeSpec("default", 10000.0, 4096), 64, capacity=256)
    cos, sin, cast = table.cos, table.sin, table.gather(torch.arange(4), torch.bfloat16, signed=True)
    ptrs = [t.data_ptr() for t in (table.cos, table.sin, *table._cast[torch.bfloat16])]
    table.grow(200)
    table.to("cpu")
    table.to(torch.device("cpu"))
    assert [t.data_ptr() for t in (table.cos, table.sin, *table._cast[torch.bfloat16])] == ptrs
    old_cast = table._cast[torch.bfloat16]
    table.grow(1024)
    assert table.capacity == 1024 and table.cos.data_ptr() != ptrs[0]
    assert any(r[0] is cos and r[1] is sin and r[2][torch.bfloat16] is old_cast for r in table._retired)
    torch.testing.assert_close(table.cos[:256], cos)
    again = table.gather(torch.arange(4), torch.bfloat16, signed=True)
    torch.testing.assert_close(again[0], cast[0]) and torch.testing.assert_close(again[1], cast[1])


def test_new_cache_within_capacity_keeps_the_target_rope_tables(fp32) -> None:
    target, _ = fp32
    target.new_cache(512)
    target.rotary.gather(torch.arange(3), target.dtype, signed=True)
    ptrs = [t.data_ptr() for t in target.rotary._cast[target.dtype]]
    target.new_cache(300)
    assert [t.data_ptr() for t in target.rotary._cast[target.dtype]] == ptrs
