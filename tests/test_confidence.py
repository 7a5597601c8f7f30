"""tau's clustered standard error and interval, the speedup's, the minimum of evidence, and the
chi-square helper, each against values worked out by hand (stats/confidence.py)."""

from __future__ import annotations

import math

import pytest

from chi_square import chi_square_gof
from dflash_ckpt.stats.confidence import (MIN_PROMPTS, MIN_STEPS, TOO_LITTLE, StepTiming, chi2_sf, speedup_estimate, t975,
                                          tau_estimate)

# Four prompts of two steps: y = 12, 10, 12, 8 tokens; tau = 42 / 8 = 5.25; residuals
# y - tau * m = 1.5, -0.5, 1.5, -2.5 (squares 11); Var = 4/3 * 11 / 8**2 = 0.2291667.
FOUR = [[5, 7], [4, 6], [6, 6], [3, 5]]


def test_clustered_se_and_interval_by_hand() -> None:
    e = tau_estimate(FOUR)
    assert (e.tau, e.tokens, e.steps, e.prompts) == (5.25, 42, 8, 4)
    assert e.se == pytest.approx(math.sqrt(4 / 3 * 11) / 8) == pytest.approx(0.478714, abs=1e-6)
    # steps as if independent: deviations' squares sum to 11.5 over 7 dof, / 8 steps
    assert e.se_steps == pytest.approx(math.sqrt(11.5 / 7 / 8)) == pytest.approx(0.453163, abs=1e-6)
    assert e.interval is not None
    assert (e.interval.low, e.interval.high) == pytest.approx((5.25 - 3.182 * 0.478714, 5.25 + 3.182 * 0.478714), abs=1e-5)
    assert e.to_json()["ci95"] == [3.7267, 6.7733]


def test_a_clustered_se_is_wider_when_prompts_differ() -> None:
    """Same steps, regrouped so that each prompt is uniform: the naive SE stays, the clustered
    one grows, which is why the interval is clustered."""
    mixed = tau_estimate([[2, 8], [2, 8], [2, 8]])
    split = tau_estimate([[2, 2], [8, 8], [2, 8]])
    assert mixed.se_steps == pytest.approx(split.se_steps)
    assert mixed.se == 0.0 and split.se is not None and split.se > 1.5


def test_the_interval_never_goes_below_one_token() -> None:
    # y = 9, 4, 16 over m = 3, 2, 4: tau 29/9, se sqrt(3/2 * 1304/81) / 9 = 0.546009
    e = tau_estimate([[1, 3, 5], [2, 2], [6, 4, 4, 2]])
    assert e.tau == pytest.approx(29 / 9)
    assert e.se == pytest.approx(math.sqrt(1.5 * 1304 / 81) / 9)
    assert e.interval is not None and e.interval.low == 1.0
    assert e.interval.high == pytest.approx(29 / 9 + 4.303 * e.se)


def test_one_prompt_has_no_clustered_interval_and_empty_prompts_do_not_count() -> None:
    e = tau_estimate([[3, 5, 4], [], []])
    assert (e.prompts, e.se, e.interval) == (1, None, None)
    assert e.se_steps == pytest.approx(math.sqrt(1 / 3))
    nothing = tau_estimate([])
    assert nothing.steps == 0 and math.isnan(nothing.tau) and not nothing.enough


def test_minimum_of_evidence() -> None:
    assert (MIN_STEPS, MIN_PROMPTS) == (32, 3)
    four_steps = tau_estimate([[6, 5], [7, 4]])  # issue 29's case: PASS with a speedup from 4 steps
    assert not four_steps.enough
    assert four_steps.shortfall().startswith(TOO_LITTLE + ": 4 DFlash step(s) over 2 prompt(s)")
    assert not tau_estimate([[5] * 40, [5] * 40]).enough  # steps enough, prompts not
    assert not tau_estimate([[5] * 10, [5] * 10, [5] * 11]).enough  # 31 steps
    ok = tau_estimate([[5] * 10, [5] * 10, [5] * 12])
    assert ok.enough and ok.shortfall() is None
    assert TOO_LITTLE == "too little evidence for a verdict on acceptance"


def test_speedup_interval_by_the_delta_method() -> None:
    tau = tau_estimate([p * 4 for p in FOUR])  # 32 steps, 4 prompts: same tau and se as FOUR
    assert tau.enough and tau.se == pytest.approx(0.478714, abs=1e-6)
    t_step = StepTiming(median=20.0, p25=18.0, p75=22.0, n=16)
    d_step = StepTiming(median=50.0, p25=45.0, p75=55.0, n=32)
    assert t_step.se == pytest.approx(1.2533 * 4 / 1.349 / 4)
    s = speedup_estimate(tau, t_step, d_step)
    assert s.speedup == pytest.approx(5.25 * 20 / 50) and s.withheld is None
    rel = math.sqrt((0.478714 / 5.25) ** 2 + (t_step.se / 20) ** 2 + (d_step.se / 50) ** 2)
    assert rel == pytest.approx(0.107476, abs=1e-5)
    assert s.interval is not None
    assert (s.interval.low, s.interval.high) == pytest.approx((2.1 * math.exp(-3.182 * rel), 2.1 * math.exp(3.182 * rel)))
    assert s.to_json()["ci95"] == [1.4917, 2.9563]


def test_speedup_is_withheld_below_the_minimum() -> None:
    s = speedup_estimate(tau_estimate([[6, 5], [7, 4]]), StepTiming(20, 18, 22, 16), StepTiming(50, 45, 55, 4))
    assert (s.speedup, s.interval, s.withheld) == (None, None, TOO_LITTLE)


def test_t_quantiles() -> None:
    assert t975(1) == 12.706 and t975(2) == 4.303 and t975(30) == 2.042
    assert t975(31) == pytest.approx(2.0395, abs=1e-4)
    assert t975(60) == pytest.approx(2.0003, abs=1e-4)
    assert t975(120) == pytest.approx(1.9799, abs=1e-4)
    with pytest.raises(ValueError):
        t975(0)


def test_chi_square_tail_against_tables() -> None:
    pytest.importorskip("torch")  # chi2_sf is torch's gammaincc, imported when called
    assert chi2_sf(3.841459, 1) == pytest.approx(0.05, abs=1e-7)
    assert chi2_sf(5.991465, 2) == pytest.approx(0.05, abs=1e-7)
    assert chi2_sf(18.307038, 10) == pytest.approx(0.05, abs=1e-7)
    assert chi2_sf(124.342113, 100) == pytest.approx(0.05, abs=1e-6)
    assert chi2_sf(2.0, 2) == pytest.approx(math.exp(-1))  # dof 2: exactly exp(-x/2)
    assert chi2_sf(0.0, 5) == 1.0


def test_goodness_of_fit_pools_small_cells() -> None:
    pytest.importorskip("torch")
    # expected 50, 30, 15, 3, 2 (n = 100): the last two pool to 5 -> 4 cells, 3 dof
    res = chi_square_gof([52, 28, 14, 4, 2], [0.5, 0.3, 0.15, 0.03, 0.02])
    assert res.cells == 4 and res.dof == 3
    want = (52 - 50) ** 2 / 50 + (28 - 30) ** 2 / 30 + (14 - 15) ** 2 / 15 + (6 - 5) ** 2 / 5
    assert res.statistic == pytest.approx(want)
    assert res.p_value == pytest.approx(chi2_sf(want, 3))


def test_goodness_of_fit_rejects_a_draw_of_probability_zero() -> None:
    pytest.importorskip("torch")
    res = chi_square_gof([10, 10, 1], [0.5, 0.5, 0.0])
    assert res.p_value == 0.0
    assert chi_square_gof([10, 10, 0], [0.5, 0.5, 0.0]).p_value == pytest.approx(1.0)


def test_accepted_counts_ours_and_vllms() -> None:
    from dflash_ckpt.stats.confidence import accepted_counts, engine_accepted_counts

    assert accepted_counts([1, 2, 2, 4, 3, 1], 3) == [2, 2, 1, 1]
    with pytest.raises(ValueError):
        accepted_counts([5], 3)
    # 10 drafts; draft 1 accepted 6 times, draft 2 three times, draft 3 once
    assert engine_accepted_counts(10, [6, 3, 1]) == [4, 3, 2, 1]
    with pytest.raises(ValueError):
        engine_accepted_counts(10, [6, 7, 1])


def test_homogeneity_by_hand() -> None:
    pytest.importorskip("torch")
    from dflash_ckpt.stats.confidence import homogeneity

    same = homogeneity([10, 20, 30], [10, 20, 30])
    assert same.statistic == 0.0 and same.p_value == pytest.approx(1.0) and same.dof == 2
    # 2 x 2, every expected count 20: 4 * 10**2 / 20 = 20 on 1 dof
    differ = homogeneity([30, 10], [10, 30])
    assert differ.statistic == pytest.approx(20.0) and differ.dof == 1
    assert differ.p_value == pytest.approx(chi2_sf(20.0, 1)) and differ.p_value < 1e-5
    # sparse tail categories pool into their neighbour
    pooled = homogeneity([40, 30, 2, 1], [38, 33, 1, 0])
    assert pooled.cells == 2
    assert homogeneity([0, 0], [3, 4]).p_value == 1.0
