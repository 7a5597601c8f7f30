"""smoke-run's timing: medians over steps with their spread in --json, an impossible speedup
withheld (DF406), --threads and the static path's settings."""

from __future__ import annotations

import pytest

import tiny_models as tm
from conftest import smoke

FAST = ["-n", "24", "--draft-dtype", "float32", "--min-acceptance", "0", "--ignore-eos"]

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    draft, target = tm.make_pair(tmp_path_factory.mktemp("pair"))
    return str(draft), str(target)


def check_spread(stats: dict, n: int) -> None:
    assert set(stats) == {"n", "median", "min", "p25", "p75", "max"}
    assert stats["n"] == n
    assert 0 < stats["min"] <= stats["p25"] <= stats["median"] <= stats["p75"] <= stats["max"]


def test_figures_are_medians_over_steps_with_their_spread(cli, pair) -> None:
    doc = smoke(cli, pair, *FAST, "--json", "--threads", "1").merged()
    s = doc["settings"]
    assert (s["threads"], s["static_path"], s["cuda_graphs"], s["capture_s"], s["timing_tokens"]) == (1, True, False, 0.0, 16)
    assert s["step_clock"] == "thread"  # one CPU thread: its CPU time, which other processes do not inflate
    for p in doc["prompts"]:
        t, d = p["timing"]["target_step_ms"], p["timing"]["dflash_step_ms"]
        check_spread(t, 14)  # two timed runs around the DFlash one; each first token comes with a prefill
        check_spread(d, p["steps"])
        assert p["target_tok_s"] == pytest.approx(1e3 / t["median"])
        assert p["dflash_tok_s"] == pytest.approx(p["tau"] * 1e3 / d["median"])
        assert p["speedup"] == pytest.approx(p["dflash_tok_s"] / p["target_tok_s"]) and p["speedup_plausible"]
    o = doc["overall"]
    check_spread(o["timing"]["dflash_step_ms"], o["steps"])
    check_spread(o["timing"]["target_step_ms"], 3 * 14)


def test_a_speedup_above_tau_is_withheld_and_flagged(cli, pair, monkeypatch: pytest.MonkeyPatch) -> None:
    """Target-only steps timed 1000x slower (as when the machine's load jumps between the two
    timings): the ratio would exceed tau, which no real DFlash run can; it is not printed."""
    from dflash_ckpt.runtime.loops import StaticLoop as smoke_mod  # the tiny pair runs on the static loop

    real = smoke_mod.decode

    def slow(*a, **k):
        gen = real(*a, **k)
        gen.step_s = [x * 1000 for x in gen.step_s]
        return gen

    monkeypatch.setattr(smoke_mod, "decode", slow)
    three = ("-p", "hi", "-p", "hello", "-p", "good day")  # the fewest prompts a speedup is given for
    res = smoke(cli, pair, *FAST, *three, "--json")
    assert res.code == 0  # a measurement problem, not a property of the pair
    doc = res.merged()
    [f] = doc["findings"]
    assert f["code"] == "DF406" and f["severity"] == "warning" and "withheld" in f["message"]
    o = doc["overall"]
    assert o["speedup"] is None and not o["speedup_plausible"] and o["speedup_measured"] > o["tau"]
    human = smoke(cli, pair, *FAST, *three)
    lines = human.stdout.splitlines()
    verdict = next(line for line in lines if line.startswith(("PASS", "FAIL")))  # the serve lines follow a PASS
    assert verdict.startswith("PASS") and verdict.endswith("speedup withheld (DF406)")
    [row] = [line for line in lines if line.startswith(" prompt-1")]
    assert row.split("│")[6].strip() == "—"  # the speedup column


def test_threads_option(cli, pair) -> None:
    res = smoke(cli, pair, "--threads", "0")
    assert res.code == 2 and "--threads 0" in res.stderr and res.stderr.count("\n") == 1
