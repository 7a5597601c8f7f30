"""Run arguments that crashed without a line (issue 39, item 6).

``--threads 1000000000`` made libgomp ask for 216 GB and end the process (through the API: the
caller's Python) with exit 1 and no coded line: the count is bounded by ``MAX_THREADS_PER_CPU``
per logical CPU, one DF004 line and exit 2 before anything is read, in the CLI and the API alike.
``progress=object()`` in the API was an AttributeError deep in the run: it is DF010 like every
other argument of the wrong type, checked before anything is read; a rich ``Progress`` still fits.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import dflash_ckpt
from dflash_ckpt.limits import MAX_THREADS_PER_CPU

ROOT = Path(__file__).resolve().parents[1]
D, T = ROOT / "fixtures" / "tiny-pair" / "draft", ROOT / "fixtures" / "tiny-pair" / "target"
MOST = MAX_THREADS_PER_CPU * (os.cpu_count() or 1)


@pytest.mark.parametrize("threads", ["1000000000", str(MOST + 1), "9" * 40])
def test_too_many_threads_is_one_line_and_exit_2(cli, threads: str) -> None:  # noqa: ANN001 - conftest's runner
    res = cli("smoke-run", str(D), "--target", str(T), "--threads", threads)
    assert res.code == 2, (res.stdout, res.stderr)
    assert res.stderr.count("\n") == 1 and "DF004" in res.stderr, res.stderr
    assert f"--threads {threads}: at most {MOST} ({MAX_THREADS_PER_CPU} per logical CPU" in res.stderr
    assert "Traceback" not in res.stderr and res.stdout == ""


def test_zero_threads_is_still_refused(cli) -> None:  # noqa: ANN001
    res = cli("smoke-run", str(D), "--target", str(T), "--threads", "0")
    assert res.code == 2 and "--threads 0: must be at least 1" in res.stderr and res.stderr.count("\n") == 1


def test_the_api_refuses_too_many_threads_and_the_caller_lives_on() -> None:
    pytest.importorskip("torch")
    with pytest.raises(dflash_ckpt.DFlashCkptError) as err:
        dflash_ckpt.smoke_run(D, T, threads=10**9)
    assert (err.value.code, err.value.exit_code) == ("DF004", 2)
    assert f"at most {MOST}" in err.value.message and "\n" not in err.value.message


@pytest.mark.parametrize("call", ["smoke_run", "probe_taps"])
@pytest.mark.parametrize("value", [object(), 5, "bar", print])
def test_a_progress_that_is_not_a_progress_bar_is_df010(call: str, value: object) -> None:
    with pytest.raises(dflash_ckpt.DFlashCkptError) as err:
        getattr(dflash_ckpt, call)(D, T, progress=value)
    assert (err.value.code, err.value.exit_code) == ("DF010", 2)
    assert err.value.message.startswith(f"dflash_ckpt.{call}(): progress=")
    assert "is not a rich Progress (an object with add_task, advance and update) or None" in err.value.message


def test_a_rich_progress_and_none_fit() -> None:
    rich_progress = pytest.importorskip("rich.progress")
    from dflash_ckpt.api_types import ProgressBar, _fits

    assert _fits(rich_progress.Progress(), ProgressBar | None) and _fits(None, ProgressBar | None)
    assert not _fits(object(), ProgressBar | None)
