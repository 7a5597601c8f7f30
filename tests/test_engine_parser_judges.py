"""Issue 41 item 5: each engine's own config parser judges its reader row.

Every published layout (fixtures/published, as built into ``drafts/`` and ``drafts/layouts/``),
every repository fixture (tiny-pair, speculators) and every mutant of make_fixtures is fed to
SGLang 0.5.23's ``parse_dflash_draft_config``, lmdeploy 0.18.0's ``parse_dflash_config``,
exllamav3 1.6.5's ``DFlashConfig`` family and the installed vLLM's config loader (its speculators
adapter), aux-layer, mask-id and per-layer causality functions (tests/engine_parsers.py,
tests/engine_parser_child.py). Against what the engine's own code resolves, our row for that
engine (``checks.engines.<engine>``: its ``judge``'s Reading, ``judge_readers``' verdict, its
``path``) must agree:

- the parser raises: our row must not say the draft loads;
- the parser resolves block size, mask id or taps that our reader also resolved: the same values
  (vLLM's aux layers are tap + 1; exllamav3's export ids are the taps + our ``tap_shift``);
- our reader fails where the parser loads: only for a reason listed in ``STRICTER`` (what the
  engine decides later than its parser, or fills in with a guess), each with its source;
- vLLM: taps as its V1 runner finds them, and where its V2 runner finds others, our row says so;
  the layers it runs causal are the trained ones except exactly those our row names
  (DF173's counts), and it refuses a declared anchor-first draft exactly when our path says so.

Not judged here, because no parser decides it: whether the weights load (tests/test_engine_vllm_readers.py
measures vLLM's by starting it), SGLang's and exllamav3's block layout (neither reads a layout
key: 1+N, our ``one_plus_n``), and acceptance-changing keys a parser reads but our row models in
``checks.acceptance``.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT
from engine_parsers import WHEELS, Judge, fetch, speculators_judge, vllm_judge
from dflash_ckpt.checks.engines import exllamav3 as exl3_row
from dflash_ckpt.checks.engines import speculators as speculators_row
from dflash_ckpt.checks.engines import vllm as vllm_row
from dflash_ckpt.checks.engines.reading import REFUSES, Reading
from dflash_ckpt.checks.engines.registry import BY_KEY
from dflash_ckpt.checks.engines.verdicts import judge_readers
from dflash_ckpt.checks.speculators_format import absent_key_sliding, causal_override
from dflash_ckpt.draftspec.draft_settings import DraftSettings
from dflash_ckpt.draftspec.layout import ANCHOR_FIRST, ONE_PLUS_N
from dflash_ckpt.draftspec.siblings import DSPARK, LAGUNA
from dflash_ckpt.draftspec.specs import DraftSpec, TargetSpec, as_int, read_draft_spec, read_target_spec
from dflash_ckpt.errors import DFlashCkptError
from dflash_ckpt.sources.local import LocalSource

pytestmark = pytest.mark.slow

#: Where our reader is stricter than the engine's parser on purpose: engine -> (pattern of our
#: reader's problem, why the parser's "loads" is not the engine's last word).
STRICTER: dict[str, tuple[tuple[str, str], ...]] = {
    "sglang": (
        (r"target_layer_ids is in neither",
         "dflash_utils.py build_target_layer_ids: with no taps SGLang guesses evenly spaced ones, not the trained ones"),
        (r"mask_token_id is in neither",
         "dflash_utils.py: with no mask id SGLang looks up the mask_token string (default <|MASK|>) in the tokenizer later"),
        (r"block_size is in neither",
         "dflash_utils.py resolve_block_size(default=...): the worker falls back to --speculative-num-draft-tokens"),
        (r"num_target_layers is in neither", "read, but optional: None"),
        (r"mask_token_id \d+ is not below the target's vocab_size",
         "checked against the target's embedding at weight load, not by the parser"),
        (r"read from .* is not an integer", "its _parse_optional_int int()s floats and numeric strings"),
    ),
    "exllamav3": (
        (r"leave the target's \d+ layers", "its taps are checked against the target when the draft is attached"),
        (r"read from .* is not", "read_dict casts some values (e.g. a float 8.0)"),
    ),
    "vllm": (
        (r"vocab_size \d+ differs from the target's", "checked at weight load (embedding/lm_head shapes)"),
        (r"tensor names are prefixed", "a weight-load failure"),
        (r"overrides the taps", "vLLM loads it, tapping other layers: our row fails it as a misserve"),
        (r"replaces the taps by none", "vLLM loads it, tapping no layer: our row fails it"),
        (r"reads target_layer_ids only from dflash_config, where it is absent$",
         "gpu_model_runner.py and eagle3_utils.py fall back to the target's default aux layers "
         "(get_eagle3_default_aux_hidden_state_layers), not the trained taps: a misserve our row fails"),
        (r"reads target_layer_ids only from dflash_config.*V1 runner",
         "gpu_model_runner.py (V1) ignores top-level taps and taps the target's default layers: a misserve; the row "
         "names what V2 (eagle3_utils.py) does"),
        (r"target_layer_ids read from .* is not", "fails later, at the fc load"),
        (r"mask_token_id read from .* is not", "used as a token id at run time"),
    ),
    "speculators": (
        (r"reads mask_token_id only from dflash_config",
         "converter.py _build_config writes mask_token_id None: the converted draft has no mask id, which vLLM's "
         "proposer refuses (llm_base_proposer.py)"),
    ),
    "lmdeploy": (
        (r"has no dflash2 algorithm",
         "pytorch/models/module_map.py registers only DFlashDraftModel: a DFlash2DraftModel has no model to build"),
    ),
}


#: Where the parser raises and our row still loads, because the row names the way round it:
#: engine -> (pattern of the parser's error, text our row's reason must hold).
NAMED_RAISES: dict[str, tuple[tuple[str, str], ...]] = {
    "speculators": ((r"KeyError: 'num_hidden_layers'", "pass the taps + 1 as --algorithm-kwargs"),),
}


def drafts(root: Path) -> dict[str, tuple[Path, Path]]:
    """name -> (draft folder, target folder): published layouts, repository fixtures, mutants."""
    index = json.loads((ROOT / "fixtures" / "published" / "index.json").read_text())
    out: dict[str, tuple[Path, Path]] = {}
    for name, entry in index.items():
        out[f"published/{name}"] = (root / "drafts" / name, root / "targets" / entry["target"].split("/")[-1])
    for folder in sorted((root / "drafts" / "layouts").iterdir()):
        if folder.is_dir():
            out[f"layouts/{folder.name}"] = (folder, root / "targets" / "Qwen3-4B")
    tiny = ROOT / "fixtures" / "tiny-pair"
    for folder in sorted([*tiny.glob("draft*"), *(ROOT / "fixtures" / "speculators").iterdir()]):
        if (folder / "config.json").is_file():
            out[f"{folder.parent.name}/{folder.name}"] = (folder, tiny / "target")
    manifest = json.loads((root / "mutants" / "manifest.json").read_text())
    for name, entry in manifest.items():
        out[f"mutants/{name}"] = (root / "mutants" / entry.get("draft", name), root / "mutants" / entry["target"])
    return out


def _move(cfg: dict[str, Any], key: str) -> None:
    cfg[key] = cfg["dflash_config"].pop(key)


#: Reader-order edge cases the fixtures lack, each a change to the mutants' base draft.
VARIANTS: dict[str, Any] = {
    "taps-top-only": lambda c: _move(c, "target_layer_ids"),
    "mask-top-only": lambda c: _move(c, "mask_token_id"),
    "mask-both-conflict": lambda c: c.update(mask_token_id=1001),
    "taps-both-conflict": lambda c: c.update(target_layer_ids=[2, 4, 6]),
    "block-nested-only": lambda c: c["dflash_config"].update(block_size=c.pop("block_size")),
    "block-both-conflict": lambda c: c["dflash_config"].update(block_size=4),
    "eagle-config-empty": lambda c: c.update(eagle_config={"use_aux_hidden_state": True}),
    "eagle-config-right": lambda c: c.update(eagle_config={"eagle_aux_hidden_state_layer_ids": [2, 4, 6]}),
    "eagle-config-wrong": lambda c: c.update(eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 3, 5]}),
    "eagle-aux-top-wrong": lambda c: c.update(eagle_aux_hidden_state_layer_ids=[1, 3, 5]),
    "tap-shift-nested-0": lambda c: c["dflash_config"].update(tap_shift=0),
    "tap-shift-top-2": lambda c: c.update(tap_shift=2),
    "is-causal-true": lambda c: c.update(is_causal=True),
    "dflash-causal-true": lambda c: c["dflash_config"].update(causal=True),
    "sliding-mixed": lambda c: c.update(layer_types=["sliding_attention", "full_attention"], sliding_window=64,
                                        use_sliding_window=True),
    "sliding-all-causal-false": lambda c: c.update(layer_types=["sliding_attention"] * 2, sliding_window=64,
                                                   use_sliding_window=True, is_causal=False),
}


def variants(root: Path, out: Path) -> dict[str, tuple[Path, Path]]:
    base = root / "mutants" / "base"
    made: dict[str, tuple[Path, Path]] = {}
    for name, change in VARIANTS.items():
        cfg = json.loads((base / "config.json").read_text())
        change(cfg)
        folder = out / name
        folder.mkdir(parents=True)
        (folder / "config.json").write_text(json.dumps(cfg))
        shutil.copy(base / "model.safetensors", folder / "model.safetensors")
        made[f"variants/{name}"] = (folder, root / "mutants" / "targets" / "small")
    return made


class Ours:
    """Our row for one engine on one draft: the bare reader's values and problems, and the verdict."""

    def __init__(self, engine: str, spec: DraftSpec, target: TargetSpec) -> None:
        self.values: dict[str, Any] = {}
        self.depth = as_int(target.num_hidden_layers)
        readings: list[Reading] = []
        real = Reading.read

        def record(reading: Reading, key: str, *args: Any, **kwargs: Any) -> Any:
            value = real(reading, key, *args, **kwargs)
            self.values.setdefault(key, value)
            if reading not in readings:
                readings.append(reading)
            return value

        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(Reading, "read", record)
            BY_KEY[engine].judge(spec, target)
        self.problems = [p for r in readings for p in r.problems]
        self.verdict = judge_readers(spec, target)[engine]


@pytest.fixture(scope="module")
def cases(fixtures_root: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Every draft our tool reads (a draft it refuses outright, DF0xx, has no row to judge)."""
    out: dict[str, dict[str, Any]] = {}
    made = variants(fixtures_root, tmp_path_factory.mktemp("variants"))
    for name, (folder, tfolder) in {**drafts(fixtures_root), **made}.items():
        try:
            spec = read_draft_spec(LocalSource(folder))
            target = read_target_spec(LocalSource(tfolder))
        except DFlashCkptError:
            continue
        out[name] = {"spec": spec, "target": target,
                     "job": {"config": spec.native.raw if spec.native is not None else spec.config,
                             "target_layers": as_int(target.num_hidden_layers), "target": str(tfolder)}}
    assert len(out) > 60, sorted(out)
    return out


def judged(judge: Judge, cases: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return judge.run({name: c["job"] for name, c in cases.items()})


def disagreements(engine: str, judge: Judge, cases: dict[str, dict[str, Any]]) -> list[str]:
    """Every (draft, field) where our row for ``engine`` says other than the engine's parser."""
    results = judged(judge, cases)
    out: list[str] = []
    for name, case in cases.items():
        got, spec = results[name], case["spec"]
        if BY_KEY[engine].path(spec).dspark:
            continue  # its DSpark path has a parser of its own (SGLang: dspark_components/dspark_config.py)
        ours = Ours(engine, spec, case["target"])
        if got["raises"]:
            named = any(re.search(p, got["raises"]) and text in ours.verdict.reason
                        for p, text in NAMED_RAISES.get(engine, ()))
            if ours.verdict.loads and not named:
                out.append(f"{name}: it raises {got['raises']!r}, our row says {ours.verdict.reason!r}")
            continue
        for problem in ours.problems:
            if not any(re.search(p, problem) for p, _ in STRICTER[engine]):
                out.append(f"{name}: it loads it, our reader fails it: {problem!r}")
        out += [f"{name}: {m}" for m in field_mismatches(engine, spec, ours, got)]
    return out


def field_mismatches(engine: str, spec: DraftSpec, ours: Ours, got: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for key, theirs in (("block_size", got.get("block_size")), ("mask_token_id", got.get("mask_token_id"))):
        mine = ours.values.get(key)
        if mine is not None and theirs is not None and mine != theirs:
            out.append(f"{key}: engine {theirs}, our row {mine}")
    taps = ours.values.get("target_layer_ids")
    if taps is not None and engine == "speculators" and got.get("converted"):
        depth = ours.depth
        # its converter leaves out a tap on the verifier's last layer (converter.py _build_config)
        taps = [t for t in taps if depth is None or t + 1 != depth]
    if taps is not None:
        if engine == "exllamav3":
            shift, _ = exl3_row.tap_shift(spec)
            mine = [t + shift for t in taps] if spec.family != LAGUNA else list(taps)
            if mine != got["export_ids"] or (shift != got["tap_shift"] and spec.family != LAGUNA):
                out.append(f"exllamav3 export ids {got['export_ids']} (tap_shift {got['tap_shift']}), our row "
                           f"{mine} (tap_shift {shift})")
        elif got.get("taps") is not None and list(taps) != got["taps"] and not any(
                f"{[t + 1 for t in got['taps']]} overrides the taps" in p for p in ours.problems):
            out.append(f"taps: engine {got['taps']}, our row {taps}")
    if engine == "vllm":
        out += vllm_mismatches(spec, ours, got)
    if engine == "speculators" and got.get("anchor_first") is not None and spec.family != DSPARK:
        ran = re.search(r"runs it (anchor-first|1\+N)", speculators_row.path(spec).why)
        theirs = ANCHOR_FIRST if got["anchor_first"] else ONE_PLUS_N
        if ran is None or ran.group(1) != theirs:
            out.append(f"speculators {'converts it to' if got['converted'] else 'reads'} sample_from_anchor "
                       f"{got['anchor_first']}, our path says {speculators_row.path(spec).why!r}")
    return out


def vllm_mismatches(spec: DraftSpec, ours: Ours, got: dict[str, Any]) -> list[str]:
    """vLLM's per-layer causality against the trained one, where our row says how they differ
    (DF173: full layers run causal, sliding layers run bidirectional); its anchor-first refusal
    against our path."""
    out: list[str] = []
    if spec.family != DSPARK:
        refuses = vllm_row.path(spec).status == REFUSES
        if refuses != got["refuses_anchor_first"]:
            out.append(f"vLLM {'refuses' if got['refuses_anchor_first'] else 'runs'} a declared anchor-first draft, "
                       f"our path says {vllm_row.path(spec).why!r}")
    if got.get("taps_v2") != got.get("taps") and "V2" not in ours.verdict.reason:
        out.append(f"vLLM's V1 runner taps {got.get('taps')}, its V2 runner {got.get('taps_v2')}; our row does not say "
                   f"which: {ours.verdict.reason!r}")
    causal = got.get("causal")
    if causal is None or not ours.verdict.loads:
        return out
    try:
        trained = DraftSettings.from_spec(spec)
    except DFlashCkptError:
        return out
    flipped = sum(1 for i, c in enumerate(causal) if c != trained.layer_causal(i))
    named = causal_override(spec) + absent_key_sliding(spec) + vllm_row.nested_causal_layers(spec)
    if flipped != named:
        out.append(f"vLLM runs layers causal {causal}, trained {[trained.layer_causal(i) for i in range(len(causal))]}; "
                   f"our row names {named} layer(s) run otherwise")
    return out


@pytest.mark.parametrize("engine", sorted(WHEELS))
def test_engine_parser_agrees_with_our_row(engine: str, cases: dict[str, dict[str, Any]]) -> None:
    judge, why = fetch(engine)
    if judge is None:
        pytest.skip(why)
    bad = disagreements(engine, judge, cases)
    assert not bad, f"{judge.name} disagrees with our {engine} row on {len(bad)}:\n" + "\n".join(bad)


def test_speculators_parser_agrees_with_our_row(cases: dict[str, dict[str, Any]]) -> None:
    judge, why = speculators_judge()
    if judge is None:
        pytest.skip(why)
    bad = disagreements("speculators", judge, cases)
    assert not bad, f"{judge.name} disagrees with our speculators row on {len(bad)}:\n" + "\n".join(bad)


@pytest.mark.vllm
def test_vllm_parser_agrees_with_our_row(cases: dict[str, dict[str, Any]]) -> None:
    judge, why = vllm_judge()
    if judge is None:
        pytest.skip(why)
    bad = disagreements("vllm", judge, cases)
    assert not bad, f"{judge.name} disagrees with our vllm row on {len(bad)}:\n" + "\n".join(bad)
