"""smoke-run under sampling and with the stored dtypes, on the trained tiny pair (fixtures/tiny-pair).

Sampled runs: both rules run and are named with their settings, a seed reproduces a run and
another seed changes it, ``--sampling generation-config`` reads the target's file, and the
greedy report stays as it was (no sampling line, the teacher-forced check). ``--draft-dtype
stored`` runs an fp16-stored draft in fp16 and says so; every report states the dtype that ran
against the stored one.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, smoke

TINY = ROOT / "fixtures" / "tiny-pair"
PAIR = (str(TINY / "draft"), str(TINY / "target"))
FAST = ("-n", "24", "--min-acceptance", "0")
SAMPLED = (*FAST, "--temperature", "0.6")

pytestmark = pytest.mark.usefixtures("one_thread")


def doc(res: Any) -> dict[str, Any]:
    assert res.code == 0, res.stderr
    return res.merged()


def outputs(d: dict[str, Any]) -> list[list[int]]:
    return [p["output_ids"] for p in d["prompts"]]


@pytest.mark.slow
@pytest.mark.parametrize("rule", ["match", "rejection"])
def test_a_sampled_run_names_its_rule_and_settings_and_a_seed_reproduces_it(cli, rule: str) -> None:
    first = doc(smoke(cli, PAIR, *SAMPLED, "--verify", rule, "--top-p", "0.95", "--top-k", "20", "--json"))
    s = first["settings"]
    assert s["sampling"] == {"temperature": 0.6, "top_p": 0.95, "top_k": 20, "seed": 0, "rule": rule,
                             "source": "options", "greedy": False, "engines": s["sampling"]["engines"]}
    assert s["sampling"]["engines"] and s["lossless"] == "sampled" and s["static_path"] is False
    assert first["findings"] == []  # no DF401: a sampled output is not compared token for token
    for p in first["prompts"]:
        assert p["lossless"]["status"] == "sampled"
        assert sum(p["acceptance_lengths"]) + 1 == len(p["output_ids"])
    assert first["overall"]["tau"] > 1.5  # the trained draft is still accepted at T 0.6
    again = doc(smoke(cli, PAIR, *SAMPLED, "--verify", rule, "--top-p", "0.95", "--top-k", "20", "--json"))
    assert outputs(again) == outputs(first)
    # The tiny target is peaked at T 0.6 (seeds 0 and 7 draw the same 72 tokens under rejection),
    # so another seed is looked for among a few.
    assert any(outputs(doc(smoke(cli, PAIR, *SAMPLED, "--verify", rule, "--top-p", "0.95", "--top-k", "20",
                                 "--seed", str(seed), "--json"))) != outputs(first) for seed in (1, 2, 3))


def test_the_text_report_has_the_sampling_line_only_when_sampling(cli) -> None:
    sampled = smoke(cli, PAIR, *SAMPLED, "--verify", "rejection", "-p", "hello")
    assert sampled.code == 0, sampled.stderr
    line = next(ln for ln in sampled.stdout.splitlines() if ln.startswith("sampling"))
    assert "T 0.6" in line and "rule rejection" in line and "vLLM" in line
    assert "outputs sampled (rejection" in sampled.stdout and "PASS" in sampled.stdout
    greedy = smoke(cli, PAIR, *FAST, "-p", "hello")
    assert greedy.code == 0 and not any(ln.startswith("sampling") for ln in greedy.stdout.splitlines()) and "outputs match on 1/1" in greedy.stdout


def test_greedy_stays_the_default_with_its_exact_check(cli) -> None:
    d = doc(smoke(cli, PAIR, *FAST, "--json"))
    assert d["settings"]["sampling"]["greedy"] is True and d["settings"]["lossless"] == "teacher-forced"
    assert all(p["lossless"]["status"] == "identical" for p in d["prompts"])


def _target_copy(tmp_path: Path, generation_config: dict[str, Any] | None) -> Path:
    target = tmp_path / "target"
    shutil.copytree(TINY / "target", target)
    (target / "generation_config.json").unlink()
    if generation_config is not None:
        (target / "generation_config.json").write_text(json.dumps(generation_config))
    return target


@pytest.mark.slow
def test_sampling_from_the_targets_generation_config(cli, tmp_path: Path) -> None:
    target = _target_copy(tmp_path, {"do_sample": True, "temperature": 0.7, "top_p": 0.8, "top_k": 5})
    d = doc(smoke(cli, (PAIR[0], str(target)), *FAST, "--sampling", "generation-config", "--seed", "3", "--json"))
    s = d["settings"]["sampling"]
    assert (s["temperature"], s["top_p"], s["top_k"], s["seed"], s["source"]) == (0.7, 0.8, 5, 3, "generation_config.json")
    assert d["settings"]["lossless"] == "sampled"
    text = smoke(cli, (PAIR[0], str(target)), *FAST, "--sampling", "generation-config", "-p", "hi")
    assert "sampling from generation_config.json: T 0.7, top-p 0.8, top-k 5" in text.stdout


def test_sampling_usage_errors_are_one_line(cli, tmp_path: Path) -> None:
    bare = _target_copy(tmp_path, None)
    cases = [
        ((PAIR[1],), ["--temperature", "-1"], "--temperature"),
        ((PAIR[1],), ["--top-p", "0"], "--top-p"),
        ((str(bare),), ["--sampling", "generation-config"], "generation_config.json does not exist"),
    ]
    for (target,), args, msg in cases:
        res = smoke(cli, (PAIR[0], target), *FAST, *args)
        assert res.code == 2 and msg in res.stderr and "DF004" in res.stderr, (args, res.stderr)
        assert res.stderr.count("\n") == 1, res.stderr


def _fp16_copy(folder: Path, out: Path) -> Path:
    """``folder`` with its weights cast to fp16 (as a published fp16 checkpoint stores them); its
    config keeps saying bfloat16."""
    from safetensors.torch import load_file, save_file

    import torch

    shutil.copytree(folder, out)
    tensors = load_file(str(folder / "model.safetensors"))
    save_file({k: v.to(torch.float16) if v.is_floating_point() else v for k, v in tensors.items()},
              str(out / "model.safetensors"))
    return out


@pytest.fixture(scope="module")
def fp16_draft(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _fp16_copy(TINY / "draft", tmp_path_factory.mktemp("fp16") / "draft")


@pytest.mark.slow
def test_stored_dtypes_are_stated_and_draft_dtype_stored_runs_them(cli, fp16_draft: Path) -> None:
    pair = (str(fp16_draft), PAIR[1])
    default = doc(smoke(cli, pair, *FAST, "--json"))["settings"]
    assert (default["draft_dtype"], default["draft_dtype_stored"]) == ("bfloat16", "float16")
    assert (default["target_dtype"], default["target_dtype_stored"]) == ("bfloat16", "bfloat16")
    stored = doc(smoke(cli, pair, *FAST, "--draft-dtype", "stored", "--target-dtype", "stored", "--json"))["settings"]
    assert (stored["draft_dtype"], stored["draft_dtype_stored"]) == ("float16", "float16")
    assert stored["target_dtype"] == "bfloat16"
    text = smoke(cli, pair, *FAST, "-p", "hi")
    assert "draft bfloat16 (stored float16)" in text.stdout and "target bfloat16 (as stored)" in text.stdout
    text = smoke(cli, pair, *FAST, "-p", "hi", "--draft-dtype", "stored")
    assert "draft float16 (as stored)" in text.stdout


def test_an_fp16_target_runs_stored_against_a_bf16_draft(cli, tmp_path: Path) -> None:
    """The format's seed case: an fp16 target with a bf16 draft, cast where the tapped features
    enter the draft and where the draft reads the target's embedding and head."""
    target = _fp16_copy(TINY / "target", tmp_path / "target")
    pair = (PAIR[0], str(target))
    default = doc(smoke(cli, pair, *FAST, "--json"))["settings"]
    assert (default["target_dtype"], default["target_dtype_stored"]) == ("bfloat16", "float16")  # the config's dtype
    d = doc(smoke(cli, pair, *FAST, "--target-dtype", "stored", "--json"))
    s = d["settings"]
    assert (s["target_dtype"], s["target_dtype_stored"], s["draft_dtype"]) == ("float16", "float16", "bfloat16")
    assert all(p["lossless"]["status"] in ("identical", "tie") for p in d["prompts"]) and d["overall"]["tau"] > 2


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["native", "transformers"])
def test_top_k_1_samples_the_greedy_output_under_both_rules(cli, backend: str) -> None:
    """At top-k 1 the processed distribution is one-hot at the argmax, so both rules, wired
    through the eager executor and the target-only decoder, must reproduce greedy decoding token
    for token: a check of the wiring (the first token, each block's rule, the bonus) that needs
    no statistics."""
    if backend == "transformers":
        pytest.importorskip("transformers")
    greedy = doc(smoke(cli, PAIR, *FAST, "--backend", backend, "--json"))
    for rule in ("match", "rejection"):
        sampled = doc(smoke(cli, PAIR, *SAMPLED, "--top-k", "1", "--verify", rule, "--backend", backend, "--json"))
        assert sampled["settings"]["backend"] == backend and sampled["settings"]["lossless"] == "sampled"
        assert outputs(sampled) == outputs(greedy), rule
        assert [p["acceptance_lengths"] for p in sampled["prompts"]] == [p["acceptance_lengths"] for p in greedy["prompts"]]
