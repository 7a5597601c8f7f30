"""How much a measured acceptance says: tau's standard error and interval, the speedup's, the
minimum of evidence below which neither gets a verdict, and a chi-square test of two runs' acceptance.

Why clustered by prompt: the steps of one prompt are not independent draws. A math prompt's
steps all accept a lot and a chat prompt's all accept less (the paper's Qwen3-8B: Math500 7.87,
MT-Bench 4.25), so treating 300 steps of 3 prompts as 300 independent steps gives an interval
that is far too narrow. tau is a ratio estimator, ``sum(tokens) / sum(steps)`` over prompts, and
its cluster-robust (linearised, "sandwich") variance is

    Var(tau) = G / (G - 1) * sum_g (y_g - tau * m_g)^2 / (sum_g m_g)^2

with ``y_g`` the tokens (acceptance lengths summed, bonus included) and ``m_g`` the steps of
prompt ``g``, ``G`` the prompts; the interval takes Student's t with ``G - 1`` degrees of freedom,
the usual small-G choice, so three prompts give an honest, wide interval (t = 4.30).

Why these minimums (``MIN_STEPS`` 32, ``MIN_PROMPTS`` 3): a DFlash step's acceptance length at
block 16 has a standard deviation of about 4 tokens (a per-draft acceptance of 0.8 gives tau
4.9 and sd 3.95; 0.9 gives tau 8.2 and sd 5.4: the truncated geometric). With ``n`` independent
steps the 95% half-width is ``1.96 * sd / sqrt(n)``: at 4 steps, the run issue 29 found printing
PASS, it is +-3.9 tokens (a tau of 5 could be 1 or 9); at 32 steps +-1.4, where a working draft's
interval (tau 4.9: [3.5, 6.3]) lies wholly above the default ``--min-acceptance`` 2.0, and a run
at 0.6 of a published figure (3.9 against GSM8K's 6.50, ``checks/published.FAR_BELOW``) has an
upper bound (about 5.0) clearly under the published one. Fewer steps leave both calls to chance.
(These are the step-level widths; the clustered interval adds the spread between prompts and,
at three prompts, t = 4.30 instead of 1.96: more prompts, or ``--suite``, narrow it.) Three
prompts are the fewest for which a clustered standard error has a usable t (G = 2: t = 12.7),
and the built-in set's size (one math, one code, one chat prompt). Below either minimum the verdict on acceptance
is the warning ``TOO_LITTLE`` and the speedup is withheld: a speed measured over a few steps is
dominated by the warm-up and the timer as much as by tau.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

#: The fewest DFlash steps (over all prompts) and prompts for a verdict on acceptance.
MIN_STEPS = 32
MIN_PROMPTS = 3
#: The warning's text, word for word as issue 29 asks.
TOO_LITTLE = "too little evidence for a verdict on acceptance"

# Student's t, two-sided 95% (0.975 quantile), for 1..30 degrees of freedom (standard tables).
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
         2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
         2.045, 2.042)
_Z975 = 1.959964


def t975(dof: int) -> float:
    """Student's t 0.975 quantile: the table to 30, then the Cornish-Fisher series in 1/dof
    (error below 1e-4 from 31 on), and the normal quantile at infinity."""
    if dof < 1:
        raise ValueError("t needs at least one degree of freedom")
    if dof <= len(_T975):
        return _T975[dof - 1]
    z, v = _Z975, float(dof)
    return (z + (z**3 + z) / (4 * v) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * v**2)
            + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * v**3))


@dataclass(frozen=True)
class Interval:
    low: float
    high: float
    level: float = 0.95

    def to_json(self) -> list[float]:
        return [round(self.low, 4), round(self.high, 4)]


@dataclass(frozen=True)
class TauEstimate:
    """tau over a set of prompts, with what it rests on.

    ``se`` is the cluster-robust standard error (``None`` under two prompts), ``se_steps`` the
    naive one that treats every step as independent (reported beside it, never used for a
    verdict), ``interval`` tau +- t(G-1) * se."""

    tau: float
    tokens: int
    steps: int
    prompts: int
    se: float | None
    se_steps: float | None
    interval: Interval | None

    @property
    def enough(self) -> bool:
        """Whether this is evidence enough for a verdict (module docstring: the minimums)."""
        return self.steps >= MIN_STEPS and self.prompts >= MIN_PROMPTS

    def shortfall(self) -> str | None:
        """``None`` when ``enough``, else the warning with what is missing, for the finding."""
        if self.enough:
            return None
        return (f"{TOO_LITTLE}: {self.steps} DFlash step(s) over {self.prompts} prompt(s), at least {MIN_STEPS} "
                f"steps over {MIN_PROMPTS} prompts are needed (more -n, more prompts, or --suite)")

    def to_json(self) -> dict[str, object]:
        return {"tau": round(self.tau, 4), "tokens": self.tokens, "steps": self.steps, "prompts": self.prompts,
                "se": None if self.se is None else round(self.se, 4),
                "se_steps": None if self.se_steps is None else round(self.se_steps, 4),
                "ci95": None if self.interval is None else self.interval.to_json(), "enough": self.enough}


def tau_estimate(lengths_by_prompt: Sequence[Sequence[int]]) -> TauEstimate:
    """tau from each prompt's acceptance lengths (tokens per step, bonus included).

    Prompts with no step (an output of one token, a prompt cut by a stop token at once) carry no
    information on acceptance and are left out of ``prompts``."""
    groups = [list(g) for g in lengths_by_prompt if len(g) > 0]
    m = [len(g) for g in groups]
    y = [sum(g) for g in groups]
    steps, tokens, n_groups = sum(m), sum(y), len(groups)
    if steps == 0:
        return TauEstimate(float("nan"), 0, 0, 0, None, None, None)
    tau = tokens / steps
    flat = [x for g in groups for x in g]
    se_steps = None
    if steps >= 2:
        var = sum((x - tau) ** 2 for x in flat) / (steps - 1)
        se_steps = math.sqrt(var / steps)
    se = interval = None
    if n_groups >= 2:
        resid = sum((yg - tau * mg) ** 2 for yg, mg in zip(y, m))
        se = math.sqrt(n_groups / (n_groups - 1) * resid) / steps
        half = t975(n_groups - 1) * se
        interval = Interval(max(1.0, tau - half), tau + half)  # tau >= 1 always: the bonus token
    return TauEstimate(tau, tokens, steps, n_groups, se, se_steps, interval)


@dataclass(frozen=True)
class StepTiming:
    """A median step time with its spread, as smoke-run's ``timing`` holds it (ms or s: any unit,
    both timings of one speedup in the same)."""

    median: float
    p25: float
    p75: float
    n: int

    @property
    def se(self) -> float:
        """Standard error of the median from the interquartile range: sd ~ IQR / 1.349 (normal),
        SE(median) ~ 1.2533 * sd / sqrt(n). A robust, conservative figure for skewed step times."""
        return 1.2533 * (self.p75 - self.p25) / 1.349 / math.sqrt(max(self.n, 1))


@dataclass(frozen=True)
class SpeedupEstimate:
    speedup: float | None
    interval: Interval | None
    withheld: str | None  # why there is no figure, when there is none

    def to_json(self) -> dict[str, object]:
        return {"speedup": None if self.speedup is None else round(self.speedup, 4),
                "ci95": None if self.interval is None else self.interval.to_json(), "withheld": self.withheld}


def speedup_estimate(tau: TauEstimate, target_step: StepTiming, dflash_step: StepTiming) -> SpeedupEstimate:
    """speedup = (tau / DFlash step) / (1 / target step) = tau * t_T / t_D, with a delta-method
    interval on the log scale (so it stays positive):

        Var(log S) = (se_tau / tau)^2 + (se_T / t_T)^2 + (se_D / t_D)^2

    at t(G-1), since tau's clustered error dominates at small G. Withheld below the minimum of
    evidence, or when a timing is missing."""
    if not tau.enough:
        return SpeedupEstimate(None, None, TOO_LITTLE)
    if target_step.median <= 0 or dflash_step.median <= 0 or tau.se is None:
        return SpeedupEstimate(None, None, "no timing")
    s = tau.tau * target_step.median / dflash_step.median
    rel = math.sqrt((tau.se / tau.tau) ** 2 + (target_step.se / target_step.median) ** 2
                    + (dflash_step.se / dflash_step.median) ** 2)
    k = t975(tau.prompts - 1) * rel
    return SpeedupEstimate(s, Interval(s * math.exp(-k), s * math.exp(k)), None)


# -- chi-square (engine-against-ours comparisons) -------------------------------------------------


def chi2_sf(x: float, dof: int) -> float:
    """P(X >= x) for X chi-square with ``dof`` degrees of freedom: the regularized upper
    incomplete gamma Q(dof/2, x/2), torch's ``special.gammaincc`` in float64. torch is imported
    here, not at the top: its callers compare runs that loaded torch already, and the rest of
    this module is read by torch-free callers (inspect's evidence findings)."""
    if dof < 1:
        raise ValueError("chi-square needs at least one degree of freedom")
    import torch

    a, half = torch.tensor(dof / 2, dtype=torch.float64), torch.tensor(max(x, 0.0) / 2, dtype=torch.float64)
    return float(torch.special.gammaincc(a, half))


@dataclass(frozen=True)
class ChiSquare:
    statistic: float
    dof: int
    p_value: float
    cells: int  # after pooling


# -- an engine's acceptance against ours (smoke-run --engine vllm) ---------------------------------


def accepted_counts(lengths: Sequence[int], drafts_per_step: int) -> list[int]:
    """How many steps accepted 0, 1, ..., ``drafts_per_step`` drafts, from acceptance lengths
    (bonus included, so a length ``L`` accepted ``L - 1``)."""
    counts = [0] * (drafts_per_step + 1)
    for length in lengths:
        if not 1 <= length <= drafts_per_step + 1:
            raise ValueError(f"acceptance length {length} outside 1..{drafts_per_step + 1}")
        counts[length - 1] += 1
    return counts


def engine_accepted_counts(num_drafts: int, accepted_per_pos: Sequence[int]) -> list[int]:
    """The same counts from vLLM's counters: ``vllm:spec_decode_num_drafts`` (steps) and
    ``vllm:spec_decode_num_accepted_tokens_per_pos`` (position ``j``: the steps whose draft ``j``
    was accepted, so every earlier one was too): ``count(k) = n(>= k) - n(>= k + 1)``."""
    reach = [num_drafts, *accepted_per_pos]
    if any(b > a for a, b in zip(reach, reach[1:])) or min(reach, default=0) < 0:
        raise ValueError("per-position acceptance must be non-negative and non-increasing, at most num_drafts")
    return [a - b for a, b in zip(reach, reach[1:])] + [reach[-1]]


def homogeneity(ours: Sequence[int], theirs: Sequence[int], min_expected: float = 5.0) -> ChiSquare:
    """Pearson's chi-square that two runs' accepted-count distributions are the same law (a 2 x K
    table, neighbouring categories pooled until every expected count reaches ``min_expected``).

    With DFlash's one-hot drafts both verification rules have the same law, so an engine and our
    runtime on the same pair, prompts and settings should pass it. Steps are taken as independent,
    which they are not within a prompt: the test is too eager to reject under strong prompt
    effects, so read a small p-value as "look", not as proof; identical greedy runs give
    identical counts and p = 1."""
    if len(ours) != len(theirs):
        raise ValueError("the two count lists differ in length")
    na, nb = sum(ours), sum(theirs)
    n = na + nb
    if na == 0 or nb == 0:
        return ChiSquare(0.0, 0, 1.0, 0)
    cols: list[tuple[int, int]] = []
    acc_a = acc_b = 0
    for a, b in zip(ours, theirs):
        acc_a, acc_b = acc_a + a, acc_b + b
        if min(na, nb) * (acc_a + acc_b) / n >= min_expected:
            cols.append((acc_a, acc_b))
            acc_a = acc_b = 0
    if acc_a + acc_b:
        if cols:
            a0, b0 = cols[-1]
            cols[-1] = (a0 + acc_a, b0 + acc_b)
        else:
            cols.append((acc_a, acc_b))
    if len(cols) < 2:
        return ChiSquare(0.0, 0, 1.0, len(cols))
    stat = 0.0
    for a, b in cols:
        total = a + b
        for observed, row in ((a, na), (b, nb)):
            expected = row * total / n
            stat += (observed - expected) ** 2 / expected
    dof = len(cols) - 1
    return ChiSquare(stat, dof, chi2_sf(stat, dof), len(cols))
