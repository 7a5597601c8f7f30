"""Property tests: configs generated in any layout and any JSON style.

For every generated draft config (each DFlash key nested, at the top level, in both places, in
conflict, or missing; scaling keys likewise; extra keys; shuffled key order; 2/4-space, tab or
one-line JSON, CRLF, escaped or raw unicode, with or without a trailing newline):
- resolving the normalized config gives what resolving the original gave (conflicts as
  ``--prefer`` chose, missing keys as the overrides supplied);
- normalization is idempotent, byte for byte;
- no key is lost, no other key changes value, the original key order is kept, and every member
  the plan did not touch keeps its exact text.
The planner and text layer are exercised directly (many examples), and the whole command through
the CLI on drafts with real safetensors headers (fewer examples).
"""

from __future__ import annotations

import copy
import json
import random
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import make_fixtures
from normalize_support import resolved

from dflash_ckpt.canonical.config_text import ConfigText, parse_object
from dflash_ckpt.canonical.plan import PREFER_NESTED, Overrides, plan_normalize
from dflash_ckpt.draftspec.specs import DFLASH_KEYS, SCALING_KEYS

PLACES = ("nested", "top", "both", "conflict", "missing")
SCALE_PLACES = ("absent", "nested", "top", "both", "conflict", "top-null")
DIMS = {k: v for k, v in make_fixtures.SMALL_DRAFT.items() if k not in (*DFLASH_KEYS, "dflash_config", "layer_types")}

json_leaf = st.one_of(
    st.none(), st.booleans(), st.integers(-10**12, 10**12),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=8),
)
json_value = st.recursive(json_leaf, lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3), max_leaves=6)
extra_keys = st.dictionaries(st.from_regex(r"x_[a-z]{1,6}", fullmatch=True), json_value, max_size=4)


@st.composite
def drafts(draw: Any) -> dict[str, Any]:
    """A config, the values a canonical form must resolve to, and the options that get there."""
    k = draw(st.integers(1, 4))
    depth = draw(st.integers(k + 1, 40))
    ids = sorted(draw(st.lists(st.integers(0, depth - 1), min_size=k, max_size=k, unique=True)))
    truth = {
        "block_size": draw(st.integers(2, 32)),
        "mask_token_id": draw(st.integers(0, 1023)),
        "target_layer_ids": ids,
        "num_target_layers": depth,
    }
    other = {
        "block_size": truth["block_size"] + draw(st.integers(1, 8)),
        "mask_token_id": (truth["mask_token_id"] + draw(st.integers(1, 500))) % 1024,
        "target_layer_ids": sorted(draw(st.lists(st.integers(0, depth - 1), min_size=k, max_size=k, unique=True).filter(lambda x: sorted(x) != ids))) if depth - 1 >= k else ids,
        "num_target_layers": depth + draw(st.integers(1, 5)),
    }
    prefer = draw(st.sampled_from(["nested", "top-level"]))
    top: dict[str, Any] = dict(DIMS)
    nested: dict[str, Any] = {}
    overrides: dict[str, Any] = {}
    expected: dict[str, Any] = {}
    for key in DFLASH_KEYS:
        place = draw(st.sampled_from(PLACES))
        if place == "conflict" and same(other[key], truth[key]):
            place = "both"
        if place in ("nested", "both"):
            nested[key] = truth[key]
        if place in ("top", "both"):
            top[key] = truth[key]
        if place == "conflict":
            nested[key], top[key] = (truth[key], other[key]) if prefer == PREFER_NESTED else (other[key], truth[key])
        if place == "missing":
            overrides[key] = truth[key]
        expected[key] = truth[key]
    for key in SCALING_KEYS:
        place = draw(st.sampled_from(SCALE_PLACES))
        a, b = draw(st.sampled_from([30.0, 0.5, 2])), draw(st.sampled_from([1.25, 7, 50.0]))
        if place in ("nested", "both"):
            nested[key] = a
        if place in ("top", "both"):
            top[key] = a
        if place == "conflict":
            nested[key], top[key] = a, b
        if place == "top-null":
            top[key] = None
    top.update(draw(extra_keys))
    nested.update(draw(extra_keys))
    if draw(st.booleans()):
        top["layer_types"] = ["full_attention"] * DIMS["num_hidden_layers"]
    else:
        top["use_sliding_window"] = draw(st.sampled_from([False, "absent"]))
        if top["use_sliding_window"] == "absent":
            del top["use_sliding_window"]
            top["sliding_window"] = None
    if nested or draw(st.booleans()):
        top["dflash_config"] = nested
    rnd = random.Random(draw(st.integers(0, 2**32)))
    items = list(top.items())
    rnd.shuffle(items)
    config = dict(items)
    if isinstance(config.get("dflash_config"), dict):
        n_items = list(config["dflash_config"].items())
        rnd.shuffle(n_items)
        config["dflash_config"] = dict(n_items)
    style = draw(st.sampled_from([{"indent": 2}, {"indent": 4}, {"indent": "\t"}, {}, {"separators": (",", ":")}, {"indent": 2, "separators": (",", " : ")}]))
    fmt = {**style, "ensure_ascii": draw(st.booleans()), "newline": draw(st.booleans()), "crlf": "indent" in style and draw(st.booleans())}
    text = dump(config, fmt)
    return {
        "fmt": fmt,
        "config": config,
        "raw": text.encode(),
        "expected": expected,
        "prefer": prefer,
        "mirrors": draw(st.booleans()),
        "overrides": overrides,
        "k": k,
    }


def dump(config: dict[str, Any], fmt: dict[str, Any]) -> str:
    """``config`` as ``json.dumps`` writes it in style ``fmt`` (plus newline and CRLF choices)."""
    kw = {k: v for k, v in fmt.items() if k in ("indent", "separators", "ensure_ascii")}
    text = json.dumps(config, **kw) + ("\n" if fmt["newline"] else "")
    return text.replace("\n", "\r\n") if fmt["crlf"] else text


def same(a: Any, b: Any) -> bool:
    return json.dumps(a) == json.dumps(b)


def normalize_text(raw: bytes, **kw: Any) -> tuple[bytes, Any]:
    config = json.loads(raw)
    plan = plan_normalize(config, **kw)
    return ConfigText(raw, "config.json").render(plan.edits, plan.after), plan


def check_lossless(original: dict[str, Any], new: dict[str, Any], mirrors: bool, prefer: str) -> None:
    """No key lost, none changed but the DFlash/scaling keys, original order kept."""
    for key, value in original.items():
        if key in DFLASH_KEYS and not mirrors:
            assert key not in new
            continue
        assert key in new, key
        if key not in (*DFLASH_KEYS, *SCALING_KEYS, "dflash_config", "layer_types"):
            assert same(new[key], value), key
    assert [k for k in new if k in original] == [k for k in original if k in new]
    nested_before = original.get("dflash_config") if isinstance(original.get("dflash_config"), dict) else {}
    nested_after = new["dflash_config"]
    for key, value in nested_before.items():
        assert key in nested_after, key
        if key not in (*DFLASH_KEYS, *SCALING_KEYS):
            assert same(nested_after[key], value), key
    assert [k for k in nested_after if k in nested_before] == list(nested_before)
    for key in SCALING_KEYS:
        top, nst = original.get(key), nested_before.get(key, "absent")
        if nst != "absent" and top is not None and key in original and not same(top, nst):
            want = nst if prefer == PREFER_NESTED else top
        elif nst != "absent":
            want = nst
        elif top is not None:
            want = top
        else:
            assert key not in nested_after
            continue
        assert same(nested_after[key], want), key


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(drafts())
def test_plan_and_text_properties(d: dict[str, Any]) -> None:
    kw = {"prefer": d["prefer"], "mirrors": d["mirrors"], "overrides": Overrides(**d["overrides"])}
    raw = d["raw"]
    new_raw, plan = normalize_text(raw, **kw)
    new = json.loads(new_raw)
    assert same(new, plan.after)  # the text says what the plan says, key order included
    assert resolved(new) == d["expected"]
    check_lossless(d["config"], new, d["mirrors"], d["prefer"])
    # canonical shape
    for key in ("block_size", "mask_token_id", "num_target_layers", "target_layer_ids"):
        assert same(new["dflash_config"][key], d["expected"][key])
    if d["mirrors"]:
        assert new["block_size"] == new["dflash_config"]["block_size"]
        assert new["num_target_layers"] == new["dflash_config"]["num_target_layers"]
    # style: trailing newline and line endings kept, members not edited keep their exact text
    text, new_text = raw.decode(), new_raw.decode()
    assert text.endswith("\n") == new_text.endswith("\n")
    assert ("\r\n" in text) == ("\r\n" in new_text) or "\n" not in text
    touched = {c.path.split(".")[0] for c in plan.changes}
    top = parse_object(text, 0)
    for m in top.members:
        if m.key not in touched:
            member_text = text[m.key_start:m.value_end]
            assert member_text in new_text, m.key
    # a file in json.dumps style comes out exactly as json.dumps writes the result in that style
    assert new_text == dump(plan.after, d["fmt"])
    # idempotent, byte for byte, with the same options and no overrides needed any more
    again_raw, again = normalize_text(new_raw, prefer=None, mirrors=d["mirrors"])
    assert not again.changed and again_raw == new_raw


@pytest.mark.slow
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(drafts())
def test_cli_properties(cli: Any, d: dict[str, Any]) -> None:
    """The same properties through the command, on folders with real safetensors headers."""
    with tempfile.TemporaryDirectory() as tmp:
        draft = Path(tmp) / "draft"
        draft.mkdir()
        (draft / "config.json").write_bytes(d["raw"])
        full = {**copy.deepcopy(make_fixtures.SMALL_DRAFT), "dflash_config": {"target_layer_ids": d["expected"]["target_layer_ids"]}}
        make_fixtures.write_safetensors(draft / "model.safetensors", make_fixtures.draft_tensors(full))
        args = ["normalize", str(draft), str(Path(tmp) / "out"), "--json", "--prefer", d["prefer"]]
        if not d["mirrors"]:
            args.append("--no-mirrors")
        for key, value in d["overrides"].items():
            args += ["--" + key.replace("_", "-"), ",".join(map(str, value)) if isinstance(value, list) else str(value)]
        res = cli(*args)
        assert res.code == 0, res.stdout + res.stderr
        doc = res.merged()
        new = json.loads((Path(tmp) / "out" / "config.json").read_bytes())
        assert resolved(new) == d["expected"] == doc["resolved_after"]
        check_lossless(d["config"], new, d["mirrors"], d["prefer"])
        if d["mirrors"]:
            assert all(v["loads"] for v in doc["readers_after"].values()), doc["readers_after"]
        assert (draft / "config.json").read_bytes() == d["raw"]
        check = cli("normalize", str(Path(tmp) / "out"), "--check", *([] if d["mirrors"] else ["--no-mirrors"]))
        assert check.code == 0, check.stdout + check.stderr


@pytest.mark.parametrize("use,window,expected", [
    (False, None, "full"), (False, 4096, "full"), ("absent", None, "full"), ("absent", "absent", "full"),
    (True, 4096, None), (True, None, None), ("absent", 4096, None), (None, 4096, None),
])
def test_layer_types_derivation_cases(use: Any, window: Any, expected: str | None) -> None:
    from dflash_ckpt.draftspec.layer_kinds import derive_layer_kinds, layer_kind_keys

    cfg: dict[str, Any] = {"num_hidden_layers": 3}
    if use != "absent":
        cfg["use_sliding_window"] = use
    if window != "absent":
        cfg["sliding_window"] = window
    got, why = derive_layer_kinds(*layer_kind_keys(cfg))
    assert (got == ["full_attention"] * 3) if expected == "full" else (got is None and why)
