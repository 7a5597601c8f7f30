"""The published figures table (package data) and the comparison rules (checks/published.py)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from dflash_ckpt.checks.published import (
    BENCHMARKS, FAR_BELOW, PublishedRow, comparable, drafts, far_below, far_below_message, fingerprint,
    fingerprint_of, known_draft, published_for, reference_tau, rows)
from dflash_ckpt.sources.suites import SUITES

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "fixtures"))
import make_fixtures  # noqa: E402

ZLAB4 = "z-lab/Qwen3-4B-DFlash-b16"
ZLAB8 = "z-lab/Qwen3-8B-DFlash-b16"


def test_every_row_is_complete_and_sane() -> None:
    table = rows()
    assert len(table) == 15
    every_benchmark = {b for names in BENCHMARKS.values() for b in names}
    for r in table:
        assert r.benchmark in every_benchmark
        assert 1.0 <= r.tau <= r.block_size
        assert r.speedup is None or 1.0 < r.speedup <= r.tau  # a speedup above tau cannot be real
        assert r.rule in ("greedy", "match", "rejection") and (r.rule == "greedy") == (r.temperature == 0.0)
        assert r.source.startswith("https://") and r.engine and r.hardware
        assert r.thinking in ("off", "on", None)
        assert r.draft in drafts()


def test_the_issue_29_figures_of_qwen3_4b() -> None:
    def taus(t: float) -> dict[str, float]:
        return {r.benchmark: r.tau for r in published_for(ZLAB4) if r.temperature == t}

    assert taus(0.0) == {"GSM8K": 6.50, "Math500": 7.84, "HumanEval": 6.63, "MBPP": 6.19, "MT-Bench": 4.35}
    assert taus(1.0) == {"GSM8K": 5.98, "Math500": 6.67, "HumanEval": 6.05, "MBPP": 5.55, "MT-Bench": 4.03}
    for r in published_for(ZLAB4):
        assert (r.block_size, r.hardware, r.source) == (16, "NVIDIA B200", "https://huggingface.co/z-lab/Qwen3-4B-DFlash-b16")
        assert r.engine.startswith("transformers") and r.rule == ("greedy" if r.temperature == 0 else "match")


def test_the_papers_qwen3_8b_figures_are_those_design_md_cites() -> None:
    """Every paper row appears, tau and speedup, in docs/DESIGN.md section 7's sentence."""
    text = (ROOT / "docs" / "DESIGN.md").read_text(encoding="utf-8")
    section = text[text.index("## 7. Figures to compare against"):text.index("## 8.")]
    paper = [r for r in rows() if r.draft == ZLAB8]
    assert len(paper) == 5
    for r in paper:
        cited = f"{r.benchmark} tau {r.tau:.2f}" if r.benchmark == "GSM8K" else f"{r.benchmark} {r.tau:.2f}"
        if r.speedup is not None:
            cited += f" ({r.speedup:.2f}x)"
        assert cited in section, cited
        assert r.source == "https://arxiv.org/abs/2602.06036"


def test_every_suite_but_long_maps_to_benchmarks() -> None:
    assert set(BENCHMARKS) == set(SUITES) - {"long"}
    assert BENCHMARKS["math"] == ("GSM8K", "Math500") and BENCHMARKS["code"] == ("HumanEval", "MBPP")
    assert BENCHMARKS["chat"] == ("MT-Bench",)


def test_a_draft_is_known_by_repo_id_in_any_spelling_or_by_fingerprint() -> None:
    assert known_draft("Z-Lab/qwen3-4b-dflash-b16@main") == ZLAB4
    assert known_draft(drafts()[ZLAB8]["fingerprint"]) == ZLAB8
    assert known_draft("someone/Qwen3-4B-DFlash-b16") is None and known_draft("sha256:0000000000000000") is None
    assert len(published_for(ZLAB4)) == 10 and published_for("org/unknown") == []


@pytest.mark.parametrize("name", ["Qwen3-4B-DFlash-b16", "Qwen3-8B-DFlash-b16"])
def test_the_stored_fingerprints_are_those_of_the_published_configs(name: str, tmp_path: Path) -> None:
    """A draft built from the published config (real header shapes, sparse data, as the fixtures
    build it) has the fingerprint the table stores for that repo."""
    from dflash_ckpt.draftspec.specs import read_draft_spec
    from dflash_ckpt.sources.local import LocalSource

    raw = (make_fixtures.PUBLISHED / "configs" / f"{name}.json").read_bytes()
    make_fixtures.write_draft(tmp_path / name, json.loads(raw))
    (tmp_path / name / "config.json").write_bytes(raw)
    got = fingerprint(read_draft_spec(LocalSource(tmp_path / name)))
    assert got == drafts()[f"z-lab/{name}"]["fingerprint"]
    assert [r.draft for r in published_for(got)][:1] == [f"z-lab/{name}"]


def test_the_fingerprint_ignores_dtype_and_a_model_prefix_but_not_taps_or_shapes() -> None:
    keys = {"block_size": 16, "mask_token_id": 151669, "target_layer_ids": [1, 9, 17, 25, 33], "num_target_layers": 36}
    shapes = {"fc.weight": [2560, 12800], "norm.weight": [2560]}
    base = fingerprint_of(keys, shapes)
    assert re.fullmatch(r"sha256:[0-9a-f]{16}", base)
    assert fingerprint_of(keys, {f"model.{k}": v for k, v in shapes.items()}) == base
    assert fingerprint_of(dict(reversed(keys.items())), dict(reversed(shapes.items()))) == base
    assert fingerprint_of({**keys, "target_layer_ids": [2, 10, 18, 26, 34]}, shapes) != base
    assert fingerprint_of(keys, {**shapes, "norm.weight": [4096]}) != base


def test_a_spec_without_readable_weights_has_no_fingerprint() -> None:
    class Inventory:
        readable = False
        tensors = {"fc.weight": None}

    class Spec:
        weights = Inventory()

    assert fingerprint(Spec()) is None and fingerprint(object()) is None


def test_comparable_figures_by_suite_and_temperature() -> None:
    figs = published_for(ZLAB4)
    greedy_math = comparable(figs, "math", 0.0)
    assert {r.benchmark for r in greedy_math} == {"GSM8K", "Math500"} and reference_tau(greedy_math) == 6.50
    assert reference_tau(comparable(figs, "code", 0.0)) == 6.19
    assert reference_tau(comparable(figs, "chat", 0.0)) == 4.35
    # sampled at 0.6: held to the temperature-1 figures, a floor for lower temperatures
    assert reference_tau(comparable(figs, "math", 0.6)) == 5.98
    assert reference_tau(comparable(figs, "chat", 1.0)) == 4.03
    assert comparable(figs, "math", 1.5) == [] and comparable(figs, "long", 0.0) == []
    assert reference_tau([]) is None


def test_far_below_uses_the_upper_bound_at_the_stated_share() -> None:
    assert FAR_BELOW == 0.6
    assert far_below(3.0, 3.8, 6.5)  # 3.8 < 0.6 * 6.5 = 3.9
    assert not far_below(3.0, 3.95, 6.5)  # noise could still reach the published level's 60%
    assert not far_below(5.5, 6.4, 6.5)
    assert not far_below(1.2, None, 6.5)  # too little evidence: the evidence warning, not this
    with pytest.raises(ValueError):
        far_below(4.0, 3.0, 6.5)


def test_the_message_names_the_figure_its_source_and_the_usual_causes() -> None:
    row = next(r for r in published_for(ZLAB4) if r.benchmark == "GSM8K" and r.temperature == 0.0)
    msg = far_below_message("math", 1.08, (1.0, 1.2), row)
    assert msg.startswith("suite math: tau 1.08 (95% interval 1.00-1.20) is far below the 6.50 published for "
                          "z-lab/Qwen3-4B-DFlash-b16 on GSM8K (temperature 0, block 16, thinking off; "
                          "https://huggingface.co/z-lab/Qwen3-4B-DFlash-b16)")
    for cause in ("dtype", "chat template", "thinking", "target_layer_ids", "block layout"):
        assert cause in msg
    assert isinstance(row, PublishedRow) and row.to_json()["tau"] == 6.5
