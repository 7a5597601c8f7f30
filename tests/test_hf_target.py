"""The transformers backend (runtime/hf_target.py) on tiny random targets of every published family.

Each family's target is built with transformers' own classes and written by ``save_pretrained``
(tests/hf_tiny.py), then loaded through the adapter. What is checked:
- loading: the adapter's logits equal those of the model that wrote the checkpoint (all weights
  arrived, wrappers' text prefixes renamed, nothing random-initialised);
- rollback: after a prefill, a verify pass of a block and a crop keeping ``k`` of its tokens, the
  next forward gives the logits and tap features of a clean prefill of the same tokens, for
  ``k`` = 0 (all rejected), 3 and 8 (all kept), within 1e-4 in fp32 (summation order differs
  between one long prefill and prefill + block + token; observed differences are ~1e-5);
- decoding: DFlash through the generic loop gives exactly the target's own greedy output whatever
  the proposals are (random tokens, and an oracle right half the time).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("transformers")

import hf_tiny  # noqa: E402
import tiny_models as tm  # noqa: E402
from dflash_ckpt.draftspec.specs import target_from_config  # noqa: E402
from dflash_ckpt.runtime.generate import decode  # noqa: E402
from loop_oracles import dflash_decode  # noqa: E402
from dflash_ckpt.runtime.hf_target import hf_target_info, load_hf_target  # noqa: E402
from dflash_ckpt.runtime.loading import inventory, load_draft  # noqa: E402
from dflash_ckpt.runtime.memory import needed_bytes  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

FAMILIES = list(hf_tiny.BUILDERS) + ["kimi_k25"]
TOL = 1e-4
TAPS = [0, 2, 3]  # 3 is the last layer: its tap is the final norm's output
PROMPT_LEN = 20  # longer than hf_tiny.WINDOW: sliding layers have dropped positions by then
BLOCK = 8


def load(folder: Path) -> Any:
    info = hf_target_info(target_from_config(json.loads((folder / "config.json").read_text()), label="t", where=str(folder / "config.json")))
    inv = inventory(folder, str(folder))
    return load_hf_target(folder, info, dtype=torch.float32, device=torch.device("cpu"), tensor_names=list(inv.tensors))


@pytest.fixture(scope="module")
def targets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Any, Any]]:
    """family -> (folder, loaded adapter, the transformers model that wrote it or None)."""
    root = tmp_path_factory.mktemp("hf")
    out: dict[str, tuple[Path, Any, Any]] = {}
    for fam in FAMILIES:
        if fam == "kimi_k25":
            folder = hf_tiny.make_kimi_target(root / fam)
            model = None
        else:
            model = hf_tiny.build(fam)
            folder = hf_tiny.make_hf_target(root / fam, fam, model=model)
        out[fam] = (folder, load(folder), model)
    return out


def ids(seed: int, n: int) -> torch.Tensor:
    return torch.randint(5, 300, (1, n), generator=torch.Generator().manual_seed(seed))


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_loaded_weights_are_the_checkpoints(targets, family: str) -> None:
    folder, target, model = targets[family]
    x = ids(0, 12)
    got = target(x, cache=target.new_cache(), logits="all").logits
    if model is None:  # kimi_k25: the DeepSeek-V3 checkpoint it was renamed from
        src = load(folder.with_name(folder.name + "-src"))
        want = src(x, cache=src.new_cache(), logits="all").logits
    else:
        with torch.no_grad():
            want = model(input_ids=x).logits
    assert got.shape == (1, 12, hf_tiny.VOCAB)
    assert torch.allclose(got, want, atol=1e-5, rtol=0), (got - want).abs().max()
    assert target.embed_tokens.weight.shape == (hf_tiny.VOCAB, 64)
    assert target.lm_head.weight.shape == (hf_tiny.VOCAB, 64)


@pytest.mark.slow
@pytest.mark.parametrize("keep", [0, 3, BLOCK])
@pytest.mark.parametrize("family", FAMILIES)
def test_rollback_then_next_token_equals_a_clean_prefill(targets, family: str, keep: int) -> None:
    _, target, _ = targets[family]
    prompt, block, nxt = ids(1, PROMPT_LEN), ids(2, BLOCK), ids(3, 1)
    cache = target.new_cache()
    target(prompt, cache=cache, taps=TAPS, logits="last")
    target(block, cache=cache, taps=TAPS, logits="all")
    cache.crop(PROMPT_LEN + keep)
    assert cache.length == PROMPT_LEN + keep
    step = target(nxt, cache=cache, taps=TAPS, logits="last")
    clean = target(torch.cat([prompt, block[:, :keep], nxt], dim=1), cache=target.new_cache(), taps=TAPS, logits="all")
    assert step.features.shape == (1, 1, 3 * 64)
    assert (step.logits[0, -1] - clean.logits[0, -1]).abs().max() < TOL
    assert (step.features[0, -1] - clean.features[0, -1]).abs().max() < TOL
    # A second block after the rollback still lines up (the cache is not left half-restored).
    block2 = ids(4, BLOCK)
    cache2_out = target(block2, cache=cache, taps=TAPS, logits="all")
    cache.crop(cache.length - BLOCK + 2)
    after = target(nxt, cache=cache, taps=TAPS, logits="last")
    seq = torch.cat([prompt, block[:, :keep], nxt, block2[:, :2], nxt], dim=1)
    ref = target(seq, cache=target.new_cache(), taps=TAPS, logits="all")
    assert (after.logits[0, -1] - ref.logits[0, -1]).abs().max() < TOL
    assert (cache2_out.features[0, 1] - ref.features[0, -2]).abs().max() < TOL


def test_linear_attention_rollback_replays_and_sliding_layers_pass_the_window(targets) -> None:
    """The two rollback methods are really exercised: Gated DeltaNet layers restore and replay
    (a plain crop would leave the rejected tokens in the recurrent state), sliding layers hold
    fewer positions than the sequence after a crop."""
    from transformers.cache_utils import DynamicSlidingWindowLayer, LinearAttentionCacheLayerMixin

    _, target, _ = targets["qwen3_next"]
    cache = target.new_cache()
    assert any(isinstance(layer, LinearAttentionCacheLayerMixin) for layer in cache.inner.layers)
    target(ids(1, PROMPT_LEN), cache=cache, logits="last")
    target(ids(2, BLOCK), cache=cache, logits="all")
    cache.crop(PROMPT_LEN + 3)
    assert cache.replays == 1
    target(ids(3, 1), cache=cache, logits="last")  # one token: nothing to roll back, no snapshot
    with pytest.raises(RuntimeError, match="multi-token forward"):
        cache.crop(PROMPT_LEN + 3)  # behind the last snapshot: refused, not silently wrong

    _, oss, _ = targets["gpt_oss"]
    cache = oss.new_cache()
    oss(ids(1, PROMPT_LEN), cache=cache, logits="last")
    oss(ids(2, BLOCK), cache=cache, logits="all")
    cache.crop(PROMPT_LEN + 2)
    sliding = [layer for layer in cache.inner.layers if isinstance(layer, DynamicSlidingWindowLayer)]
    assert sliding and all(layer.keys.shape[-2] == hf_tiny.WINDOW - 1 for layer in sliding)


@pytest.fixture(scope="module")
def draft(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A random-init DFlash draft reading layers 0, 2, 3 of a 4-layer, hidden-64 target."""
    from dflash_ckpt.draftspec.draft_settings import DraftSettings
    from dflash_ckpt.sources.local import LocalSource
    from dflash_ckpt.draftspec.specs import read_draft_spec as read_draft

    folder = tm.make_draft(tmp_path_factory.mktemp("draft") / "d", hidden=64, taps=TAPS, num_target_layers=4,
                           block_size=BLOCK)
    return load_draft(folder, DraftSettings.from_spec(read_draft(LocalSource(folder))), dtype=torch.float32,
                      device=torch.device("cpu"))


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_dflash_output_is_the_targets_greedy_output_whatever_is_proposed(targets, draft, family: str) -> None:
    _, target, _ = targets[family]
    prompt = ids(5, 14).tolist()[0]
    n = 40
    ref = decode(target, prompt, max_new_tokens=n, cache=target.new_cache())
    assert len(ref.tokens) == n and len(set(ref.tokens)) > 3
    full = prompt + ref.tokens
    rng = random.Random(0)

    def half_right(start: int, anchor: int, k: int) -> list[int]:
        assert anchor == full[start]
        return [full[start + 1 + j] if start + 1 + j < len(full) and rng.random() < 0.5 else rng.randrange(300)
                for j in range(k)]

    def noise(start: int, anchor: int, k: int) -> list[int]:
        return [rng.randrange(300) for _ in range(k)]

    lengths = {}
    for name, proposer in (("draft", None), ("noise", noise), ("half", half_right)):
        got = dflash_decode(target, draft, prompt, max_new_tokens=n, target_cache=target.new_cache(),
                            draft_cache=draft.new_cache(256), proposer=proposer, block_size=draft.args.block_size)
        assert got.tokens == ref.tokens, name
        assert sum(got.acceptance_lengths) + 1 == n
        lengths[name] = got.acceptance_lengths
    assert max(lengths["half"]) > 1  # the oracle half is accepted, so rollbacks of every size happen
    assert len(lengths["half"]) < len(lengths["noise"])


def test_mxfp4_checkpoint_dequantizes_to_the_same_model(tmp_path: Path) -> None:
    """gpt-oss experts stored as MXFP4 blocks and scales load (dequantized on the CPU) into the same
    model as the plain checkpoint holding the same values; the memory estimate counts them dequantized."""
    plain, quant = hf_tiny.make_mxfp4_gpt_oss(tmp_path)
    a, b = load(plain), load(quant)
    x = ids(6, 24)
    la = a(x, cache=a.new_cache(), logits="all").logits
    lb = b(x, cache=b.new_cache(), logits="all").logits
    assert torch.allclose(la, lb, atol=1e-6, rtol=0)
    inv_p, inv_q = inventory(plain, "p"), inventory(quant, "q")
    assert any(k.endswith("_blocks") for k in inv_q.tensors)
    assert needed_bytes(inv_q.tensors, torch.bfloat16) == needed_bytes(inv_p.tensors, torch.bfloat16)
    assert hf_target_info(target_from_config(json.loads((quant / "config.json").read_text()), label="q", where="q")).mxfp4


@pytest.mark.parametrize("family", FAMILIES)
def test_taps_are_the_reference_hidden_states(targets, family: str) -> None:
    """The hooks give what the z-lab reference reads, ``hidden_states[i + 1]`` of transformers'
    own forward: decoder layer outputs, the final norm's output for the last layer."""
    _, target, _ = targets[family]
    x = ids(7, 10)
    feats = target(x, cache=target.new_cache(), taps=[0, 1, 2, 3], logits="none").features.view(1, 10, 4, 64)
    with torch.no_grad():
        hs = target.model(input_ids=x, output_hidden_states=True).hidden_states
    assert len(hs) == 5
    for i in range(4):
        assert torch.allclose(feats[0, :, i], hs[i + 1][0], atol=1e-6, rtol=0), (family, i)


#: How each transformers-backend family's cache rolls back, as docs/backends.md's table says:
#: ``crop`` (attention only), ``sliding`` (sliding-window layers, past recording) or ``linear``
#: (Gated DeltaNet layers: snapshot, restore and replay); every other family crops.
ROLLBACK = {"qwen3_next": "linear", "qwen3_5_text": "linear", "qwen3_5_moe_text": "linear", "gpt_oss": "sliding",
            "gemma4_text": "sliding"}


def test_each_family_rolls_back_as_the_families_table_says(targets) -> None:
    """docs/backends.md's table names the rollback method (``ROLLBACK``); the cache agrees."""
    from transformers.cache_utils import DynamicSlidingWindowLayer, LinearAttentionCacheLayerMixin

    from dflash_ckpt.draftspec.families import hf_family_of

    for fam, (folder, target, _) in targets.items():
        family = hf_family_of(json.loads((folder / "config.json").read_text()))
        assert family is not None, fam
        layers = target.new_cache().inner.layers
        linear = any(isinstance(layer, LinearAttentionCacheLayerMixin) for layer in layers)
        sliding = any(isinstance(layer, DynamicSlidingWindowLayer) for layer in layers)
        assert ROLLBACK.get(family.model_type, "crop") == ("linear" if linear else "sliding" if sliding else "crop"), fam


def test_gemma_embeddings_are_the_raw_table(targets) -> None:
    """gemma scales its embeddings by sqrt(hidden) inside the module; the draft gets the raw table
    (and applies its own input_embedding_scale), as the z-lab reference does."""
    _, target, _ = targets["gemma4"]
    x = ids(8, 5)
    raw = torch.nn.functional.embedding(x, target.embed_tokens.weight)
    assert torch.allclose(target.embed_tokens(x), raw * 64 ** 0.5, rtol=1e-5, atol=1e-5)


def test_readme_table_lists_every_family() -> None:
    from dflash_ckpt.draftspec.families import HF_FAMILIES

    readme = (Path(__file__).resolve().parents[1] / "docs" / "backends.md").read_text()  # README links it
    rows = [line for line in readme.splitlines() if line.startswith("| ") and "| transformers |" in line
            or line.startswith("| ") and "| native |" in line]
    for model_type, fam in HF_FAMILIES.items():
        names = {model_type, *fam.wrappers}
        assert any(any(f"`{n}`" in row for n in names) for row in rows), model_type
