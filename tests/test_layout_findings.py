"""DF416-DF418 from layout measurements, and which keys ``--write`` records (pure: no model runs)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from dflash_ckpt.checks.layout_findings import layout_findings, searched_layout, smoke_layout_findings
from dflash_ckpt.draftspec.layout import ANCHOR_FIRST, ONE_PLUS_N, BlockLayout, resolve_layout
from dflash_ckpt.errors import UsageError
from dflash_ckpt.draftspec.layout_keys import require_layout_engines, layout_paths
from dflash_ckpt.runtime.measure import Candidate
from dflash_ckpt.runtime.probe_layout import LayoutMeasurement

DEFAULT = resolve_layout({})
DECLARED_AF = resolve_layout({"dflash_config": {"sample_from_anchor": True}})


def measured(declared: BlockLayout, one: list[int], anchor: list[int]) -> LayoutMeasurement:
    m = LayoutMeasurement(declared, (1, 3, 5))
    m.by_layout = {ONE_PLUS_N: Candidate((1, 3, 5), None, tau_loop=sum(one) / len(one), lengths=one),
                   ANCHOR_FIRST: Candidate((1, 3, 5), None, tau_loop=sum(anchor) / len(anchor), lengths=anchor)}
    return m


def result(m: LayoutMeasurement, min_acceptance: float = 2.0) -> SimpleNamespace:
    return SimpleNamespace(layout=m, draft_path="/d", draft_label="d", options=SimpleNamespace(min_acceptance=min_acceptance))


def codes(findings: list) -> list[str]:
    return [f.code for f in findings]


def test_a_clear_lead_for_the_declared_layout_is_no_finding() -> None:
    m = measured(DEFAULT, [5, 6, 4, 6, 5, 7] * 5, [1, 1, 2, 1] * 8)
    assert m.best == ONE_PLUS_N and m.verdict() == "clear"
    assert layout_findings(result(m)) == []  # confirmed: no finding, the report line says so


def test_a_clear_lead_for_the_other_layout_is_df417_naming_the_key() -> None:
    m = measured(DECLARED_AF, [5, 6, 4, 6, 5, 7] * 5, [1, 1, 2, 1] * 8)
    (f,) = layout_findings(result(m))
    assert f.code == "DF416" and f.severity.value == "error"
    assert f.key == "dflash_config.sample_from_anchor" and "trained 1+N" in f.message


def test_a_narrow_lead_claims_no_layout() -> None:
    """The other layout ahead within noise is DF417; the declared one ahead within noise stands."""
    m = measured(DECLARED_AF, [3, 4, 2, 5, 4] * 4, [3, 5, 2, 4, 3] * 4)
    assert m.verdict() == "narrow" and m.best == ONE_PLUS_N
    assert codes(layout_findings(result(m))) == ["DF417"]
    assert layout_findings(result(measured(DEFAULT, [3, 4, 2, 5, 4] * 4, [3, 5, 2, 4, 3] * 4))) == []


def test_a_lead_on_a_few_steps_claims_no_layout() -> None:
    m = measured(DEFAULT, [1, 1, 1, 1, 1], [2, 3, 2, 3])  # z is large, the evidence is not
    assert (m.z or 0) > 2
    assert codes(layout_findings(result(m, 0.0))) == ["DF417"]


def test_nothing_is_named_when_neither_layout_works() -> None:
    """Both layouts below --min-acceptance: DF411 speaks for the taps; a layout claim would mislead."""
    m = measured(DEFAULT, [1, 1, 1, 2] * 8, [1, 2, 2, 1, 2] * 8)
    assert layout_findings(result(m)) == []


def test_the_search_runs_in_the_measured_layout_only_beyond_noise() -> None:
    args = SimpleNamespace(block_layout=DEFAULT)
    import dataclasses

    @dataclasses.dataclass(frozen=True)
    class Args:
        block_layout: BlockLayout

    a = Args(DEFAULT)
    assert searched_layout(a, measured(DEFAULT, [1, 1, 2, 1] * 8, [5, 6, 4, 6, 5, 7] * 5)).block_layout.layout == ANCHOR_FIRST
    assert searched_layout(a, measured(DEFAULT, [3, 4, 2, 5, 3] * 4, [3, 5, 2, 4, 3] * 4)) is a
    assert args.block_layout is DEFAULT


def test_smoke_run_warns_when_layout_overrides_the_config() -> None:
    assert smoke_layout_findings(DEFAULT, DEFAULT) == []
    (f,) = smoke_layout_findings(BlockLayout(ANCHOR_FIRST, "--layout", {}), DEFAULT)
    assert f.code == "DF418" and "--layout anchor-first" in f.message


def test_write_records_the_declared_keys_and_the_named_engines_keys() -> None:
    assert layout_paths({}, ()) == [("dflash_config", "sample_from_anchor")]
    assert layout_paths({"sample_from_anchor": False}, ()) == [("sample_from_anchor",)]
    assert layout_paths({"dflash_config": {"shift_label": True}}, ("vllm", "speculators")) == [
        ("dflash_config", "sample_from_anchor"), ("sample_from_anchor",), ("dflash_config", "shift_label")]
    with pytest.raises(UsageError, match="--layout-for 'sglang'"):
        require_layout_engines(["sglang"])
