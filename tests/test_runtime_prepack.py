"""Prepacked oneDNN weights (runtime/prepack.py, issue 28): the same values as torch's plain path.

What is held here: on the committed tiny pair, the packed path gives bit-identical logits,
features and tokens to the plain one (``--no-compile``, the oracle); the teacher-forced logits
stay within bf16 rounding of those the plain path gave before prepacking existed (a golden file
written by that tree, ``tests/golden/tiny_pair_logits.json``); a packed model holds each packed
weight once (the plain storage freed, the tied embedding table kept); ``unpack`` restores the
loaded weights exactly; a forward that wants gradients is refused with a clear error; and
smoke-run packs on a CPU by default and not with ``--no-compile``, with the same tokens.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from dflash_ckpt.draftspec.specs import read_draft_spec  # noqa: E402
from dflash_ckpt.draftspec.draft_settings import DraftSettings  # noqa: E402
from dflash_ckpt.draftspec.target_settings import TargetSettings  # noqa: E402
from dflash_ckpt.runtime.generate import teacher_forced_logits  # noqa: E402
from dflash_ckpt.runtime.loading import load_draft, load_target  # noqa: E402
from dflash_ckpt.runtime import cpu_kernel  # noqa: E402
from dflash_ckpt.runtime.prepack import PACKED, can_pack, is_packed, prepack, unpack  # noqa: E402
from dflash_ckpt.runtime.static import StaticRunner  # noqa: E402
from dflash_ckpt.sources.local import LocalSource  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PAIR = ROOT / "fixtures" / "tiny-pair"
GOLDEN = Path(__file__).parent / "golden" / "tiny_pair_logits.json"
PROMPT = [1, 5, 9, 33, 70, 101, 7, 44, 12, 250, 3, 17]
needs_onednn = pytest.mark.skipif(not can_pack(torch.empty(2, 2, dtype=torch.bfloat16)),
                                  reason="this torch has no oneDNN bf16 path")


def load_pair() -> tuple[Any, Any]:
    cfg = json.loads((PAIR / "target" / "config.json").read_text())
    target = load_target(PAIR / "target", TargetSettings.from_config(cfg, "t"), dtype=torch.bfloat16, device=torch.device("cpu"))
    dargs = DraftSettings.from_spec(read_draft_spec(LocalSource(PAIR / "draft")))
    draft = load_draft(PAIR / "draft", dargs, dtype=torch.bfloat16, device=torch.device("cpu"))
    return target, draft


def outputs(target: Any, draft: Any) -> dict[str, Any]:
    """Everything the decoding loops read from the pair: decode and DFlash tokens, the lossless
    check's logits, one verify's logits and tapped features."""
    runner = StaticRunner(target, draft, 160, block_size=draft.args.block_size)
    d = runner.decode(PROMPT, max_new_tokens=32)
    s = runner.dflash(PROMPT, max_new_tokens=32)
    with torch.inference_mode():
        logits = teacher_forced_logits(target, PROMPT, d.tokens, forward_all=runner.forward_all)
        eager = teacher_forced_logits(target, PROMPT, d.tokens)
        out = target(torch.tensor([PROMPT]), taps=list(draft.args.target_layer_ids), logits="all")
    return {"decode": d.tokens, "dflash": s.tokens, "logits": logits, "eager": eager,
            "verify_logits": out.logits, "features": out.features}


@pytest.mark.slow
@needs_onednn
def test_packed_path_is_bit_identical_to_the_plain_one() -> None:
    target, draft = load_pair()
    plain = outputs(target, draft)
    assert prepack(target) > 0 and prepack(draft) > 0
    assert is_packed(target) and is_packed(draft)
    packed = outputs(target, draft)
    assert packed["decode"] == plain["decode"] and packed["dflash"] == plain["dflash"]
    for key in ("logits", "eager", "verify_logits", "features"):
        assert torch.equal(packed[key], plain[key]), key


def bf16_ulp(value: float) -> float:
    """One unit in the last place of a bf16 number of ``value``'s size (8 significant bits)."""
    return 2.0 ** (torch.tensor(abs(value) or 1.0).log2().floor().item() - 7)


def agreeing_prefix(got: dict[str, Any], golden: dict[str, Any], path: str) -> int:
    """How many greedy positions to compare: all 32, or up to the one where the greedy choice
    parts from the golden file's at a near tie (the two tokens' golden logits within 2 bf16 ulps).
    A CPU without AVX-512 runs other bf16 kernels (seen here: an AVX2-only AMD EPYC parts at
    position 19, where the golden top-2 differ by one ulp); any other parting fails."""
    for pos, (tok, want) in enumerate(zip(got["tokens"], golden["tokens"])):
        if tok == want:
            continue
        ids, vals = golden["ids"][pos], golden["values"][pos]
        assert tok in ids, (path, pos, "the greedy token is outside the golden top-5")
        margin = vals[0] - vals[ids.index(tok)]
        assert margin <= 2 * bf16_ulp(vals[0]), (path, pos, "parted from the golden tokens beyond a near tie", margin)
        return pos
    return len(golden["tokens"])


def test_teacher_forced_logits_stay_within_bf16_rounding_of_the_golden_file() -> None:
    """The golden file holds, for each of 32 greedy positions of the tiny target, its top-5
    logits as the plain path computed them before this change (``write_golden``). Both the
    plain and the packed path must give the same tokens (up to a near tie, ``agreeing_prefix``)
    and there the same top-5 ids and values within one bf16 ulp. Where oneDNN has no bf16 path,
    "packed" is the AVX2 kernel's path (runtime/cpu_kernel.py), which ``prepack`` takes there."""
    golden = json.loads(GOLDEN.read_text())
    target, draft = load_pair()
    fast = can_pack(target.lm_head.weight) or cpu_kernel.usable(target.lm_head.weight)  # oneDNN, else the AVX2 kernel
    paths = ["plain"] + (["packed"] if fast else [])
    for path in paths:
        if path == "packed":
            prepack(target)
            prepack(draft)
        got = fingerprint(target, golden["prompt"])
        upto = agreeing_prefix(got, golden, path)
        assert upto >= 16, (path, upto, "too short a prefix agrees with the golden file")
        for pos in range(upto):
            ids, vals, want_ids, want_vals = got["ids"][pos], got["values"][pos], golden["ids"][pos], golden["values"][pos]
            assert ids[:1] == want_ids[:1], (path, pos)
            for v, w in zip(vals, want_vals):
                assert abs(v - w) <= bf16_ulp(w), (path, pos, v, w)


def fingerprint(target: Any, prompt: list[int]) -> dict[str, Any]:
    """Greedy tokens (32) and the teacher-forced top-5 logits at each of them (generic path)."""
    from dflash_ckpt.runtime.generate import decode

    with torch.inference_mode():
        tokens = decode(target, prompt, max_new_tokens=32, cache=target.new_cache(64)).tokens
        logits = teacher_forced_logits(target, prompt, tokens).float()
    top = logits.topk(5, dim=-1)
    return {"prompt": prompt, "tokens": tokens, "ids": top.indices.tolist(), "values": top.values.tolist()}


def write_golden() -> None:
    """Regenerate the golden file (run on the tree whose plain path is the reference)."""
    target, _ = load_pair()
    GOLDEN.parent.mkdir(exist_ok=True)
    GOLDEN.write_text(json.dumps(fingerprint(target, PROMPT)) + "\n")


@needs_onednn
def test_packed_weights_are_held_once_and_unpack_restores_them() -> None:
    target, draft = load_pair()
    models = {"target": target, "draft": draft}
    before = {(m, n): t.detach().clone() for m, model in models.items() for n, t in model.named_parameters()}
    attn, mlp = target.layers[0].self_attn, target.layers[0].mlp
    prepack(target)
    prepack(draft)
    for w in (attn.qkv, attn.q_proj.weight, attn.o_proj.weight, mlp.gate_up, mlp.down_proj.weight, draft.fc.weight):
        assert w.untyped_storage().nbytes() == 0  # only the packed copy is left
        assert w.shape and w.dtype == torch.bfloat16  # shapes and dtype still describe the model
    emb = target.embed_tokens.weight
    assert target.lm_head.weight is emb and getattr(emb, PACKED, None) is not None
    assert emb.untyped_storage().nbytes() == emb.nbytes  # the tied table keeps its plain copy
    assert draft.dtype == torch.bfloat16 and draft.new_cache(8).k.dtype == torch.bfloat16
    with pytest.raises(RuntimeError, match="unpack"):
        target(torch.tensor([PROMPT]))  # gradients wanted: refused, not silently wrong
    assert unpack(target) > 0 and unpack(draft) > 0
    assert not is_packed(target)
    for m, model in models.items():
        for n, t in model.named_parameters():
            assert torch.equal(t, before[(m, n)]), (m, n)
    assert attn.q_proj.weight.untyped_storage().data_ptr() == attn.qkv.untyped_storage().data_ptr()
    target(torch.tensor([PROMPT])).logits.float().sum().backward()  # trainable again
    assert attn.q_proj.weight.grad is not None


def test_weights_that_cannot_be_packed_keep_the_plain_path() -> None:
    target, draft = load_pair()
    target.float()
    assert prepack(target) == 0 and not is_packed(target)  # fp32: nothing packed, nothing freed
    assert target.layers[0].mlp.gate_up.untyped_storage().nbytes() > 0


FAST_PATH = "onednn-packed" if can_pack(torch.empty(2, 2, dtype=torch.bfloat16)) else (
    "avx2-kernel" if cpu_kernel.usable(torch.empty(2, 2, dtype=torch.bfloat16)) else None)


@pytest.mark.slow
@pytest.mark.skipif(FAST_PATH is None, reason="this CPU has neither oneDNN's bf16 path nor the AVX2 kernel")
def test_smoke_run_takes_the_fast_path_on_the_cpu_unless_no_compile() -> None:
    """Packed oneDNN weights where oneDNN has bf16, the AVX2 kernel elsewhere (runtime/cpu_kernel.py):
    smoke-run takes it by default, torch's path with ``--no-compile``, with the same tokens."""
    pytest.importorskip("tokenizers")
    from dflash_ckpt.run.options import SmokeOptions
    from dflash_ckpt.run.smoke import run_smoke_run

    runs = {}
    for no_compile in (False, True):
        res = run_smoke_run(SmokeOptions(str(PAIR / "draft"), str(PAIR / "target"), max_new_tokens=24, no_compile=no_compile))
        settings = res.to_json()["settings"]
        runs[no_compile] = res
        if no_compile:
            assert settings["prepacked_weights"] == 0 and settings["prepack_s"] == 0.0
            assert settings["cpu_linear"] == "torch"
        else:
            assert settings["prepacked_weights"] > 0 and settings["prepack_s"] > 0.0
            assert settings["cpu_linear"] == FAST_PATH
    packed, plain = runs[False], runs[True]
    assert [r.dflash.tokens for r in packed.runs] == [r.dflash.tokens for r in plain.runs]
    assert [r.target_tokens for r in packed.runs] == [r.target_tokens for r in plain.runs]
    assert packed.exit_code == plain.exit_code == 0


def test_the_memory_estimate_counts_the_packed_lm_head() -> None:
    """A packed tied head is held twice (the embedding lookups read the plain table), so the
    pre-check must count it on a CPU run that packs, and only there."""
    from dflash_ckpt.draftspec.specs import build_spec, target_from_config
    from dflash_ckpt.runtime.memory import Shapes, estimate_run

    cfg = {"hidden_size": 1024, "num_hidden_layers": 2, "num_attention_heads": 16, "num_key_value_heads": 8,
           "head_dim": 128, "intermediate_size": 3072, "vocab_size": 151936, "tie_word_embeddings": True}
    kw = dict(target=Shapes.of_target(target_from_config(cfg, label="t", where="t")), target_file_bytes=0,
              target_dtype=torch.bfloat16, draft=Shapes.of_draft(build_spec(cfg, label="d")),
              draft_file_bytes=0, draft_dtype=torch.bfloat16, capacity=256, longest=200, block=16, backend="native",
              taps=2)
    plain, packed = estimate_run(**kw), estimate_run(**kw, prepacked=True)
    assert packed.parts["prepacked lm_head"] == 151936 * 1024 * 2
    assert packed.total - plain.total == 151936 * 1024 * 2
    assert "prepacked lm_head" not in estimate_run(**{**kw, "backend": "transformers"}, prepacked=True).parts
