"""CUDA failures are one coded line with exit 2, never a traceback (issue 44, item 2).

No GPU here: torch's own exception types and CUDA's own messages are raised from monkeypatched
functions, and read by the one place that maps them (runtime/device_errors.py); then through
smoke-run in process, where the line must be the only one and name the pre-check's estimate.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from conftest import ROOT, one_error_line
from dflash_ckpt.runtime.device_errors import DeviceFailures, MemoryBudget, device_failure

CUDA = torch.device("cuda:0")
BUDGET = MemoryBudget(3 << 30, {"free CUDA memory": 3 << 29})
TINY = ROOT / "fixtures" / "tiny-pair"

#: (exception, capability, code, words the line must hold)
CASES: dict[str, tuple[BaseException, tuple[int, int] | None, str, tuple[str, ...]]] = {
    "out of memory": (torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
                                                  "capacity of 15.77 GiB of which 1.02 GiB is free."),
                      (8, 0), "DF407", ("ran out of memory on cuda:0", "Tried to allocate 2.00 GiB",
                                        "the pre-check estimated 3.00 GiB against 1.50 GiB free (free CUDA memory)")),
    "cublas alloc": (RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"),
                     (8, 0), "DF407", ("ran out of memory", "CUBLAS_STATUS_ALLOC_FAILED")),
    "busy": (RuntimeError("CUDA error: CUDA-capable device(s) is/are busy or unavailable\nCUDA kernel errors might be "
                          "asynchronously reported"), (8, 0), "DF419",
             ("cuda:0 is busy or unavailable", "exclusive-process", "--device cuda:N")),
    "driver too old": (RuntimeError("The NVIDIA driver on your system is too old (found version 11040). Please update "
                                    "your GPU driver"), None, "DF419", ("the NVIDIA driver does not match torch",
                                                                        "found version 11040", "update the driver")),
    "driver insufficient": (RuntimeError("CUDA error: CUDA driver version is insufficient for CUDA runtime version"),
                            (8, 6), "DF419", ("the NVIDIA driver does not match torch",)),
    "lost": (RuntimeError("CUDA error: unspecified launch failure"), (9, 0), "DF419",
             ("cuda:0 failed during the run", "unspecified launch failure", "Xid")),
    "fallen off the bus": (RuntimeError("CUDA error: GPU has fallen off the bus"), None, "DF419", ("may be lost",)),
    "bf16 below sm80": (RuntimeError("\"addmm_cuda\" not implemented for 'BFloat16'"), (7, 0), "DF318",
                        ("compute capability 7.0, below 8.0", "no bfloat16 kernel", "--device cpu")),
    "no kernel image, old gpu": (RuntimeError("CUDA error: no kernel image is available for execution on the device"),
                                 (6, 1), "DF318", ("compute capability 6.1",)),
    "no kernel image": (RuntimeError("CUDA error: no kernel image is available for execution on the device"),
                        (12, 0), "DF419", ("has no kernels for cuda:0 (compute capability 12.0)",)),
    "other cuda error": (RuntimeError("CUDA error: an illegal memory access was encountered"), (8, 0), "DF419",
                         ("a CUDA error ended the run", "illegal memory access", "--no-compile")),
}


@pytest.mark.parametrize("case", list(CASES))
def test_each_cuda_failure_is_one_coded_refusal(case: str) -> None:
    exc, capability, code, words = CASES[case]
    err = device_failure(exc, CUDA, where="tgt", budget=BUDGET, dtype=torch.bfloat16, capability=capability)
    assert err is not None and err.code == code and err.exit_code == 2
    line = err.line()
    assert line.startswith(f"tgt: {code} error: ") and "\n" not in line, line
    for word in words:
        assert word in line, (word, line)


def test_not_every_error_is_a_cuda_failure() -> None:
    """Other errors stay what they are (a bug shows as one); bf16 on a GPU that has it is not DF318."""
    for exc in (ValueError("CUDA error: x"), RuntimeError("shape '[2, 3]' is invalid for input of size 7"),
                KeyboardInterrupt()):
        assert device_failure(exc, CUDA, where=None, capability=(8, 0)) is None
    fp16 = device_failure(RuntimeError("\"addmm_cuda\" not implemented for 'BFloat16'"), CUDA, where=None,
                          dtype=torch.float16, capability=(7, 0))
    assert fp16 is None
    no_budget = device_failure(torch.cuda.OutOfMemoryError("CUDA out of memory."), CUDA, where=None)
    assert no_budget is not None and "pre-check" not in no_budget.text


def test_the_block_turns_a_failure_into_its_line_and_lets_others_through() -> None:
    with pytest.raises(Exception) as info:
        with DeviceFailures(torch.device("cpu"), where="tgt") as guard:
            guard.budget = BUDGET
            raise RuntimeError("CUDA error: CUDA-capable device(s) is/are busy or unavailable")
    assert getattr(info.value, "code", None) == "DF419" and info.value.__cause__ is None
    with pytest.raises(RuntimeError, match="plain bug"):
        with DeviceFailures(torch.device("cpu"), where="tgt"):
            raise RuntimeError("plain bug")


@pytest.mark.slow
@pytest.mark.parametrize("case", ["out of memory", "busy", "driver too old"])
def test_smoke_run_prints_the_line_not_a_traceback(cli: Any, case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failure while the models load (the first CUDA work of a run) is smoke-run's one line, exit 2."""
    from dflash_ckpt.run.pair import OpenPair

    exc, _capability, code, words = CASES[case]

    def load(*_args: Any, **_kwargs: Any) -> Any:
        raise exc

    monkeypatch.setattr(OpenPair, "load", load)
    res = cli("smoke-run", str(TINY / "draft"), "--target", str(TINY / "target"), "-n", "8", "-p", "hi")
    # the device is the CPU here: the line names it, and the CPU's own budget
    needles = [w for w in words if "cuda:0" not in w and "GiB free" not in w]
    line = one_error_line(res, *needles, code=code, path=str(TINY / "target"))
    if case == "out of memory":
        assert "ran out of memory on cpu" in line and "the pre-check estimated" in line and "GiB free" in line


@pytest.mark.slow
def test_probe_taps_prints_the_line_not_a_traceback(cli: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from dflash_ckpt.run.pair import OpenPair

    def load(*_args: Any, **_kwargs: Any) -> Any:
        raise RuntimeError("CUDA error: GPU has fallen off the bus")

    monkeypatch.setattr(OpenPair, "load", load)
    res = cli("probe-taps", str(TINY / "draft"), "--target", str(TINY / "target"), "-n", "8", "-p", "hi")
    one_error_line(res, "the GPU failed during the run", "fallen off the bus", code="DF419", path=str(TINY / "target"))
