"""Issue 32: a degenerate pair never PASSes. All-zero or constant weights (DF413, sampled before
loading), a target whose logits tie everywhere (DF414) and outputs that repeat one token (DF415)
fail smoke-run and probe-taps on both backends. Every hostile pair is built here, at test time,
from the tiny trained pair (``degenerate_pairs``)."""

from __future__ import annotations

import io
import re
import struct
from pathlib import Path

import pytest
import torch

from degenerate_pairs import TINY, constant, only, rewritten, zeroed
from dflash_ckpt.checks.degenerate import TieRows, repeated_token_findings, tied_logit_findings
from dflash_ckpt.runtime.judge import tie_counts
from dflash_ckpt.sources.local import LocalSource
from dflash_ckpt.sources.safetensors_header import TensorInfo
from dflash_ckpt.sources.weight_sample import constant_tensors, sample_tensor
from dflash_ckpt.sources.weights import load_inventory

BACKENDS = ("native", "transformers")
GOOD_DRAFT, GOOD_TARGET = TINY / "draft", TINY / "target"


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("hostile")
    return {
        "zero-draft": zeroed(GOOD_DRAFT, root / "zero-draft"),
        "zero-target": zeroed(GOOD_TARGET, root / "zero-target"),
        "const-draft": rewritten(GOOD_DRAFT, root / "const-draft", constant(0.01)),
        "const-target": rewritten(GOOD_TARGET, root / "const-target", constant(0.01)),
        # one vector zeroed: no matrix is constant (DF413 stays quiet), every logit is 0
        "flat-target": rewritten(GOOD_TARGET, root / "flat-target", only("model.norm.weight", torch.zeros_like)),
    }


def _codes(res) -> list[str]:
    doc = res.result()
    return [f["code"] for f in doc["precheck"] + doc["findings"]]


# -- smoke-run --------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("draft,target,role", [
    ("zero-draft", "zero-target", "draft"),  # the reported case: PASS tau 7.50, 3/3 same, exit 0
    ("const-draft", "const-target", "draft"),
    ("zero-draft", None, "draft"),  # a zero draft with a good target
    (None, "zero-target", "target"),  # a good draft with a zero target
    (None, "const-target", "target"),
])
def test_smoke_run_refuses_unfilled_weights(cli, one_thread, hostile, backend, draft, target, role) -> None:
    d = hostile[draft] if draft else GOOD_DRAFT
    t = hostile[target] if target else GOOD_TARGET
    res = cli("smoke-run", str(d), "--target", str(t), "-n", "8", "--backend", backend, "--json")
    assert res.code == 1, res.stdout[-2000:]
    doc = res.result()
    assert doc["refused"] is True and doc["prompts"] == []
    df413 = [f for f in doc["precheck"] if f["code"] == "DF413"]
    folders = {Path(f["path"]).parent for f in df413}
    assert folders == {x for x in (d if draft else None, t if target else None) if x is not None}
    assert any(f"the {role}'s tensor" in f["message"] for f in df413)
    zero = "zero" in (draft or target)
    assert all(("all zeros" in f["message"]) == zero for f in df413)
    quiet = cli("smoke-run", str(d), "--target", str(t), "-n", "8", "--backend", backend, "-q")
    assert quiet.code == 1 and ": DF413 error: " in quiet.stdout and "PASS" not in quiet.stdout


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_smoke_run_fails_a_target_whose_logits_all_tie(cli, one_thread, hostile, backend) -> None:
    """Weights that pass DF413 (a zero final norm is a vector) but make every logit 0: both sides
    emit token 0, and DF414 (one per prompt) fails the run."""
    res = cli("smoke-run", str(GOOD_DRAFT), "--target", str(hostile["flat-target"]), "-n", "8",
              "--backend", backend, "--json")
    assert res.code == 1
    doc = res.result()
    codes = _codes(res)
    assert "DF413" not in codes and codes.count("DF414") == len(doc["prompts"]) == 3
    for p in doc["prompts"]:
        assert p["lossless"]["tied_rows"] == p["lossless"]["flat_rows"] == p["lossless"]["compared"] == 8
        assert set(p["target_output_ids"]) == {0}
    text = cli("smoke-run", str(GOOD_DRAFT), "--target", str(hostile["flat-target"]), "-n", "8", "--backend", backend)
    # the finding's text as a reader reads it, whatever width the findings table wrapped it at
    words = re.sub(r"[\s│]+", " ", text.stdout)
    assert text.code == 1 and "every logit is equal" in words and "PASS" not in text.stdout


def test_the_good_pair_still_passes_with_row_counts(cli, one_thread) -> None:
    res = cli("smoke-run", str(GOOD_DRAFT), "--target", str(GOOD_TARGET), "-n", "16", "--json")
    assert res.code == 0
    for p in res.result()["prompts"]:
        assert p["lossless"]["tied_rows"] < p["lossless"]["compared"] and p["lossless"]["flat_rows"] == 0


# -- probe-taps -------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_probe_taps_refuses_unfilled_weights(cli, one_thread, hostile, backend) -> None:
    res = cli("probe-taps", str(hostile["zero-draft"]), "--target", str(hostile["zero-target"]), "-n", "8",
              "--backend", backend, "--json")
    assert res.code == 1
    doc = res.result()
    assert doc["refused"] is True and {f["code"] for f in doc["precheck"]} == {"DF413"}
    res = cli("probe-taps", str(GOOD_DRAFT), "--target", str(hostile["const-target"]), "-n", "8", "--backend", backend, "-q")
    assert res.code == 1 and ": DF413 error: " in res.stdout


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_probe_taps_ranks_nothing_on_tied_logits(cli, one_thread, hostile, backend) -> None:
    res = cli("probe-taps", str(GOOD_DRAFT), "--target", str(hostile["flat-target"]), "-n", "8",
              "--backend", backend, "--json")
    assert res.code == 1
    doc = res.result()
    codes = [f["code"] for f in doc["findings"]]
    assert codes.count("DF414") == 3 and "DF415" in codes and doc["ranked"] == []
    text = cli("probe-taps", str(GOOD_DRAFT), "--target", str(hostile["flat-target"]), "-n", "8", "--backend", backend)
    assert text.code == 1 and "no tap set ranked" in text.stdout and "PASS" not in text.stdout


# -- the sampler: bounded, and only a tensor that is one value everywhere read ----------------


def _file(tensor_bytes: bytes, dtype: str = "BF16", shape: tuple[int, ...] | None = None) -> tuple[io.BytesIO, TensorInfo]:
    header = b"{}"
    info = TensorInfo("layers.0.mlp.up_proj.weight", dtype, shape or (len(tensor_bytes) // 2, 1), "x.safetensors",
                      0, len(tensor_bytes))
    return io.BytesIO(struct.pack("<Q", len(header)) + header + tensor_bytes), info


def test_a_large_zero_tensor_is_found_from_a_few_slices() -> None:
    size = 64 << 20  # 64 MiB of zeros (a sparse file would read back so)
    fh, info = _file(bytes(size))
    hit = sample_tensor(fh, 10, info)
    assert hit is not None and hit.zero and not hit.whole
    assert hit.bytes_read <= 3 * 1024 + 16 * 4096  # not the tensor: a few KiB spread over it


def test_zeros_where_sampled_but_data_elsewhere_is_no_finding() -> None:
    """Rows pruned to zero at the first slices are not an unfilled tensor: the confirming read
    spread over the tensor finds the data."""
    size = 8 << 20
    data = bytearray(size)
    lo, hi = size // 2 + 8192, size - 8192  # data only where the first three slices do not look
    data[lo:hi] = b"\x80\x3f" * ((hi - lo) // 2)  # bf16 1.0
    fh, info = _file(bytes(data))
    assert sample_tensor(fh, 10, info) is None


def test_negative_zeros_and_one_constant() -> None:
    fh, info = _file(b"\x00\x80" * 4096)
    assert sample_tensor(fh, 10, info).zero
    fh, info = _file(struct.pack("<e", 0.5) * 4096, dtype="F16")
    hit = sample_tensor(fh, 10, info)
    assert hit.value == 0.5 and not hit.zero and hit.whole


def test_vectors_scales_and_integer_tensors_are_not_judged(tmp_path: Path) -> None:
    """Zero-centred norms (Gemma, Qwen3-Next) are legitimately zero; biases too; packed integers
    and quantization scales are no weights to judge."""
    from safetensors.torch import save_file

    folder = tmp_path / "m"
    folder.mkdir()
    save_file({"model.norm.weight": torch.zeros(64), "layers.0.self_attn.q_proj.bias": torch.zeros(64),
               "layers.0.mlp.up_proj.qweight": torch.zeros(8, 8, dtype=torch.int32),
               "layers.0.mlp.up_proj.weight_scale": torch.ones(8, 8),
               "layers.0.mlp.down_proj.weight": torch.randn(8, 8)}, str(folder / "model.safetensors"))
    inv = load_inventory(LocalSource(folder, label="m"))
    assert constant_tensors(folder, inv) == []
    save_file({"layers.0.mlp.down_proj.weight": torch.zeros(8, 8)}, str(folder / "model.safetensors"))
    inv = load_inventory(LocalSource(folder, label="m"))
    assert [t.name for t in constant_tensors(folder, inv)] == ["layers.0.mlp.down_proj.weight"]


def test_the_tiny_pair_and_its_variants_have_no_constant_matrix() -> None:
    for folder in sorted({p.parent for p in TINY.rglob("*.safetensors")}):
        inv = load_inventory(LocalSource(folder, label=str(folder)))
        assert constant_tensors(folder, inv) == [], folder


# -- the pure findings -------------------------------------------------------------------------


def test_tie_counts() -> None:
    logits = torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0], [3.0, 1.0, 2.0]])
    assert tie_counts(logits) == (2, 1)


def test_tied_logit_findings_need_every_position_and_enough_of_them() -> None:
    rows = [TieRows("a", 8, 8, 8), TieRows("b", 8, 7, 0), TieRows("c", 3, 3, 3)]
    assert [f.code for f in tied_logit_findings(rows, "T")] == ["DF414"]
    [f] = tied_logit_findings([TieRows("a", 8, 8, 0)], "T")
    assert "the two best logits are equal" in f.message and f.path == "T"


def test_repeated_token_findings_need_every_prompt() -> None:
    assert repeated_token_findings([[5] * 8, [5] * 9], "target", "T")[0].code == "DF415"
    assert repeated_token_findings([[5] * 8, [5, 6] * 4], "target", "T") == []
    assert repeated_token_findings([[5] * 3], "target", "T") == []  # too short to say
