"""One rule for which draft layers slide: ``normalize`` writes what the runtime runs.

For every published draft config, as published and with ``layer_types`` taken out, and for
mutants over the sliding keys, the runtime's ``draft_layer_types`` and ``normalize``'s plan either
give the same list or both refuse (runtime: exit 2 naming ``--layer-types``; normalize: DF133).
"""

from __future__ import annotations

import copy
import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, no_traceback
from dflash_ckpt.errors import CheckFailed, InputError
from dflash_ckpt.canonical.plan import plan_normalize
from dflash_ckpt.draftspec.layer_kinds import LAYER_KINDS
from dflash_ckpt.draftspec.specs import build_spec

CONFIGS = sorted((ROOT / "fixtures" / "published" / "configs").glob("*.json"))
ABSENT = "absent"


def runtime_kinds(cfg: dict[str, Any]) -> list[str] | None:
    try:
        spec = build_spec(cfg, label="draft")
        return list(spec.settings.layer_kinds.require())
    except InputError as err:
        assert err.code == "DF133" and "--layer-types" in str(err), err
        return None


def normalize_kinds(cfg: dict[str, Any]) -> list[str] | None:
    # num_target_layers is supplied so that only layer_types can make the plan refuse.
    cfg = {**cfg, "num_target_layers": cfg.get("num_target_layers", 64)}
    try:
        return plan_normalize(cfg, prefer="nested").after["layer_types"]
    except CheckFailed as err:
        assert err.code == "DF133" and "--layer-types" in str(err), err
        return None


def test_every_published_config_is_covered() -> None:
    assert len(CONFIGS) >= 7


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_published_configs_agree(path: Path) -> None:
    cfg = json.loads(path.read_text())
    published = cfg["layer_types"]
    assert runtime_kinds(cfg) == normalize_kinds(cfg) == published
    stripped = {k: v for k, v in cfg.items() if k != "layer_types"}
    got = runtime_kinds(stripped)
    assert got == normalize_kinds(stripped)
    if "sliding_attention" in published:
        # Every published sliding draft is one where the max_window_layers rule would be wrong.
        assert got is None
    else:
        assert got == published


def _mutants() -> list[dict[str, Any]]:
    base = json.loads((ROOT / "fixtures/published/configs/Qwen3.6-27B-DFlash.json").read_text())
    out = []
    for use, window, mwl, lt in itertools.product(
        [True, False, None, ABSENT], [4096, None, 0, ABSENT], [0, 1, 5, 28, ABSENT], [None, ABSENT, "sliding4"],
    ):
        cfg = copy.deepcopy(base)
        for key, value in (("use_sliding_window", use), ("sliding_window", window), ("max_window_layers", mwl)):
            cfg.pop(key, None)
            if value != ABSENT:
                cfg[key] = value
        cfg.pop("layer_types")
        if lt == "sliding4":
            cfg["layer_types"] = ["sliding_attention"] * 4 + ["full_attention"]
        elif lt is None:
            cfg["layer_types"] = None
        out.append(cfg)
    return out


def test_mutants_agree() -> None:
    outcomes = set()
    for cfg in _mutants():
        rt = runtime_kinds(cfg)
        assert rt == normalize_kinds(cfg), {k: cfg.get(k, ABSENT) for k in ("use_sliding_window", "sliding_window", "max_window_layers", "layer_types")}
        assert rt is None or set(rt) <= set(LAYER_KINDS)
        outcomes.add("refused" if rt is None else "sliding" if "sliding_attention" in rt else "full")
    assert outcomes == {"refused", "sliding", "full"}  # the grid reaches every outcome


def test_smoke_run_refuses_an_undetermined_sliding_draft(cli, tmp_path: Path) -> None:
    import tiny_models as tm

    target = tm.make_target(tmp_path / "t")
    draft = tm.make_draft(tmp_path / "d", layers=3, sliding_window=16,
                          extra_config={"layer_types": None, "use_sliding_window": True, "max_window_layers": 1})
    res = cli("smoke-run", str(draft), "--target", str(target), "-n", "2")
    no_traceback(res)
    assert res.code == 2 and res.stdout == "" and res.stderr.count("\n") == 1, res.stderr
    assert "layer_types is missing and cannot be derived" in res.stderr and "--layer-types" in res.stderr
