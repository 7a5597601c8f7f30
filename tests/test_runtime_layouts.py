"""The block-layout switch in the reference runtime (issue 26, item 2): one switch, every loop.

1+N drafts from block slots 1..B-1 and verifies B tokens; anchor-first drafts from slots 0..B-1
and verifies B+1. Whatever the layout, greedy DFlash must give the target's own greedy output,
on the eager path, the static path and the probe's simulation alike; and tap -1 reads the
embedding output on both backends.
"""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import pytest
import torch

import tiny_models as tm
from dflash_ckpt.draftspec.specs import target_from_config
from dflash_ckpt.draftspec.layout import ANCHOR_FIRST, ONE_PLUS_N, BlockLayout
from dflash_ckpt.runtime.generate import decode
from loop_oracles import dflash_decode, static_dflash
from dflash_ckpt.runtime.probe import measure, record
from dflash_ckpt.runtime.probe_layout import reading_layout
from dflash_ckpt.runtime.static import StaticRunner

PROMPT = [1, 87, 85, 263, 201, 74, 75, 2, 1, 30, 40, 50, 60]

pytestmark = pytest.mark.usefixtures("one_thread")


def oracle(full: list[int], corrupt: float = 0.0, seed: int = 0):
    rng = random.Random(seed)

    def proposer(start: int, anchor: int, k: int) -> list[int]:
        assert anchor == full[start]
        out = []
        for j in range(k):
            tok = full[start + 1 + j] if start + 1 + j < len(full) else 0
            out.append((tok + 1) % tm.VOCAB if rng.random() < corrupt else tok)
        return out

    return proposer


@pytest.mark.parametrize("layout", [ONE_PLUS_N, ANCHOR_FIRST])
def test_an_oracle_fills_every_draft_slot_of_the_layout(fp32, layout: str) -> None:
    """B-1 drafts a step for 1+N, B anchor-first: a perfect proposer yields B or B+1 tokens a step."""
    target, draft, tc, dc = fp32
    ref = decode(target, PROMPT, max_new_tokens=120, cache=tc)
    full = PROMPT + ref.tokens
    block = draft.args.block_size
    with reading_layout(draft, layout):
        got = dflash_decode(target, draft, PROMPT, max_new_tokens=120, target_cache=tc, draft_cache=dc,
                            proposer=oracle(full), block_size=draft.args.block_size)
    width = block + 1 if layout == ANCHOR_FIRST else block
    assert got.tokens == ref.tokens
    assert got.acceptance_lengths[:-1] == [width] * (len(got.acceptance_lengths) - 1)
    assert max(got.acceptance_lengths) == width


@pytest.mark.parametrize("layout", [ONE_PLUS_N, ANCHOR_FIRST])
@pytest.mark.parametrize("corrupt", [0.0, 0.2])
def test_static_path_equals_eager_path_in_both_layouts(fp32, layout: str, corrupt: float) -> None:
    """The static runner (fixed shapes, state on the device) and the eager loop: same tokens, same
    acceptance lengths, for an oracle with wrong tokens and for the (random) draft itself."""
    target, draft, tc, dc = fp32
    ref = decode(target, PROMPT, max_new_tokens=100, cache=tc)
    full = PROMPT + ref.tokens
    with reading_layout(draft, layout):
        runner = StaticRunner(target, draft, 256, block_size=draft.args.block_size)
        assert runner.width == draft.args.block_size + (layout == ANCHOR_FIRST)
        for make in (lambda: oracle(full, corrupt, 1), lambda: None):  # a fresh proposer per run: it draws
            eager = dflash_decode(target, draft, PROMPT, max_new_tokens=100, target_cache=tc, draft_cache=dc,
                                  proposer=make(), block_size=draft.args.block_size)
            static = static_dflash(runner, PROMPT, max_new_tokens=100, proposer=make())
            assert eager.tokens == static.tokens == ref.tokens
            assert eager.acceptance_lengths == static.acceptance_lengths


def test_the_probe_simulation_replays_the_anchor_first_loop(fp32) -> None:
    """probe's ``simulate`` under the layout switch gives the loop's acceptance lengths (fp32)."""
    target, draft, tc, dc = fp32
    rec = record(target, PROMPT, depth=target.args.dims.num_hidden_layers, max_new_tokens=60, cache=tc)
    taps = list(draft.args.target_layer_ids)
    for layout in (ONE_PLUS_N, ANCHOR_FIRST):
        with reading_layout(draft, layout):
            m = measure(draft, [rec], taps, embed_w=target.embed_tokens.weight, head_w=target.lm_head.weight,
                        draft_cache=dc, block_size=draft.args.block_size)
            loop = dflash_decode(target, draft, PROMPT, max_new_tokens=60, target_cache=tc, draft_cache=dc, block_size=draft.args.block_size)
        assert loop.tokens == rec.tokens
        assert m.acceptance_lengths == loop.acceptance_lengths, layout


def test_anchor_first_uses_slot_zero_and_one_position_more(fp32, monkeypatch: pytest.MonkeyPatch) -> None:
    """Anchor-first sends slots 0..B-1 through the head and verifies B+1 tokens; 1+N slots 1..B-1, B."""
    target, draft, tc, dc = fp32
    seen: list[tuple[int, int]] = []
    real_pick, real_call = draft.pick_tokens, type(target).__call__

    def pick(hidden, head_w, anchor):
        seen.append(("drafts", hidden.shape[1]))
        return real_pick(hidden, head_w, anchor)

    def call(self, ids, **kw):
        if kw.get("logits") == "all" and kw.get("taps"):
            seen.append(("verify", ids.shape[1]))
        return real_call(self, ids, **kw)

    monkeypatch.setattr(draft, "pick_tokens", pick)
    monkeypatch.setattr(type(target), "__call__", call)
    b = draft.args.block_size
    for layout, drafts in ((ONE_PLUS_N, b - 1), (ANCHOR_FIRST, b)):
        seen.clear()
        with reading_layout(draft, layout):
            dflash_decode(target, draft, PROMPT, max_new_tokens=40, target_cache=tc, draft_cache=dc, block_size=draft.args.block_size)
        assert seen[0] == ("drafts", drafts) and seen[1] == ("verify", drafts + 1), layout


def test_the_layout_comes_from_the_config_and_the_override(pair: tuple[Path, Path]) -> None:
    import json

    from dflash_ckpt.draftspec.specs import build_spec
    from dflash_ckpt.draftspec.draft_settings import DraftSettings
    from dflash_ckpt.runtime.plan import with_layout

    draft_dir, _ = pair
    cfg = json.loads((draft_dir / "config.json").read_text())
    plain = DraftSettings.from_spec(build_spec(cfg, label="d", where="d/config.json"))
    assert plain.block_layout.layout == ONE_PLUS_N and plain.block_layout.verify_width(8) == 8
    cfg["dflash_config"] = {**cfg["dflash_config"], "sample_from_anchor": True}
    af = DraftSettings.from_spec(build_spec(cfg, label="d", where="d/config.json"))
    assert af.block_layout.layout == ANCHOR_FIRST and af.block_layout.source == "dflash_config.sample_from_anchor"
    assert af.block_layout.verify_width(8) == 9
    assert with_layout(af, ONE_PLUS_N).block_layout == BlockLayout(ONE_PLUS_N, "--layout", {})
    assert with_layout(af, None) is af


# -- tap -1: the embedding output -------------------------------------------------------------


def test_tap_minus_one_is_the_embedding_output_on_the_native_target(fp32) -> None:
    target, _, tc, _ = fp32
    ids = torch.tensor([PROMPT])
    tc.reset()
    out = target(ids, cache=tc, taps=[-1, 1], logits="none")
    h = target.args.dims.hidden_size
    assert torch.equal(out.features[0, :, :h], target.embed_tokens.weight[ids[0]])
    tc.reset()
    assert torch.equal(out.features[..., h:], target(ids, cache=tc, taps=[1], logits="none").features)


def test_tap_minus_one_agrees_between_the_backends(pair: tuple[Path, Path]) -> None:
    pytest.importorskip("transformers")
    import json

    from dflash_ckpt.runtime.hf_target import hf_target_info, load_hf_target
    from dflash_ckpt.runtime.loading import inventory

    _, target_dir = pair
    native, _ = tm.load_runtime_pair(*pair)
    info = hf_target_info(target_from_config(json.loads((target_dir / "config.json").read_text()), label="t", where=str(target_dir / "config.json")))
    hf = load_hf_target(target_dir, info, dtype=torch.float32, device=torch.device("cpu"),
                        tensor_names=list(inventory(target_dir, str(target_dir)).tensors))
    ids = torch.tensor([PROMPT])
    nc, hc = native.new_cache(64), hf.new_cache(64)
    a = native(ids, cache=nc, taps=[-1, 2], logits="none").features
    b = hf(ids, cache=hc, taps=[-1, 2], logits="none").features
    h = native.args.dims.hidden_size
    assert torch.equal(b[0, :, :h], native.embed_tokens.weight[ids[0]])
    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


def test_a_draft_tapping_minus_one_decodes_losslessly(fp32) -> None:
    target, draft, tc, dc = fp32
    taps = (-1,) + tuple(draft.args.target_layer_ids[1:])
    ref = decode(target, PROMPT, max_new_tokens=60, cache=tc)
    before = draft.args
    draft.args = dataclasses.replace(before, target_layer_ids=taps)
    try:
        eager = dflash_decode(target, draft, PROMPT, max_new_tokens=60, target_cache=tc, draft_cache=dc, block_size=draft.args.block_size)
        static = StaticRunner(target, draft, 256, block_size=draft.args.block_size).dflash(PROMPT, max_new_tokens=60)
    finally:
        draft.args = before
    assert eager.tokens == static.tokens == ref.tokens
    assert eager.acceptance_lengths == static.acceptance_lengths


@pytest.mark.slow
def test_smoke_run_accepts_a_draft_tapping_the_embedding_output(cli, tmp_path: Path, pair: tuple[Path, Path]) -> None:
    """DeepSpec drafts tap -1: inspect's range check (DF114) lets it through and the run is lossless
    on both layouts; the JSON says which layout ran."""
    from conftest import smoke

    _, target = pair
    draft = tm.make_draft(tmp_path / "d", taps=(-1, 2, 4))
    for extra, layout, source in (((), ONE_PLUS_N, "default"), (("--layout", "anchor-first"), ANCHOR_FIRST, "--layout")):
        res = smoke(cli, (str(draft), str(target)), "-n", "24", "--draft-dtype", "float32", "--min-acceptance", "0",
                    "--json", *extra)
        assert res.code == 0, res.stderr
        doc = res.merged()
        assert not [f for f in doc["precheck"] if f["code"] == "DF114"]
        s = doc["settings"]
        assert (s["layout"], s["layout_source"], s["verify_width"]) == (layout, source, 8 + (layout == ANCHOR_FIRST))
        assert all(p["lossless"]["status"] == "identical" for p in doc["prompts"])
        assert ("DF418" in {f["code"] for f in doc["findings"]}) == (source == "--layout")
    bad = tm.make_draft(tmp_path / "bad", taps=(-2, 2, 4))
    res = cli("inspect", str(bad), "--json")
    assert res.code == 1 and "DF114" in {f["code"] for f in res.result()["findings"]}
