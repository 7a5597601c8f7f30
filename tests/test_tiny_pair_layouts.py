"""The committed anchor-first tiny draft (fixtures/tiny-pair/draft-anchor-first/) and the layouts
of both tiny drafts, through the CLI as a user runs it (issue 26, items 2 and 3).

- ``draft-anchor-first/`` passes smoke-run (lossless, tau >= 3.5: a shortened training recipe) in the layout its config
  declares (``dflash_config.sample_from_anchor: true``) on both backends; run as 1+N it drops to
  tau ~1, and the 1+N ``draft/`` run as anchor-first likewise, losslessly;
- probe-taps recovers the layout of both drafts with their layout key removed (or wrong), and
  ``--write`` records it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from conftest import CliResult, cached_cli, config, run_cli, smoke_json

ROOT = Path(__file__).resolve().parents[1]
PAIR = ROOT / "fixtures" / "tiny-pair"
TARGET = PAIR / "target"
DRAFT = PAIR / "draft"
ANCHOR = PAIR / "draft-anchor-first"
MIN_TAU = 4.0  # the 1+N draft's bar (tests/test_tiny_pair.py)
#: The anchor-first draft was trained on a shortened recipe (1000 prompts, 1200 steps; 3.69 measured)
ANCHOR_MIN_TAU = 3.5
#: probe-taps runs with -n 64 here: shorter continuations, lower tau (3.26 for the anchor-first draft)
PROBE_MIN_TAU = 2.5
WRONG_LAYOUT_TAU = 1.5  # one position off: only coincidences are accepted

pytestmark = [pytest.mark.filterwarnings("ignore"),]


cli = cached_cli


def smoke(draft: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    return smoke_json(draft, TARGET, *extra)


def codes(doc: dict[str, Any]) -> set[str]:
    return {f["code"] for f in doc["findings"]}


def test_the_anchor_first_folder_declares_its_layout_and_holds_only_the_draft() -> None:
    assert {p.name for p in ANCHOR.iterdir()} == {"config.json", "model.safetensors"}
    cfg = config(ANCHOR)
    assert cfg["dflash_config"]["sample_from_anchor"] is True
    same = {k: v for k, v in cfg.items() if k != "dflash_config"}
    assert same == {k: v for k, v in config(DRAFT).items() if k != "dflash_config"}  # same architecture
    assert ANCHOR.joinpath("model.safetensors").stat().st_size < 1_000_000


@pytest.mark.slow
def test_anchor_first_draft_passes_smoke_run_in_its_layout() -> None:
    code, doc = smoke(ANCHOR)
    s = doc["settings"]
    assert (s["layout"], s["layout_source"], s["verify_width"]) == ("anchor-first", "dflash_config.sample_from_anchor", 9)
    assert code == 0, doc["findings"]
    assert doc["overall"]["tau"] >= ANCHOR_MIN_TAU
    assert max(int(k) for k, v in doc["overall"]["histogram"].items() if v) == 9  # all 8 drafts accepted, plus the bonus
    assert all(p["lossless"]["status"] in ("identical", "tie") for p in doc["prompts"])
    assert not codes(doc) & {"DF403", "DF418"}


@pytest.mark.slow
def test_anchor_first_draft_run_as_one_plus_n_drops_to_tau_one() -> None:
    code, doc = smoke(ANCHOR, "--layout", "1+N")
    assert doc["settings"]["layout"] == "1+N" and doc["settings"]["layout_source"] == "--layout"
    assert code == 1 and {"DF403", "DF418"} <= codes(doc)
    assert doc["overall"]["tau"] < WRONG_LAYOUT_TAU
    assert all(p["lossless"]["status"] in ("identical", "tie") for p in doc["prompts"])  # wrong, yet lossless


@pytest.mark.slow
def test_one_plus_n_draft_run_as_anchor_first_drops_to_tau_one() -> None:
    code, doc = smoke(DRAFT, "--layout", "anchor-first")
    assert doc["settings"]["verify_width"] == 9
    assert code == 1 and {"DF403", "DF418"} <= codes(doc)
    assert doc["overall"]["tau"] < WRONG_LAYOUT_TAU
    assert all(p["lossless"]["status"] in ("identical", "tie") for p in doc["prompts"])
    code, doc = smoke(DRAFT, "--layout", "1+N")  # the declared layout named: no warning, the usual pass
    assert code == 0 and "DF418" not in codes(doc) and doc["overall"]["tau"] >= MIN_TAU


@pytest.mark.slow
def test_transformers_backend_runs_the_anchor_first_draft_like_the_native_one() -> None:
    pytest.importorskip("transformers")
    code, doc = smoke(ANCHOR, "--backend", "transformers")
    _, native = smoke(ANCHOR)
    assert code == 0 and doc["settings"]["backend"] == "transformers"
    assert [p["output_ids"] for p in doc["prompts"]] == [p["output_ids"] for p in native["prompts"]]
    assert doc["overall"]["tau"] == pytest.approx(native["overall"]["tau"], abs=0.3)


@pytest.mark.slow
def test_training_record_matches_what_smoke_run_measures() -> None:
    record = json.loads((PAIR / "draft-anchor-first-training.json").read_text())
    acc = record["acceptance"]
    assert acc["draft-anchor-first as anchor-first"]["lossless"] and acc["draft as anchor-first"]["lossless"]
    # The record is the eager loop's, smoke-run runs the static one: bf16 rounding may move a few
    # acceptance lengths (3.69 recorded, 3.77 by smoke-run here), as tests/test_tiny_pair.py allows.
    assert acc["draft-anchor-first as anchor-first"]["tau"] == pytest.approx(smoke(ANCHOR)[1]["overall"]["tau"], abs=0.5)
    assert acc["draft-anchor-first as 1+N"]["tau"] < WRONG_LAYOUT_TAU and acc["draft as anchor-first"]["tau"] < WRONG_LAYOUT_TAU
    assert record["layout"] == "anchor-first" and record["train_seconds"] > 0


@pytest.mark.slow
def test_unknown_layout_is_a_usage_error() -> None:
    pytest.importorskip("torch")
    res = cli("smoke-run", str(DRAFT), "--target", str(TARGET), "--layout", "2+N")
    assert res.code == 2 and "--layout '2+N': use 1+N or anchor-first" in res.stderr


# -- probe-taps recovers the layout ------------------------------------------------------------


def copy_with(tmp: Path, src: Path, edit: Any) -> Path:
    folder = tmp / src.name
    shutil.copytree(src, folder)
    cfg = config(folder)
    edit(cfg)
    (folder / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    return folder


def probe(draft: Path, out: Path, *extra: str) -> tuple[CliResult, dict[str, Any]]:
    pytest.importorskip("torch")
    res = cli("probe-taps", str(draft), "--target", str(TARGET), "--json", "-n", "64", "--write", str(out), *extra)
    return res, res.merged()


@pytest.fixture(scope="module")
def lost(tmp_path_factory: pytest.TempPathFactory) -> tuple[CliResult, dict[str, Any], Path]:
    """The anchor-first draft with its layout key removed: engines (and the runtime) take it for 1+N."""
    tmp = tmp_path_factory.mktemp("lost")
    folder = copy_with(tmp, ANCHOR, lambda c: c["dflash_config"].pop("sample_from_anchor"))
    out = tmp / "recovered"
    return (*probe(folder, out, "--layout-for", "vllm", "--layout-for", "speculators"), out)


@pytest.mark.slow
def test_probe_recovers_the_lost_anchor_first_layout(lost: Any) -> None:
    res, doc, _ = lost
    m = doc["layout"]
    assert m["declared"]["layout"] == "1+N" and m["declared"]["source"] == "default"
    assert m["best"] == "anchor-first" and m["verdict"] == "clear" and not m["matches_config"]
    assert m["tau"]["anchor-first"] >= PROBE_MIN_TAU and m["tau"]["1+N"] < WRONG_LAYOUT_TAU
    assert m["before_search"]["best"] == "anchor-first" and m["before_search"]["measured_by"] == "probe"
    assert doc["best"]["target_layer_ids"] == [1, 3, 5] and doc["best"]["tau"] >= PROBE_MIN_TAU  # searched anchor-first
    wrong = [f for f in doc["findings"] if f["code"] == "DF416"]
    assert res.code == 1 and wrong and "trained anchor-first" in wrong[0]["message"]


@pytest.mark.slow
def test_write_records_the_layout_in_the_keys_the_named_engines_read(lost: Any) -> None:
    _, doc, out = lost
    assert doc["write"]["written"], doc["write"]
    cfg = config(out)
    assert cfg["dflash_config"]["sample_from_anchor"] is True and cfg["sample_from_anchor"] is True
    code, smoked = smoke(out)
    assert code == 0 and smoked["settings"]["layout"] == "anchor-first" and smoked["overall"]["tau"] >= ANCHOR_MIN_TAU


@pytest.mark.slow
def test_probe_confirms_the_one_plus_n_layout_of_the_draft_without_a_key(tmp_path: Path) -> None:
    res, doc = probe(DRAFT, tmp_path / "out")
    m = doc["layout"]
    assert m["best"] == "1+N" and m["matches_config"] and m["verdict"] == "clear"
    assert m["tau"]["anchor-first"] < WRONG_LAYOUT_TAU
    assert res.code == 0 and not codes(doc) & {"DF416", "DF417"}
    assert "sample_from_anchor" not in config(tmp_path / "out").get("dflash_config", {})  # nothing to record


@pytest.mark.slow
def test_probe_corrects_a_wrong_anchor_first_key_on_the_one_plus_n_draft(tmp_path: Path) -> None:
    folder = copy_with(tmp_path, DRAFT, lambda c: c["dflash_config"].update(sample_from_anchor=True))
    res, doc = probe(folder, tmp_path / "out")
    m = doc["layout"]
    assert m["declared"] == {"layout": "anchor-first", "source": "dflash_config.sample_from_anchor",
                             "declared": {"dflash_config.sample_from_anchor": True}}
    assert m["best"] == "1+N" and m["verdict"] == "clear"
    assert res.code == 1 and "DF416" in codes(doc)
    assert config(tmp_path / "out")["dflash_config"]["sample_from_anchor"] is False
