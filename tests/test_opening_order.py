"""One opening, one order (issue 40): smoke-run and probe-taps open a pair through
``run/pair.open_pair``, so the same bad pair meets the same first error whichever command runs it.

Each pair below is a copy of the tiny pair with one thing broken (or two, where the order between
them is the point), built at test time. Before the one opening, a target whose
``num_hidden_layers`` is not a positive integer was DF142 in smoke-run and DF001 in probe-taps, and
a cut target shard beside a bad draft was refused by the checks (DF122, exit 1) in smoke-run but
DF204 (exit 2) in probe-taps. No model is loaded: every case stops in the opening.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Callable

import pytest

from conftest import CliResult, no_traceback
from degenerate_pairs import TINY, zeroed

pytest.importorskip("torch")
pytest.importorskip("tokenizers")

DRAFT, TARGET = TINY / "draft", TINY / "target"


def _edited(src: Path, dst: Path, edit: Callable[[dict[str, Any]], None]) -> Path:
    shutil.copytree(src, dst)
    cfg = json.loads((dst / "config.json").read_text())
    edit(cfg)
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


def _cut(src: Path, dst: Path) -> Path:
    """``src`` with its shard cut in half: the header says more bytes than the file holds (DF204)."""
    shutil.copytree(src, dst)
    shard = dst / "model.safetensors"
    data = shard.read_bytes()
    shard.write_bytes(data[: len(data) // 2])
    return dst


@pytest.fixture(scope="module")
def pairs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path, list[str]]]:
    root = tmp_path_factory.mktemp("opening")
    bad_vocab = _edited(DRAFT, root / "draft-vocab", lambda c: c.update(vocab_size=700))  # DF122 in the checks
    return {
        # a target config the runtime refuses (step 2), whatever the command does with the depth after
        "target-layers": (DRAFT, _edited(TARGET, root / "t-layers", lambda c: c.update(num_hidden_layers=-1)), []),
        "target-kv-heads": (DRAFT, _edited(TARGET, root / "t-kv", lambda c: c.update(num_key_value_heads=3)), []),
        # a target the chosen backend does not run (step 5)
        "backend": (DRAFT, _edited(TARGET, root / "t-gpt2", lambda c: c.update(
            model_type="gpt2", architectures=["GPT2LMHeadModel"])), ["--backend", "native"]),
        # unreadable target headers (step 6) come before the checks' verdict on the draft (step 7)
        "cut-target-and-bad-draft": (bad_vocab, _cut(TARGET, root / "t-cut"), []),
        # a draft refused by the checks (step 7)
        "draft-rope": (_edited(DRAFT, root / "draft-rope", lambda c: c.update(rope_theta=-1)), TARGET, []),
        "draft-vocab": (bad_vocab, TARGET, []),
        # weights no training filled (step 9), sampled only once the checks pass
        "zero-draft": (zeroed(DRAFT, root / "zero-draft"), TARGET, []),
    }


def first_error(res: CliResult) -> tuple[int, str | None]:
    """The exit code and the code of the first error the user reads: the one-line error, else the
    first error among the findings that refused the pair."""
    doc = res.json()
    err = doc.get("error") or (doc["results"][0].get("error") if doc["results"] else None)
    if err:
        return res.code, err["code"]
    refused = doc["results"][0]["precheck"]
    return res.code, next((f["code"] for f in refused if f["severity"] == "error"), None)


EXPECTED = {
    "target-layers": (2, "DF142"), "target-kv-heads": (2, "DF142"), "backend": (2, "DF004"),
    "cut-target-and-bad-draft": (2, "DF204"), "draft-rope": (1, "DF147"), "draft-vocab": (1, "DF122"),
    "zero-draft": (1, "DF413"),
}


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_the_same_bad_pair_meets_the_same_first_error(cli: Any, one_thread: None, pairs: Any, case: str) -> None:
    draft, target, extra = pairs[case]
    seen = {}
    for command in ("smoke-run", "probe-taps"):
        res = cli(command, str(draft), "--target", str(target), "-n", "4", "-p", "hi", "--json", *extra)
        no_traceback(res)
        seen[command] = first_error(res)
    assert seen["smoke-run"] == seen["probe-taps"] == EXPECTED[case], seen


def test_a_draft_the_runtime_does_not_implement_is_refused_first_by_both(cli: Any, pairs: Any, tmp_path: Path) -> None:
    """DF151 (exit 2: a reduced draft vocabulary the runtime would run without its d2t map) is
    the opening's first refusal for both commands, before a target config the runtime refuses
    (DF142) and before the checks (probe-taps' DF225): no target makes such a draft runnable, and
    probe-taps would rank the tap sets of another model. A runnable draft beside that target
    meets DF142 in both."""
    gaps = _edited(DRAFT, tmp_path / "gaps", lambda c: c.update(draft_vocab_size=512))
    bad_target = pairs["target-kv-heads"][1]
    for target in (TARGET, bad_target):
        for command in ("smoke-run", "probe-taps"):
            res = cli(command, str(gaps), "--target", str(target), "-n", "4", "-p", "hi", "--json")
            no_traceback(res)
            assert first_error(res) == (2, "DF151"), (command, target)
    for command in ("smoke-run", "probe-taps"):
        res = cli(command, str(DRAFT), "--target", str(bad_target), "-n", "4", "-p", "hi", "--json")
        assert first_error(res) == (2, "DF142"), command
