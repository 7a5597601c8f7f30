"""The static executor's self-check against the eager one, and its fallback (issue 44).

No GPU here: the static executor runs without graphs on the CPU, the same code the graphs
capture, and stands in for the graphed one; faults are injected from the tests by monkeypatch
(a replay that moves the anchor one position too far, logits off by a unit, a decode step whose
top-2 is off, a replay or capture that raises). Both block layouts: the committed tiny pair's
1+N draft and its anchor-first draft.
"""

from __future__ import annotations

import json
from typing import Any, Callable

import pytest
import torch

import tiny_models as tm
from conftest import ROOT
from dflash_ckpt.runtime import self_check as sc
from dflash_ckpt.runtime.generate import decode
from dflash_ckpt.runtime.loops import EagerLoop, StaticLoop, checked_loop
from dflash_ckpt.runtime.static import StaticRunner

TINY = ROOT / "fixtures" / "tiny-pair"
LAYOUTS = {"1+N": TINY / "draft", "anchor-first": TINY / "draft-anchor-first"}
#: smoke-run's "code" prompt in the tiny target's chat template: drafts get accepted
PROMPT = [721, 296, 198, 54, 406, 257, 361, 344, 366, 69, 72, 65, 7, 77, 408, 334, 400, 277, 305, 12, 278, 458, 700, 375,
          435, 259, 710, 363, 11, 388, 257, 663, 304, 541, 668, 13, 722, 198, 721, 301, 198, 723, 256, 724, 256]
N = 48

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module", params=list(LAYOUTS))
def tiny(request: pytest.FixtureRequest) -> tuple[str, Any, Any]:
    """The committed tiny pair in bf16 (what smoke-run runs), per layout."""
    target, draft = tm.load_runtime_pair(LAYOUTS[request.param], TINY / "target", draft_dtype="bfloat16",
                                         target_dtype="bfloat16")
    return request.param, target, draft


def runner(target: Any, draft: Any) -> StaticLoop:
    return StaticLoop(target, draft, 256, block_size=draft.args.block_size)


# -- faults, injected into the static runner's steps ----------------------------------------------


def _wrap(monkeypatch: pytest.MonkeyPatch, name: str, after: Callable[[StaticRunner], None]) -> None:
    original = getattr(StaticRunner, name)

    def faulty(self: StaticRunner, *args: Any) -> None:
        original(self, *args)
        after(self)

    monkeypatch.setattr(StaticRunner, name, faulty)


FAULTS: dict[str, tuple[str, Callable[[StaticRunner], None], str]] = {
    # a replay that hands the next draft call a stale (zeroed) context: its drafts change, even
    # those past the first rejected one (this input's drafts are mostly rejected)
    "stale context": ("_verify_step", lambda r: r.ctx.zero_(), "step 2: draft"),
    # a replay that writes a wrong next anchor: the next verify runs another token
    "wrong anchor": ("_verify_step", lambda r: r.ids[0, :1].add_(1), "step 2"),
    # a replay whose verify logits are off by a whole unit (a wrong buffer read in the graph)
    "logits off": ("_verify_step", lambda r: r.vtop.add_(2.0), "verify logits differ"),
    # a decode replay whose top-2 logits are off
    "decode off": ("_decode_step", lambda r: r.dpack[2:4].add_(2.0), "decode token"),
}


@pytest.mark.slow
def test_static_executor_agrees_with_the_eager_one(tiny: tuple[str, Any, Any]) -> None:
    """Fault-free, the check passes over all its steps, within bf16 rounding, and costs little."""
    layout, target, draft = tiny
    loop = runner(target, draft)
    assert loop.width == (9 if layout == "anchor-first" else 8)
    got = sc.self_check(loop, PROMPT, max_new_tokens=N)
    assert got.status == "agree" and got.detail is None, got
    assert got.steps == sc.CHECK_STEPS
    assert 0 < got.max_logit_diff <= 0.25  # bf16 rounding of logits near 10: a few units of 0.0625
    assert got.seconds < 5


@pytest.mark.slow
@pytest.mark.parametrize("fault", list(FAULTS))
def test_an_injected_fault_is_named(tiny: tuple[str, Any, Any], fault: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _, target, draft = tiny
    name, after, needle = FAULTS[fault]
    _wrap(monkeypatch, name, after)  # before the runner: it binds its steps when built
    loop = runner(target, draft)
    got = sc.self_check(loop, PROMPT, max_new_tokens=N)
    assert got.status == "differs" and needle in (got.detail or ""), got
    assert "static" in got.detail and "eager" in got.detail


@pytest.mark.slow
def test_the_check_fits_a_one_token_run(tiny: tuple[str, Any, Any]) -> None:
    """``-n 1``: the caches hold one new token; the check compares the prefill's token alone."""
    _, target, draft = tiny
    loop = StaticLoop(target, draft, len(PROMPT) + 1 + draft.args.block_layout.verify_width(draft.args.block_size),
                      block_size=draft.args.block_size)
    got = sc.self_check(loop, PROMPT, max_new_tokens=1)
    assert (got.status, got.steps) == ("agree", 0), got


@pytest.mark.slow
def test_a_replay_error_is_caught(tiny: tuple[str, Any, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    _, target, draft = tiny
    loop = runner(target, draft)

    def broken(self: StaticRunner, name: str, used: int) -> None:
        raise RuntimeError("CUDA error: operation not permitted when stream is capturing\nmore text")

    monkeypatch.setattr(StaticRunner, "_run", broken)
    got = sc.self_check(loop, PROMPT, max_new_tokens=N)
    assert got.status == "replay-error"
    assert got.detail == "the static run failed: RuntimeError: CUDA error: operation not permitted when stream is capturing"


def _reference(target: Any, n: int) -> list[int]:
    return decode(target, PROMPT, max_new_tokens=n, cache=target.new_cache(256)).tokens


@pytest.mark.slow
def test_checked_loop_keeps_the_static_loop_that_agrees(tiny: tuple[str, Any, Any]) -> None:
    _, target, draft = tiny
    said: list[str] = []
    loop, choice = checked_loop(target, draft, 256, block_size=draft.args.block_size, graphs=False, sampler=None,
                                check_prompt=PROMPT, max_new_tokens=N, say=said.append)
    assert isinstance(loop, StaticLoop) and choice.executor == "static" and said == []
    assert choice.reason.startswith("the self-check agreed with the eager executor over 3 steps")
    assert loop.dflash(PROMPT, max_new_tokens=N).tokens == _reference(target, N)


@pytest.mark.slow
def test_checked_loop_falls_back_to_eager_on_a_difference(tiny: tuple[str, Any, Any],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A mismatch sends the whole run to the eager loop, which still decodes losslessly; one line says why."""
    _, target, draft = tiny
    _wrap(monkeypatch, "_verify_step", FAULTS["wrong anchor"][1])
    said: list[str] = []
    loop, choice = checked_loop(target, draft, 256, block_size=draft.args.block_size, graphs=False, sampler=None,
                                check_prompt=PROMPT, max_new_tokens=N, say=said.append)
    assert isinstance(loop, EagerLoop) and not loop.static
    assert choice.executor == "eager" and choice.check.status == "differs"
    assert choice.reason.startswith("self-check differs: step 2")
    assert len(said) == 1 and said[0].startswith("self-check: the static executor disagrees with the eager one (step 2:")
    assert said[0].endswith("this run uses the eager executor (slower, same tokens)")
    assert loop.dflash(PROMPT, max_new_tokens=N).tokens == _reference(target, N)
    doc = choice.to_json()
    assert doc["executor"] == "eager" and doc["self_check"]["status"] == "differs"
    json.dumps(doc)


@pytest.mark.slow
def test_checked_loop_falls_back_on_a_capture_error(tiny: tuple[str, Any, Any],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    _, target, draft = tiny

    def capture(self: StaticRunner) -> None:
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 MiB")

    monkeypatch.setattr(StaticRunner, "capture", capture)
    said: list[str] = []
    loop, choice = checked_loop(target, draft, 256, block_size=draft.args.block_size, graphs=True, sampler=None,
                                check_prompt=PROMPT, max_new_tokens=N, say=said.append)
    assert isinstance(loop, EagerLoop) and choice.executor == "eager"
    assert choice.check.status == "capture-error"
    assert choice.check.detail == ("capturing the CUDA graphs failed: OutOfMemoryError: CUDA out of memory. "
                                   "Tried to allocate 20.00 MiB")
    assert len(said) == 1 and said[0].startswith("self-check: the graphed executor failed (capturing the CUDA graphs")


@pytest.mark.slow
def test_sampled_and_generic_runs_take_the_eager_loop_unchecked(tiny: tuple[str, Any, Any]) -> None:
    from dflash_ckpt.runtime.sampling import Sampler
    from dflash_ckpt.run.sampling_settings import make_settings

    _, target, draft = tiny
    sampler = Sampler.of(make_settings(0.7, 1.0, 0, 0, "match"), target.device)
    loop, choice = checked_loop(target, draft, 256, block_size=draft.args.block_size, graphs=False, sampler=sampler,
                                check_prompt=PROMPT, max_new_tokens=N, say=lambda _m: None)
    assert isinstance(loop, EagerLoop) and (choice.executor, choice.check) == ("eager", None)
    assert choice.reason == "sampled runs run eagerly"


@pytest.mark.slow
def test_a_pair_off_the_static_path_says_why() -> None:
    """A DFlash2 draft (its own candidate selector) runs on the generic path: eager, no check."""
    target, draft = tm.load_runtime_pair(TINY / "draft2", TINY / "target", draft_dtype="bfloat16",
                                         target_dtype="bfloat16")
    loop, choice = checked_loop(target, draft, 256, block_size=draft.args.block_size, graphs=True, sampler=None,
                                check_prompt=PROMPT, max_new_tokens=N, say=lambda _m: None)
    assert isinstance(loop, EagerLoop) and choice.check is None
    assert (choice.executor, choice.reason) == ("eager", "the draft's forward is not v1's: the generic path")


# -- the comparison itself, on made-up traces (no model) ------------------------------------------


def _trace(**kw: Any) -> sc.Trace:
    step = sc.TracedStep(size=4, drafts=[5, 6, 7], posterior=[5, 6, 9, 3], accepted=2, overflow=None, top=[10.0, 11.0, 9.0, 8.0])
    base = dict(first=4, steps=[step], tokens=[4, 5, 6, 9], acceptance=[3], decode_tokens=[4, 8],
                decode_top2=[[12.0, 11.0], [13.0, 2.0]], decode_top2_ids=[[4, 1], [8, 2]])
    base.update(kw)
    return sc.Trace(**base)


def test_a_difference_past_the_first_rejected_draft_changes_nothing() -> None:
    """Drafts after the first rejected one, and the verify rows that read them, decide nothing."""
    tied = torch.zeros(3, 20)
    tied[2, 7] = tied[2, 1] = 4.0  # the last draft's two best lie within rounding
    eager = _trace(draft_logits=[tied])
    later = _trace(steps=[sc.TracedStep(4, [5, 6, 1], [5, 6, 9, 0], 2, None, [10.0, 11.0, 9.0, 3.0])])
    assert sc.compare(later, eager, torch.bfloat16).status == "agree"
    tied[2, 1] = 3.0  # not a tie: a draft differs, rejected or not, where its input is the same
    got = sc.compare(later, eager, torch.bfloat16)
    assert (got.status, got.detail) == ("differs", "step 1: draft 3 is 1 graphed, 7 eager")
    off = _trace(steps=[sc.TracedStep(4, [5, 6, 7], [5, 6, 9, 3], 2, None, [10.0, 11.0, 9.5, 8.0])])
    got = sc.compare(off, eager, torch.bfloat16)
    assert got.status == "differs" and got.detail.startswith("step 1: verify logits differ by 0.5 at row 2"), got


def test_a_divergence_at_a_near_tie_passes_and_a_clear_one_does_not() -> None:
    logits = torch.full((20,), -5.0)
    logits[9], logits[8] = 9.0, 8.98  # row 2's top two lie within bf16 rounding of each other
    eager = _trace(verify_logits=[torch.stack([logits] * 4)], draft_logits=[torch.zeros(3, 20)])
    flipped = _trace(steps=[sc.TracedStep(4, [5, 6, 7], [5, 6, 8, 3], 2, None, [10.0, 11.0, 9.0, 8.0])])
    got = sc.compare(flipped, eager, torch.bfloat16)
    assert (got.status, got.detail) == ("agree", "compared up to a near tie at step 1, verify row 2")
    logits[8] = 5.0
    eager = _trace(verify_logits=[torch.stack([logits] * 4)], draft_logits=[torch.zeros(3, 20)])
    got = sc.compare(flipped, eager, torch.bfloat16, what="graphed")
    assert (got.status, got.detail) == ("differs", "step 1: the target's token at row 2 is 8 graphed, 9 eager")


def test_rounding_tolerance_follows_the_dtype() -> None:
    assert sc.tolerance(torch.bfloat16, 20.0) == pytest.approx(4 * 2**-7 * 20)
    assert sc.tolerance(torch.float32, 0.1) == pytest.approx(64 * 2**-23)
    assert sc.check_input([list(range(300)), list(range(200))]) == list(range(200 - sc.CHECK_PROMPT, 200))
    assert sc.check_input([[3, 4], [1, 2, 5]]) == [3, 4]


# -- smoke-run, in process ------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_smoke_run_records_the_executor_and_falls_back(cli: Any, layout: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from test_json_schema import validate

    args = ("smoke-run", str(LAYOUTS[layout]), "--target", str(TINY / "target"), "-n", "24", "-p", "hello there")
    ok = cli(*args, "--json")
    settings = ok.result()["settings"]
    assert (settings["executor"], settings["self_check"]["status"]) == ("static", "agree")
    assert 0 < settings["self_check"]["seconds"] < 5
    validate(ok.json())
    _wrap(monkeypatch, "_verify_step", FAULTS["wrong anchor"][1])
    bad = cli(*args, "--json")
    assert bad.code == ok.code, bad.stderr
    doc = bad.result()
    validate(bad.json())
    s = doc["settings"]
    assert (s["executor"], s["static_path"], s["self_check"]["status"]) == ("eager", False, "differs")
    assert s["executor_reason"].startswith("self-check differs: step 2")
    assert [p["output_ids"] for p in doc["prompts"]] == [p["output_ids"] for p in ok.result()["prompts"]]
    text = cli(*args)
    lines = [line for line in text.stderr.splitlines() if "self-check" in line]
    assert len(lines) == 1 and "disagrees with the eager one" in lines[0], text.stderr
    assert "eager executor (static self-check: differs)" in text.stdout
