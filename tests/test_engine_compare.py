"""``--engine both``'s judge, on built runs (no engine): DF427 for outputs that differ beyond a
tie under the engine's target, DF426 for an engine that accepts materially fewer drafts."""

from __future__ import annotations

from typing import Any

from dflash_ckpt.checks.engine_compare import accepts_less, compare_prompts, engine_findings, judge_difference, per_position
from dflash_ckpt.runtime.generate import Generation
from dflash_ckpt.runtime.measure import Lossless, PromptRun
from dflash_ckpt.sources.prompts import Prompt


def run(tokens: list[int], lengths: list[int]) -> PromptRun:
    gen = Generation(tokens=tokens, acceptance_lengths=lengths, target_forwards=1 + len(lengths),
                     step_s=[0.01] * len(lengths))
    return PromptRun(Prompt(name="p", text="hi"), [1, 2], Generation(tokens=tokens, step_s=[0.005] * len(tokens)),
                     gen, Lossless("identical", len(tokens)))


def tops(n: int, at: dict[int, list[list[float]]]) -> list[list[list[float]]]:
    return [at.get(j, [[0, -0.1]]) for j in range(n)]


def test_per_position_counts_as_vllm_does() -> None:
    assert per_position([1, 3, 8, 2], 8) == [3, 2, 1, 1, 1, 1, 1]


def test_a_near_tie_is_a_tie_and_a_clear_gap_differs() -> None:
    assert judge_difference([[5, -0.6], [9, -0.9]], 5, 9, 0.5) == ("tie", 0.30000000000000004)
    assert judge_difference([[5, -0.1], [9, -3.0]], 5, 9, 0.5)[0] == "differs"
    assert judge_difference([[5, -0.1]], 5, 9, 0.5) == ("differs", None)  # outside the top logprobs


def test_outputs_apart_beyond_a_tie_are_df427_and_equal_ones_are_nothing() -> None:
    ref = [run([4, 5, 6, 7], [2, 1])]
    same = compare_prompts(ref, [run([4, 5, 6, 7], [2, 1])], [tops(4, {})], block=4, tolerance=0.5)
    assert same[0].tokens_equal and same[0].lengths_equal and engine_findings("vLLM", same, ref, ref, 0.5) == []
    eng = [run([4, 5, 9, 7], [1, 2])]
    apart = compare_prompts(ref, eng, [tops(4, {2: [[9, -0.05], [6, -4.0]]})], block=4, tolerance=0.5)
    c = apart[0]
    assert (c.first_difference, c.difference, c.reference_token, c.engine_token) == (2, "differs", 6, 9)
    assert c.first_step_apart == 0 and not c.lengths_equal
    found = engine_findings("vLLM", apart, ref, eng, 0.5)
    assert [f.code for f in found] == ["DF427"] and "at new token 2 (reference 6, vLLM 9)" in found[0].message
    tie = compare_prompts(ref, eng, [tops(4, {2: [[9, -0.6], [6, -0.7]]})], block=4, tolerance=0.5)
    assert tie[0].difference == "tie" and engine_findings("vLLM", tie, ref, eng, 0.5) == []


def test_materially_fewer_accepted_drafts_is_df426() -> None:
    ref_l = [5, 4, 6, 5, 4, 5, 6, 5] * 4
    assert accepts_less(ref_l, [2, 1, 2, 1, 1, 2, 1, 2] * 4)[0]
    assert not accepts_less(ref_l, [5, 4, 5, 5, 4, 5, 6, 4] * 4)[0]  # a few flips: same draft
    ref = [run(list(range(40)), ref_l)]
    eng = [run(list(range(40)), [2, 1, 2, 1, 1, 2, 1, 2] * 4)]
    comps = compare_prompts(ref, eng, [tops(40, {})], block=8, tolerance=0.5)
    found: list[Any] = engine_findings("vLLM", comps, ref, eng, 0.5)
    assert [f.code for f in found] == ["DF426"] and "reads this draft differently" in found[0].message
