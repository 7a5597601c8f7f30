"""The runtime's own AVX2 bf16 kernel (runtime/cpu_kernel.py, kernels/bf16_linear.c; issue 28).

Held here: on a CPU with AVX2 and FMA and a C compiler, the kernel builds, loads and passes its
check; every output is torch's fp32 product within one bf16 ulp, over shapes that exercise each
loop's tail (one row and many, rows across the 96-row block, weight rows not a multiple of 4,
inner sizes not a multiple of 8 or 32), with and without a bias; the thread count changes no
output bit; a build goes to a temporary name and is renamed (no partial file is ever loaded)
and is reused; a refused build or ``DFLASH_CKPT_NO_KERNEL`` leaves torch's path with a reason;
and on a CPU whose oneDNN has no bf16 path, prepack marks the weights for it, the forwards run
through it, and smoke-run's header names it (``--no-compile``: torch's path; smoke-run's tokens
on both paths: tests/test_runtime_prepack.py), or says why it was not used.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Iterator

import pytest

torch = pytest.importorskip("torch")

from dflash_ckpt.runtime import cpu_kernel  # noqa: E402
from dflash_ckpt.runtime.prepack import KERNEL, cpu_linear_path, onednn_packs_bf16, prepack, unpack, uses_kernel  # noqa: E402
from tests.test_runtime_prepack import PROMPT, load_pair, outputs  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PAIR = ROOT / "fixtures" / "tiny-pair"


def _has_avx2() -> bool:
    return cpu_kernel._cpu_has("avx2", "fma")


def _switched_off() -> bool:
    """``DFLASH_CKPT_NO_KERNEL`` set for the whole run: torch's path stands in for a CPU without
    either fast path, and the kernel's own tests have nothing to test."""
    return os.environ.get("DFLASH_CKPT_NO_KERNEL", "") not in ("", "0")


needs_kernel = pytest.mark.skipif(not _has_avx2() or _switched_off(),
                                  reason="the CPU has no AVX2 and FMA, or DFLASH_CKPT_NO_KERNEL turns the kernel off")


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """A kernel cache of the test's own and a forgotten load, restored after."""
    monkeypatch.setenv("DFLASH_CKPT_KERNEL_DIR", str(tmp_path / "kernels"))
    monkeypatch.delenv("DFLASH_CKPT_NO_KERNEL", raising=False)
    cpu_kernel.kernel.cache_clear()
    yield tmp_path / "kernels"
    cpu_kernel.kernel.cache_clear()


def ulps_apart(got: torch.Tensor, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> float:
    """The largest distance of ``got`` from the fp32 product rounded to bf16, in bf16 ulps."""
    want = x.float() @ w.float().T + (b.float() if b is not None else 0.0)
    ulp = want.to(torch.bfloat16).float().abs().clamp_min(1e-2).log2().floor().sub(7).exp2()
    return ((got.float() - want.to(torch.bfloat16).float()).abs() / ulp).max().item()


@pytest.mark.slow
@needs_kernel
def test_the_kernel_builds_and_passes_its_check_here(fresh: Path) -> None:
    assert cpu_kernel.kernel() is not None, cpu_kernel.why_not()
    assert cpu_kernel.why_not() is None
    lib, sums = sorted(fresh.iterdir())  # the library and the sha256 of its bytes, nothing else
    assert lib.name.startswith("bf16_linear-") and lib.suffix == ".so" and sums.name == lib.name + ".sha256"
    assert sums.read_text().split()[0] == hashlib.sha256(lib.read_bytes()).hexdigest()


@needs_kernel
@pytest.mark.parametrize("m", [1, 2, 3, 4, 5, 16, 17, 97, 200])
@pytest.mark.parametrize("n,k", [(1, 1), (3, 7), (4, 8), (5, 9), (13, 31), (64, 32), (7, 33), (130, 100)])
def test_every_output_is_the_fp32_product_within_one_bf16_ulp(m: int, n: int, k: int) -> None:
    gen = torch.Generator().manual_seed(m * 1000 + n * 10 + k)
    x = torch.randn(m, k, generator=gen).to(torch.bfloat16)
    w = torch.randn(n, k, generator=gen).to(torch.bfloat16)
    b = torch.randn(n, generator=gen).to(torch.bfloat16)
    assert cpu_kernel.kernel() is not None, cpu_kernel.why_not()
    for bias in (None, b):
        got = cpu_kernel.linear(x, w, bias)
        assert got.shape == (m, n) and got.dtype == torch.bfloat16
        assert ulps_apart(got, x, w, bias) <= 1.0, (m, n, k, bias is not None)


@needs_kernel
def test_a_wrong_kernel_would_be_caught() -> None:
    """The ulp measure above fails a product that is off by a little more than rounding."""
    gen = torch.Generator().manual_seed(1)
    x, w = torch.randn(4, 64, generator=gen).to(torch.bfloat16), torch.randn(8, 64, generator=gen).to(torch.bfloat16)
    off = (x.float() @ w.float().T * 1.02).to(torch.bfloat16)
    assert ulps_apart(off, x, w, None) > 1.0


@needs_kernel
def test_threads_change_no_bit_and_three_dims_flatten(monkeypatch: pytest.MonkeyPatch) -> None:
    gen = torch.Generator().manual_seed(2)
    w = torch.randn(1000, 256, generator=gen).to(torch.bfloat16)
    for shape in ((1, 256), (16, 256), (2, 5, 256)):
        x = torch.randn(*shape, generator=gen).to(torch.bfloat16)
        outs = []
        for threads in (1, 2, 3):
            monkeypatch.setattr(torch, "get_num_threads", lambda t=threads: t)
            outs.append(cpu_kernel.linear(x, w))
        assert outs[0].shape == (*shape[:-1], 1000)
        assert torch.equal(outs[0], outs[1]) and torch.equal(outs[0], outs[2])


@needs_kernel
def test_a_row_gets_the_same_bits_in_any_block_of_two_or_more_rows() -> None:
    """Several rows sum each output over k in order, whatever the block's size or the row's
    place in it: a token verified in a block of 16 gets the bits it gets in a block of 2 or 40."""
    gen = torch.Generator().manual_seed(3)
    w = torch.randn(70, 300, generator=gen).to(torch.bfloat16)
    x = torch.randn(40, 300, generator=gen).to(torch.bfloat16)
    whole = cpu_kernel.linear(x, w)
    for start, size in ((0, 2), (5, 16), (7, 15), (24, 16), (38, 2), (1, 17)):
        part = cpu_kernel.linear(x[start:start + size], w)
        assert torch.equal(part, whole[start:start + size]), (start, size)


@pytest.mark.slow
@needs_kernel
def test_a_build_is_reused_and_leaves_no_partial_file(fresh: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert cpu_kernel.kernel() is not None
    built, sums = sorted(fresh.iterdir())
    stamp = built.stat().st_mtime_ns
    calls: list[list[str]] = []
    real_run = cpu_kernel._run
    monkeypatch.setattr(cpu_kernel, "_run", lambda cmd: calls.append(cmd) or real_run(cmd))
    cpu_kernel.kernel.cache_clear()
    assert cpu_kernel.kernel() is not None
    assert [c for c in calls if "-o" in c] == []  # only the compiler's --version was asked
    assert built.stat().st_mtime_ns == stamp and sorted(fresh.iterdir()) == [built, sums]
    assert cpu_kernel.cache_note() is None


def test_a_refused_build_keeps_torch_path_and_says_why(fresh: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CC", "/bin/false")
    assert cpu_kernel.kernel() is None
    reason = cpu_kernel.why_not()
    assert reason and ("could not build" in reason or "no AVX2" in reason)
    assert not fresh.exists() or [p.name for p in fresh.iterdir()] == []  # the temporary file is gone
    w = torch.ones(4, 8, dtype=torch.bfloat16)
    assert not cpu_kernel.usable(w)


def test_the_switch_turns_it_off(fresh: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DFLASH_CKPT_NO_KERNEL", "1")
    assert cpu_kernel.kernel() is None and "DFLASH_CKPT_NO_KERNEL" in (cpu_kernel.why_not() or "")


@pytest.mark.skipif(onednn_packs_bf16(), reason="oneDNN packs bf16 here: the kernel is never wanted")
def test_a_run_whose_kernel_was_refused_says_why(fresh: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Not silently slow: smoke-run's loading lines name the reason and torch's path runs."""
    pytest.importorskip("tokenizers")
    from dflash_ckpt.run.options import SmokeOptions
    from dflash_ckpt.run.smoke import run_smoke_run

    monkeypatch.setenv("CC", "/bin/false")
    lines: list[str] = []
    res = run_smoke_run(SmokeOptions(str(PAIR / "draft"), str(PAIR / "target"), max_new_tokens=8), log=lines.append)
    assert res.cpu_linear == "torch"
    said = [ln for ln in lines if "AVX2 kernel is not used" in ln]
    assert len(said) == 1 and ("could not build" in said[0] or "no AVX2" in said[0]), lines
    cpu_kernel.kernel.cache_clear()
    monkeypatch.delenv("CC")
    if _has_avx2():  # with a compiler again: the kernel runs and nothing is said
        lines.clear()
        res = run_smoke_run(SmokeOptions(str(PAIR / "draft"), str(PAIR / "target"), max_new_tokens=8), log=lines.append)
        assert res.cpu_linear == "avx2-kernel" and not [ln for ln in lines if "not used" in ln]


def parted_at_a_near_tie_or_not_at_all(got: list[int], want: list[int], logits: torch.Tensor) -> None:
    """``got`` equals ``want``, or first differs where ``want``'s two best logits (teacher-forced,
    ``logits[i]`` scores token ``i``) are within 2 bf16 ulps, after at least 16 equal tokens (the
    tiny pair has one such near tie, at position 19: 8.8125 against 8.75)."""
    at = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), None)
    if at is None:
        assert len(got) == len(want)
        return
    top = logits[at].float().topk(2).values
    ulp = 2.0 ** (top[0].abs().log2().floor().item() - 7)
    assert at >= 16 and (top[0] - top[1]).item() <= 2 * ulp, (at, top.tolist())


kernel_path = pytest.mark.skipif(not _has_avx2() or _switched_off() or onednn_packs_bf16(),
                                 reason="the kernel path is taken only where oneDNN has no bf16 path and AVX2 is there")


@kernel_path
def test_prepack_marks_the_decoding_weights_and_unpack_clears_them() -> None:
    target, draft = load_pair()
    plain = outputs(target, draft)
    n = prepack(target) + prepack(draft)
    assert n > 0 and uses_kernel(target) and uses_kernel(draft) and cpu_linear_path(target, draft) == "avx2-kernel"
    assert getattr(target.layers[0].mlp.gate_up, KERNEL) is True
    assert target.layers[0].mlp.gate_up.untyped_storage().nbytes() > 0  # nothing freed: the kernel reads it
    calls = []
    real = cpu_kernel.linear
    try:
        cpu_kernel.linear = lambda *a, **kw: calls.append(1) or real(*a, **kw)  # type: ignore[assignment]
        fast = outputs(target, draft)
    finally:
        cpu_kernel.linear = real  # type: ignore[assignment]
    assert len(calls) > 100  # the forwards really ran through it
    for key in ("decode", "dflash"):  # the same tokens, or parted only at a near tie
        parted_at_a_near_tie_or_not_at_all(fast[key], plain[key], plain["logits"])
    for key in ("verify_logits", "features"):  # the same prompt through both: within a bf16 ulp of each row's scale
        diff = (fast[key].float() - plain[key].float()).abs()
        scale = plain[key].float().abs().amax(dim=-1, keepdim=True).clamp_min(1e-2).log2().floor().sub(7).exp2()
        assert bool((diff <= scale).all()), key
    target(torch.tensor([PROMPT])).logits.float().sum().backward()  # gradients: torch's path, no error
    with torch.inference_mode():  # cast after marking: the marks stay, torch's fp32 path runs
        want = target(torch.tensor([PROMPT])).logits.float()
        target.float()
        got = target(torch.tensor([PROMPT])).logits
        target.bfloat16()
    assert got.dtype == torch.float32 and (got - want).abs().max().item() < 0.5
    assert unpack(target) > 0 and not uses_kernel(target) and cpu_linear_path(target, draft) == "avx2-kernel"
    unpack(draft)
    assert cpu_linear_path(target, draft) == "torch"


@kernel_path
def test_the_header_names_the_kernel(cli) -> None:  # noqa: ANN001 - conftest's runner
    res = cli("smoke-run", str(PAIR / "draft"), "--target", str(PAIR / "target"), "-n", "8")
    assert "AVX2 bf16 kernel (" in res.stdout, res.stdout
    res = cli("smoke-run", str(PAIR / "draft"), "--target", str(PAIR / "target"), "-n", "8", "--no-compile")
    assert "AVX2 bf16 kernel" not in res.stdout and "prepacked" not in res.stdout


def test_a_torch_without_the_private_reorder_op_keeps_the_plain_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """runtime/prepack.py's packed path rests on two private oneDNN ops: a torch that drops them
    must fall back (the AVX2 kernel, else torch's path), not fail with an AttributeError."""
    import types

    import dflash_ckpt.runtime.prepack as prepack_mod

    fake = types.SimpleNamespace(zeros=torch.zeros, bfloat16=torch.bfloat16,
                                 ops=types.SimpleNamespace(mkldnn=types.SimpleNamespace()))
    onednn_packs_bf16.cache_clear()
    monkeypatch.setattr(prepack_mod, "torch", fake)
    try:
        assert onednn_packs_bf16() is False
    finally:
        onednn_packs_bf16.cache_clear()
