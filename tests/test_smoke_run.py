"""``dflash-ckpt smoke-run`` through the CLI: verdicts, exit codes, report and JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import tiny_models as tm
from conftest import ROOT, no_traceback, run_cli, smoke
from loop_oracles import compare_outputs

FAST = ["--max-new-tokens", "24", "--draft-dtype", "float32"]


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    draft, target = tm.make_pair(tmp_path_factory.mktemp("pair"))
    return str(draft), str(target)


def test_pass_with_every_figure_in_json(cli, pair) -> None:
    res = smoke(cli, pair, *FAST, "--min-acceptance", "0", "--json")
    assert res.code == 0, res.stderr
    doc = res.merged()
    assert doc["ok"] and doc["exit_code"] == 0 and doc["findings"] == []
    assert [p["name"] for p in doc["prompts"]] == ["math", "code", "chat"]
    s = doc["settings"]
    assert (s["device"], s["draft_dtype"], s["target_dtype"], s["block_size"]) == ("cpu", "float32", "float32", 8)
    assert s["chat_template"] is True and s["thinking"] is False and s["stop_token_ids"] == [tm.IM_END_ID, tm.EOS_ID]
    for p in doc["prompts"]:
        assert p["output_ids"] == p["target_output_ids"] and p["lossless"]["status"] == "identical"
        assert 1 <= len(p["output_ids"]) <= 24
        assert sum(p["acceptance_lengths"]) + 1 == len(p["output_ids"])
        assert sum(p["histogram"].values()) == p["steps"] == len(p["acceptance_lengths"])
        assert p["tau"] == pytest.approx(sum(p["acceptance_lengths"]) / p["steps"])
        assert p["accepted_per_step"] == pytest.approx(p["tau"] - 1)
        assert p["target_forwards"]["dflash"] == p["steps"] + 1
        assert p["target_forwards"]["target_only"] == len(p["output_ids"])
        # The chat template with enable_thinking false: <|im_start|> first, the empty think block last.
        assert p["input_ids"][0] == 1 and 4 in p["input_ids"][-4:]
        assert p["target_tok_s"] > 0 and p["dflash_tok_s"] > 0
    o = doc["overall"]
    assert o["new_tokens"] == sum(len(p["output_ids"]) for p in doc["prompts"])
    assert o["speedup"] == pytest.approx(o["dflash_tok_s"] / o["target_tok_s"])
    assert 1.0 <= o["tau"] < 2.0  # a random draft is (almost) never accepted


def test_random_draft_fails_the_default_min_acceptance(cli, pair) -> None:
    """A draft whose features mean nothing to it (here: random weights, as with wrong tap
    layers) falls under the default 2.0 and fails, pointing at the tap layers."""
    res = smoke(cli, pair, *FAST)
    assert res.code == 1
    assert "DF403" in res.stdout and "FAIL" in res.stdout and "target_layer_ids" in res.stdout
    doc = smoke(cli, pair, *FAST, "--json").merged()
    [f] = doc["findings"]
    assert f["code"] == "DF403" and "below --min-acceptance 2" in f["message"] and "target_layer_ids [1, 3, 5]" in f["message"]
    quiet = smoke(cli, pair, *FAST, "-q")
    assert quiet.code == 1 and quiet.stdout.strip().count("\n") == 0 and "DF403 error" in quiet.stdout


def test_human_report_has_table_histogram_and_verdict(cli, pair) -> None:
    res = smoke(cli, pair, *FAST, "--min-acceptance", "0", "-p", "hello world")
    assert res.code == 0
    out = res.stdout
    assert "smoke-run" in out and "prompt-1" in out and "same" in out
    # One prompt is below the minimum of evidence; --min-acceptance 0 asks no verdict on tau: no DF408,
    # a PASS on the outputs, the speedup withheld all the same.
    assert "acceptance lengths" in out and "PASS" in out and " DF408 │" not in out and "speedup withheld" in out


def test_a_few_steps_are_too_little_evidence_for_a_verdict_or_a_speedup(cli) -> None:
    """Issue 29's run: one prompt, -n 48, 4 DFlash steps on the trained tiny pair printed PASS with a
    speedup of 2.41x. Now: DF408 (a warning, exit 0), no DF403, the speedup withheld in the table,
    the verdict and the JSON (null, with the reason), and the table's fwd D and the histogram's
    steps said to differ by the prefill."""
    tiny = ROOT / "fixtures" / "tiny-pair"
    pair = (str(tiny / "draft"), str(tiny / "target"))
    res = smoke(cli, pair, "-p", "What is 12 times 7?", "-n", "48")
    assert res.code == 0, res.stderr
    text = " ".join(res.stdout.split())  # as wrapped at any width
    assert "NO VERDICT tau 4.25 from 4 step(s) over 1 prompt(s) is too little evidence" in text
    assert "speedup withheld (too little evidence)" in text and "PASS" not in text
    [row] = [x for x in res.stdout.splitlines() if x.startswith(" prompt-1 ")]
    assert row.split("│")[6].strip() == "—" and "DF408" in res.stdout and "DF403 error" not in res.stdout
    assert "over 4 DFlash steps (the table's fwd D, 5, counts these and each prompt's prefill)" in text
    doc = smoke(cli, pair, "-p", "What is 12 times 7?", "-n", "48", "--json").merged()
    [f] = doc["findings"]
    assert f["code"] == "DF408" and f["severity"] == "warning" and "4 DFlash step(s) over 1 prompt(s)" in f["message"]
    o = doc["overall"]
    assert o["speedup"] is None and o["speedup_withheld"] == "too little evidence for a verdict on acceptance"
    assert o["evidence"] == {"enough": False, "steps": 4, "prompts": 1, "min_steps": 32, "min_prompts": 3,
                             "shortfall": f["message"].split("; no verdict")[0]}
    assert o["tau_ci95"] is None and o["speedup_ci95"] is None and doc["prompts"][0]["speedup"] is None


def test_prompt_options_change_the_input(cli, pair, tmp_path: Path) -> None:
    file = tmp_path / "p.jsonl"
    file.write_text('{"name": "mine", "prompt": "hello"}\n')
    base = smoke(cli, pair, "-n", "2", "--min-acceptance", "0", "--json", "-p", "hello", "--prompts", str(file)).merged()
    assert [p["name"] for p in base["prompts"]] == ["prompt-1", "mine"]
    assert base["prompts"][0]["input_ids"] == base["prompts"][1]["input_ids"]
    plain = smoke(cli, pair, "-n", "2", "--min-acceptance", "0", "--json", "-p", "hello", "--no-chat-template").merged()
    think = smoke(cli, pair, "-n", "2", "--min-acceptance", "0", "--json", "-p", "hello", "--thinking").merged()
    a, b, c = base["prompts"][0]["input_ids"], plain["prompts"][0]["input_ids"], think["prompts"][0]["input_ids"]
    assert len(b) < len(c) < len(a) and plain["settings"]["chat_template"] is False
    assert c == a[: len(c)]  # thinking on: the same prompt without the empty think block


def test_pair_failing_the_checks_is_refused(cli, tmp_path: Path) -> None:
    target = tm.make_target(tmp_path / "wide", hidden=128, head_dim=32)
    draft = tm.make_draft(tmp_path / "d")
    res = cli("smoke-run", str(draft), "--target", str(target))
    no_traceback(res)
    assert res.code == 1 and "DF302" in res.stdout and "REFUSED" in res.stdout
    doc = cli("smoke-run", str(draft), "--target", str(target), "--json").merged()
    assert doc["refused"] and any(f["code"] == "DF302" for f in doc["precheck"]) and doc["prompts"] == []


def test_unsupported_pairs_exit_2_naming_what_is_supported(cli, tmp_path: Path) -> None:
    target = tm.make_target(tmp_path / "t")
    moe = tmp_path / "moe"
    moe.mkdir()
    cfg = json.loads((target / "config.json").read_text())
    cfg.update(model_type="qwen3_moe", architectures=["Qwen3MoeForCausalLM"], num_experts=8)
    (moe / "config.json").write_text(json.dumps(cfg))
    draft = tm.make_draft(tmp_path / "v1")
    # The native runtime refuses it; `--backend auto` (the default) hands it to transformers (test_hf_smoke.py).
    res = cli("smoke-run", str(draft), "--target", str(moe), "--backend", "native")
    assert res.code == 2 and "not supported by the reference runtime: target model_type 'qwen3_moe'" in res.stderr
    assert "dense Qwen3" in res.stderr and "Llama 3.x" in res.stderr and res.stderr.count("\n") == 1


def test_usage_errors_exit_2_in_one_line(cli, pair, tmp_path: Path) -> None:
    bad_file = tmp_path / "bad.jsonl"
    bad_file.write_text("{nope\n")
    no_tok = tm.make_target(tmp_path / "notok", tokenizer=False)
    cases = [
        (["-n", "0"], "--max-new-tokens 0"),
        (["--draft-dtype", "fp8"], "--draft-dtype 'fp8'"),
        (["--block-size", "1"], "--block-size 1"),
        (["--prompts", str(bad_file)], "bad.jsonl:1: DF002 error: invalid JSON"),
        (["--prompts", str(tmp_path / "absent.jsonl")], "no such file"),
        (["--tokenizer", str(tmp_path / "nowhere")], "--tokenizer"),
    ]
    if not torch.cuda.is_available():
        cases.append((["--device", "cuda"], "CUDA is not available"))
    for args, msg in cases:
        res = smoke(cli, pair, *args)
        assert res.code == 2 and msg in res.stderr and res.stderr.count("\n") == 1, (args, res.stderr)
    res = cli("smoke-run", pair[0], "--target", str(no_tok))
    assert res.code == 2 and "tokenizer.json: DF001 error: missing" in res.stderr
    res = cli("smoke-run", str(tmp_path / "absent"), "--target", pair[1])
    assert res.code == 2 and "no such folder" in res.stderr


def test_hub_id_that_is_not_available_exits_2(cli, pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    res = cli("smoke-run", "nobody-xyz/not-a-draft", "--target", pair[1])
    no_traceback(res)
    assert res.code == 2 and "nobody-xyz/not-a-draft" in res.stderr


def test_fp16_overflow_in_fc_is_a_finding_and_bf16_passes(cli, tmp_path: Path) -> None:
    target = tm.make_target(tmp_path / "t16", dtype="float16", outlier=[(0, 20000.0), (4, -20000.0)])
    draft = tm.make_draft(tmp_path / "d", fc_outlier=(5, 2.0))
    args = ["smoke-run", str(draft), "--target", str(target), "-n", "16", "--min-acceptance", "0", "-p", "hi", "--json"]
    bad = cli(*args, "--draft-dtype", "float16")
    assert bad.code == 1
    doc = bad.merged()
    [f, fp16] = doc["findings"]
    assert fp16["code"] == "DF318" and "draft runs in float16" in fp16["message"]
    assert f["code"] == "DF404" and "fused features" in f["message"] and "keep the draft in bfloat16" in f["message"]
    assert doc["prompts"][0]["overflow"] == "fused features" and doc["prompts"][0]["lossless"]["status"] == "skipped"
    good = cli(*args)  # the default: a bf16 draft, fp16 target tensors cast to it
    assert good.code == 0, good.stdout
    gdoc = good.merged()
    assert gdoc["settings"]["draft_dtype"] == "bfloat16" and gdoc["settings"]["target_dtype"] == "float16"
    assert gdoc["prompts"][0]["lossless"]["status"] in ("identical", "tie")


def test_target_overflowing_fp16_is_a_finding(cli, tmp_path: Path) -> None:
    target = tm.make_target(tmp_path / "inf", dtype="float16", outlier=[(0, 40000.0), (1, 40000.0)])
    draft = tm.make_draft(tmp_path / "d")
    res = cli("smoke-run", str(draft), "--target", str(target), "-n", "8", "-p", "hi", "--json")
    assert res.code == 1
    codes = {(f["code"], "tapped features" in f["message"] or "logits" in f["message"]) for f in res.merged()["findings"]}
    assert codes == {("DF404", True)}
    ok = cli("smoke-run", str(draft), "--target", str(target), "-n", "8", "-p", "hi", "--json",
             "--target-dtype", "float32", "--min-acceptance", "0")
    assert ok.code == 0


def test_llama_target_and_sliding_window_draft(cli, tmp_path: Path) -> None:
    target = tm.make_target(tmp_path / "llama", model_type="llama", rope_scaling=tm.LLAMA3_ROPE, rope_theta=500000.0)
    draft = tm.make_draft(tmp_path / "d", layer_types=["sliding_attention", "full_attention"], sliding_window=4)
    res = cli("smoke-run", str(draft), "--target", str(target), *FAST, "--min-acceptance", "0", "--json", "--ignore-eos")
    assert res.code == 0, res.stdout
    doc = res.merged()
    assert all(p["lossless"]["status"] == "identical" and len(p["output_ids"]) == 24 for p in doc["prompts"])
    assert doc["settings"]["stop_token_ids"] == []


def test_divergence_beyond_a_tie_fails_and_a_tie_passes(cli, pair, monkeypatch: pytest.MonkeyPatch) -> None:
    """Corrupt DFlash's output after the fact. A token far down the target's logits is DF401 with
    its rank and margin; the same token is a tie (DF402) once the tolerance covers that margin:
    ties count at any rank (runtime/judge.py), not only the runner-up; the runner-up within the
    tolerance is DF402 (exit 0) and outside it DF401."""
    from dflash_ckpt.runtime.loops import StaticLoop as smoke_mod  # the tiny pair runs on the static loop

    real_decode, real_dflash = smoke_mod.decode, smoke_mod.dflash
    seen = {}

    def spy_decode(*a, **k):
        seen["ref"] = real_decode(*a, **{**k, "top2": True})
        return seen["ref"]

    def corrupt(mode: str):
        """DFlash's token 5 becomes the target's runner-up ("tie") or a token that is neither."""
        def run(*a, **k):
            gen = real_dflash(*a, **k)
            if len(gen.tokens) <= 5:  # the warm-up run
                return gen
            ids = seen["ref"].top2_ids[5]
            if mode == "tie":
                gen.tokens[5] = ids[1] if ids[0] == gen.tokens[5] else ids[0]
            else:
                gen.tokens[5] = next(t for t in range(tm.VOCAB) if t not in ids)
            return gen
        return run

    args = (*FAST, "--min-acceptance", "0", "--ignore-eos", "-p", "hi", "--json", "--tie-tolerance")
    monkeypatch.setattr(smoke_mod, "decode", spy_decode)
    monkeypatch.setattr(smoke_mod, "dflash", corrupt("wrong"))
    res = smoke(cli, pair, *args, "0")
    assert res.code == 1
    [f] = res.merged()["findings"]
    lo = res.merged()["prompts"][0]["lossless"]
    assert f["code"] == "DF401" and "at new token 5" in f["message"] and "not a tie" in f["message"]
    assert lo["status"] == "differs" and lo["rank"] >= 3 and lo["margin"] > 0 and f"rank {lo['rank']}" in f["message"]
    res = smoke(cli, pair, *args, repr(lo["margin"] * 1.01 + 1e-6))
    assert res.code == 0 and res.merged()["findings"][0]["code"] == "DF402"
    tie = res.merged()["prompts"][0]["lossless"]
    # Later positions follow the corrupted prefix and may be ties too; the first is reported.
    assert (tie["status"], tie["position"], tie["rank"]) == ("tie", 5, lo["rank"]) and tie["ties"] >= 1
    monkeypatch.setattr(smoke_mod, "dflash", corrupt("tie"))
    res = smoke(cli, pair, *args, "1000")
    assert res.code == 0
    [f] = res.merged()["findings"]
    assert f["code"] == "DF402" and res.merged()["prompts"][0]["lossless"]["status"] == "tie"
    assert res.merged()["prompts"][0]["lossless"]["rank"] == 2
    res = smoke(cli, pair, *args, "0")
    assert res.code == 1 and res.merged()["findings"][0]["code"] == "DF401"  # the same swap outside the tolerance


def test_compare_outputs() -> None:
    v, i = [[5.0, 4.0], [3.0, 2.9999], [9.0, 1.0]], [[1, 7], [2, 8], [3, 9]]
    assert compare_outputs([1, 2, 3], [1, 2, 3], v, i, 1e-3).status == "identical"
    tie = compare_outputs([1, 2, 3], [1, 8, 3], v, i, 1e-3)
    assert (tie.status, tie.position, tie.runner_up) == ("tie", 1, 8) and tie.margin == pytest.approx(1e-4)
    assert compare_outputs([1, 2, 3], [1, 5, 3], v, i, 1e-3).status == "differs"  # not the runner-up
    assert compare_outputs([1, 2, 3], [7, 2, 3], v, i, 1e-3).status == "differs"  # margin 1 > tolerance
    short = compare_outputs([1, 2, 3], [1, 2], v, i, 1e-3)
    assert (short.status, short.position, short.margin) == ("differs", 2, None)


@pytest.mark.slow
def test_subprocess_run_and_cli_import_without_torch(pair) -> None:
    code = "import sys, dflash_ckpt.cli; sys.exit(1 if 'torch' in sys.modules else 0)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
    res = run_cli("smoke-run", pair[0], "--target", pair[1], "-n", "6", "--min-acceptance", "0", "--json", "--ignore-eos",
                  env={"OMP_NUM_THREADS": "1"})
    no_traceback(res)
    assert res.code == 0, res.stderr
    assert all(len(p["output_ids"]) == 6 for p in res.merged()["prompts"])


def test_judge_counts_near_ties_at_any_rank() -> None:
    """Constructed teacher-forced logits (runtime/judge.py): the issue-22 case of top-3 logits
    4.25, 4.22, 4.19 with DFlash on the third is a tie, as is the runner-up; a token 2.0 below
    the maximum is a divergence; equal outputs are identical; the first tie is reported with
    the count and the largest margin."""
    from dflash_ckpt.runtime.judge import TIE_TOLERANCE, judge_logits

    vocab = 50
    rows = torch.full((4, vocab), -3.0)
    rows[0, 7] = 9.0  # a clear choice
    rows[1, [11, 12, 13]] = torch.tensor([4.25, 4.22, 4.19])  # near tie over three tokens
    rows[2, [20, 21, 22]] = torch.tensor([6.0, 5.9, 4.0])  # runner-up close, third far
    rows[3, [30, 31]] = torch.tensor([2.0, 0.0])
    tol = TIE_TOLERANCE[torch.bfloat16]
    target = [7, 11, 20, 30]
    assert judge_logits(rows, target, tol).status == "identical"
    third = judge_logits(rows, [7, 13, 20, 30], tol)
    p = third.position
    assert (third.status, p.index, p.rank, p.target_token, p.dflash_token) == ("tie", 1, 3, 11, 13)
    assert p.margin == pytest.approx(0.06, abs=1e-5) and third.target_tokens == target
    both = judge_logits(rows, [7, 12, 21, 30], tol)
    assert (both.status, both.ties, both.position.index, both.position.rank) == ("tie", 2, 1, 2)
    assert both.largest_margin == pytest.approx(0.1, abs=1e-5)
    far = judge_logits(rows, [7, 13, 22, 30], tol)  # rank 3 at row 2 is 2.0 below: beyond any bf16 tie
    assert (far.status, far.position.index, far.position.rank) == ("differs", 2, 3)
    assert far.position.margin == pytest.approx(2.0)
    assert judge_logits(rows, [7, 13, 20, 31], tol).status == "differs"  # 2.0 below at the runner-up too
    assert judge_logits(rows, [7, 13, 20, 30], 0.01).status == "differs"  # 0.06 beyond a tight tolerance
    nan = rows.clone()
    nan[0, 8] = float("nan")
    assert judge_logits(nan, [8, 11, 20, 30], tol).status == "differs"
