"""Engines (issue 21): the new readers on the published layouts, keys that change acceptance,
DFlash2 per engine, smoke-run's refusal, the Hub pin advice and the serve lines.

Drafts are the fixtures of make_fixtures.py, edited at test time where a case needs a hostile
config; serve lines are executed against stand-in engine executables, so their quoting is proven
by a real exec, not by string comparison.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

import tiny_models as tm
from conftest import no_traceback, run_cli, smoke
from hub_server import HubServer, hub_env

NEW_READERS = ("tensorrt-llm", "zlab-mlx", "mlx-vlm", "exllamav3-legacy", "exllamav3")


def inspect(draft: Path, *args: str) -> dict[str, Any]:
    res = run_cli("inspect", str(draft), "--json", *args)
    no_traceback(res)
    return res.result()


def edited(src: Path, dst: Path, edit: Any) -> Path:
    """A copy of the draft folder ``src`` (weights hard-linked) with ``edit(config)`` applied."""
    shutil.copytree(src, dst, copy_function=os.link)
    cfg_path = dst / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg_path.unlink()
    edit(cfg)
    cfg_path.write_text(json.dumps(cfg, indent=2) + "\n")
    return dst


# -- readers on the published layouts -----------------------------------------------------------


def test_new_readers_on_the_two_published_layouts(fixtures_root: Path, tmp_path: Path) -> None:
    """Older layout (block_size at the top): every new reader loads it; nested layout: the readers
    of a top-level block_size (TensorRT-LLM, exllamav3 before #276, z-lab's v1 MLX loader) fail,
    exllamav3 after #276 reads both places."""
    older = inspect(fixtures_root / "drafts/Qwen3-4B-DFlash-b16")["readers"]
    assert all(older[r]["loads"] for r in NEW_READERS), older
    assert "max_draft_len at most 15" in older["tensorrt-llm"]["reason"]
    newer = inspect(fixtures_root / "drafts/Qwen3.5-122B-A10B-DFlash")["readers"]
    for r in ("tensorrt-llm", "exllamav3-legacy"):
        assert newer[r]["loads"] is False and "block_size only from the top level" in newer[r]["reason"], r
        assert newer[r]["fixed_by_normalize"] is True
    assert newer["exllamav3"]["loads"] is True
    assert newer["zlab-mlx"]["loads"] is False and "rope_theta" in newer["zlab-mlx"]["reason"]
    assert newer["zlab-mlx"]["fixed_by_normalize"] is True
    # mlx-vlm runs a nested block of 16 at its default 16, but a nested block of 8 at 16: silent
    assert newer["mlx-vlm"]["loads"] is True
    # mlx-vlm 0.7.10's DFlash2 config reads the nested block (its v1 config still does not)
    dflash2 = inspect(fixtures_root / "drafts/Qwen3.8-27B-DFlash2")["readers"]
    assert dflash2["mlx-vlm"]["loads"] is True
    v1_block8 = edited(fixtures_root / "drafts/Qwen3.5-122B-A10B-DFlash", tmp_path / "b8",
                       lambda c: c["dflash_config"].update(block_size=8))
    reason = inspect(v1_block8)["readers"]["mlx-vlm"]
    assert reason["loads"] is False and "runs the block of 8 in dflash_config at its default 16" in reason["reason"]


def test_tensorrt_llm_mask_id_falling_back_to_vocab_is_an_error(fixtures_root: Path, tmp_path: Path) -> None:
    draft = edited(fixtures_root / "mutants/base", tmp_path / "d", lambda c: c["dflash_config"].pop("mask_token_id"))
    reason = inspect(draft)["readers"]["tensorrt-llm"]
    assert reason["loads"] is False and "falls back to vocab_size (1024)" in reason["reason"]


def test_require_engines_takes_the_new_names(fixtures_root: Path) -> None:
    draft = str(fixtures_root / "drafts/Qwen3.5-122B-A10B-DFlash")
    ok = run_cli("inspect", draft, "--require-engines", "exllamav3,mlx-vlm,sglang", "--json")
    assert ok.code == 0, ok.stdout
    bad = run_cli("inspect", draft, "--require-engines", "tensorrt-llm", "--json")
    assert bad.code == 1
    [f] = [f for f in bad.result()["findings"] if f["code"] == "DF144"]
    assert "tensorrt-llm (TensorRT-LLM)" in f["message"] and "normalize" in f["message"]
    unknown = run_cli("inspect", draft, "--require-engines", "trt")
    assert unknown.code == 2 and "exllamav3-legacy" in unknown.stderr


# -- keys that change acceptance ---------------------------------------------------------------


def _mimo(cfg: dict[str, Any]) -> None:
    """As XiaomiMiMo/MiMo-V2.5-Pro-FP4-DFlash declares them: sink bias and SWA, no layer_types."""
    cfg["dflash_config"].update({"attention_sink_bias": True, "use_swa": True, "swa_window_size": 128})


def test_acceptance_keys_warn_and_name_the_engines(fixtures_root: Path, tmp_path: Path) -> None:
    draft = edited(fixtures_root / "mutants/base", tmp_path / "d", _mimo)
    doc = inspect(draft, "--target", str(fixtures_root / "mutants/targets/small"))
    assert doc["exit_code"] == 0  # a warning: it loads
    msgs = {f["key"]: f["message"] for f in doc["findings"] if f["code"] == "DF150"}
    assert set(msgs) == {"dflash_config.attention_sink_bias", "dflash_config.use_swa"}
    sink = msgs["dflash_config.attention_sink_bias"]
    assert "(applied by SGLang, vLLM, exllamav3)" in sink and "lmdeploy 0.18" in sink and "TensorRT-LLM" in sink.split("applied by")[0]
    assert "applied by vLLM, TensorRT-LLM" in msgs["dflash_config.use_swa"]
    readers = doc["readers"]
    assert readers["zlab"]["reason"].startswith("loads, but ignores dflash_config.attention_sink_bias, dflash_config.use_swa")
    assert readers["sglang"]["reason"].startswith("loads, but ignores dflash_config.use_swa")
    assert readers["exllamav3"]["reason"].startswith("loads, but ignores dflash_config.use_swa")
    assert readers["exllamav3-legacy"]["reason"].startswith("loads, but ignores dflash_config.attention_sink_bias")
    assert "ignores" not in readers["vllm"]["reason"]  # vLLM applies both
    assert "ignores" not in readers["speculators"]["reason"]  # a converter, not a server
    strict = run_cli("inspect", str(draft), "--strict", "--json")
    assert strict.code == 1


def test_neutral_values_are_not_reported(fixtures_root: Path, tmp_path: Path) -> None:
    def neutral(cfg: dict[str, Any]) -> None:
        cfg["dflash_config"].update({"attention_sink_bias": False, "use_swa": False, "output_multiplier": 1.0})
        cfg["is_causal"] = False
    doc = inspect(edited(fixtures_root / "mutants/base", tmp_path / "d", neutral))
    assert "DF150" not in {f["code"] for f in doc["findings"]}
    assert all("ignores" not in v["reason"] for v in doc["readers"].values())


def test_smoke_run_refuses_keys_the_runtime_lacks(cli, tmp_path: Path) -> None:
    draft, target = tm.make_pair(tmp_path / "pair")
    cfg_path = Path(draft) / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["dflash_config"]["attention_sink_bias"] = True
    cfg_path.write_text(json.dumps(cfg))
    res = smoke(cli, (str(draft), str(target)), "-n", "4")
    assert res.code == 2
    [line] = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert "DF151 error" in line and "'dflash_config.attention_sink_bias' (true)" in line and str(cfg_path) in line
    cfg["dflash_config"]["attention_sink_bias"] = False
    cfg["draft_vocab_size"] = 17
    cfg_path.write_text(json.dumps(cfg))
    res = smoke(cli, (str(draft), str(target)), "-n", "4")
    assert res.code == 2 and "DF151" in res.stderr and "draft_vocab_size" in res.stderr


# -- DFlash2 per engine --------------------------------------------------------------------------


def test_dflash2_pairs_and_keys_per_engine(fixtures_root: Path, tmp_path: Path) -> None:
    draft = edited(fixtures_root / "mutants/base2", tmp_path / "d", lambda c: c["dflash_config"].pop("selector_top_k"))
    readers = inspect(draft)["readers"]
    assert readers["vllm"]["loads"] is False and "all four" in readers["vllm"]["reason"] and "selector_top_k" in readers["vllm"]["reason"]
    assert readers["sglang"]["loads"] is False and "only selector_rank is there" in readers["sglang"]["reason"]
    assert readers["zlab"]["loads"] is True


def test_dflash2_labelled_v1_fails_everywhere(fixtures_root: Path) -> None:
    doc = inspect(fixtures_root / "mutants/DF152-dflash2-labelled-v1")
    assert "DF152" in {f["code"] for f in doc["findings"]}
    assert not any(v["loads"] for v in doc["readers"].values())
    assert all("runs the draft as DFlash v1" in v["reason"] for v in doc["readers"].values())


def test_quantized_lm_head_fails_vllm_for_dflash2_only(fixtures_root: Path) -> None:
    m = fixtures_root / "mutants"
    doc = inspect(m / "base2", "--target", str(m / "targets/DF312-quantized-lm-head"))
    assert doc["readers"]["vllm"]["loads"] is False and "unquantized target lm_head" in doc["readers"]["vllm"]["reason"]
    v1 = inspect(m / "base", "--target", str(m / "targets/DF312-quantized-lm-head"))
    assert "DF312" not in {f["code"] for f in v1["findings"]} and v1["readers"]["vllm"]["loads"] is True


def test_lm_head_in_the_ignore_list_is_unquantized(fixtures_root: Path, tmp_path: Path) -> None:
    target = tmp_path / "t"
    shutil.copytree(fixtures_root / "mutants/targets/DF312-quantized-lm-head", target)
    cfg = json.loads((target / "config.json").read_text())
    cfg["quantization_config"]["ignore"] = ["lm_head"]
    (target / "config.json").write_text(json.dumps(cfg))
    doc = inspect(fixtures_root / "mutants/base2", "--target", str(target))
    assert "DF312" not in {f["code"] for f in doc["findings"]} and doc["readers"]["vllm"]["loads"]


# -- checks users hit --------------------------------------------------------------------------


def test_mask_is_special_token_names_the_file(fixtures_root: Path) -> None:
    m = fixtures_root / "mutants"
    eos = inspect(m / "base", "--target", str(m / "targets/DF310-mask-is-eos"))
    [f] = [f for f in eos["findings"] if f["code"] == "DF310"]
    assert "eos_token_id in config.json" in f["message"]
    bos = inspect(m / "base", "--target", str(m / "targets/DF310-mask-is-generation-bos"))
    [f] = [f for f in bos["findings"] if f["code"] == "DF310"]
    assert "bos_token_id in generation_config.json" in f["message"]


def test_reduced_vocab_maps_are_checked(fixtures_root: Path) -> None:
    ok = inspect(fixtures_root / "mutants/DF153-reduced-vocab")
    assert {f["code"] for f in ok["findings"] if f["severity"] == "error"} == set()
    assert "DF214" not in {f["code"] for f in ok["findings"]}  # d2t/t2d are expected with draft_vocab_size
    bad = inspect(fixtures_root / "mutants/DF225-d2t-wrong-shape")
    [f] = [f for f in bad["findings"] if f["code"] == "DF225"]
    assert "'d2t' is [1024], expected [512]" in f["message"]


def test_pickled_side_file_is_listed_not_opened(fixtures_root: Path) -> None:
    doc = inspect(fixtures_root / "mutants/DF226-mask-embedding-pickle")
    codes = [f["code"] for f in doc["findings"]]
    assert "DF226" in codes and "DF202" not in codes
    [f] = [f for f in doc["findings"] if f["code"] == "DF226"]
    assert "mask_embedding.pt" in f["message"] and "torch.load" in f["message"]


@pytest.mark.slow
def test_hub_draft_without_a_commit_gets_the_commit(hub_server: HubServer, tmp_path: Path) -> None:
    hub_server.reset()
    env = hub_env(hub_server, tmp_path / "hf")
    res = run_cli("inspect", "tiny/draft", "--json", env=env, timeout=120)
    assert res.code == 0, res.stderr
    [f] = [f for f in res.result()["findings"] if f["code"] == "DF314"]
    commit = f["message"].split("pin it as tiny/draft@")[1]
    assert len(commit) == 40 and "resolved to commit " + commit in f["message"]
    pinned = run_cli("inspect", f"tiny/draft@{commit}", "--json", env=env, timeout=120)
    assert pinned.code == 0 and "DF314" not in {f["code"] for f in pinned.result()["findings"]}


def test_hub_pair_serve_lines_pin_the_draft_commit(hub_server: HubServer, tmp_path: Path) -> None:
    hub_server.reset()
    env = hub_env(hub_server, tmp_path / "hf")
    res = run_cli("inspect", "z-lab/Qwen3-4B-DFlash-b16", "--target", "Qwen/Qwen3-4B", "--json", env=env, timeout=120)
    assert res.code == 0, res.stderr
    doc = res.result()
    [pin] = [f for f in doc["findings"] if f["code"] == "DF314"]
    commit = pin["message"].rsplit("@", 1)[1]
    vllm = doc["serve"]["vllm"]
    assert vllm[:3] == ["vllm", "serve", "Qwen/Qwen3-4B"]
    assert json.loads(vllm[vllm.index("--speculative-config") + 1]) == {"method": "dflash", "model": "z-lab/Qwen3-4B-DFlash-b16",
                                    "num_speculative_tokens": 15, "revision": commit}
    sglang = doc["serve"]["sglang"]
    assert sglang[sglang.index("--speculative-draft-model-path") + 1] == "z-lab/Qwen3-4B-DFlash-b16"
    assert sglang[sglang.index("--speculative-draft-model-revision") + 1] == commit


# -- serve lines -------------------------------------------------------------------------------


def _fake_engines(bin_dir: Path, log: Path) -> dict[str, str]:
    """Stand-ins for vllm, python and trtllm-serve that record the argv and env they get."""
    bin_dir.mkdir()
    for name in ("vllm", "python", "trtllm-serve", "lmdeploy"):
        exe = bin_dir / name
        exe.write_text(f"#!/bin/sh\nexec {shlex.quote(shutil.which('python3') or 'python3')} -c "
                       "'import json, os, sys; print(json.dumps({\"argv\": sys.argv[1:], \"v2\": os.environ.get(\"VLLM_USE_V2_MODEL_RUNNER\")}))'"
                       f" \"$@\" >> {shlex.quote(str(log))}\n")
        exe.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}


def test_serve_lines_are_argv_that_run(fixtures_root: Path, tmp_path: Path) -> None:
    draft, target = fixtures_root / "drafts/Qwen3.5-122B-A10B-DFlash", fixtures_root / "targets/Qwen3.5-122B-A10B"
    doc = inspect(draft, "--target", str(target))
    serve = doc["serve"]
    assert set(serve) == {"vllm", "sglang", "lmdeploy"}  # TensorRT-LLM needs block_size at the top level
    for argv in serve.values():
        assert isinstance(argv, list) and all(isinstance(a, str) for a in argv)
        assert shlex.split(shlex.join(argv)) == argv
    vllm = serve["vllm"]
    assert vllm[:4] == ["env", "VLLM_USE_V2_MODEL_RUNNER=1", "vllm", "serve"]  # sliding + full layers
    assert json.loads(vllm[vllm.index("--speculative-config") + 1]) == {
        "method": "dflash", "model": str(draft), "num_speculative_tokens": 15}
    sglang = serve["sglang"]
    assert sglang[sglang.index("--speculative-algorithm") + 1] == "DFLASH"
    assert sglang[sglang.index("--speculative-num-draft-tokens") + 1] == "16"
    # each line, pasted into a shell, reaches the engine with the same argv
    # every sequence's K+1 verify tokens fit a batch (vllm#50708, PR #53970)
    seqs, tokens = (int(vllm[vllm.index(flag) + 1]) for flag in ("--max-num-seqs", "--max-num-batched-tokens"))
    assert seqs * (15 + 1) <= tokens
    # lmdeploy 0.18 serves DFlash from its PyTorch engine's CLI
    assert serve["lmdeploy"] == ["lmdeploy", "serve", "api_server", str(target), "--backend", "pytorch",
                                 "--speculative-algorithm", "dflash", "--speculative-draft-model", str(draft),
                                 "--speculative-dflash-block-size", "16"]
    log = tmp_path / "log.jsonl"
    env = _fake_engines(tmp_path / "bin", log)
    for engine in ("vllm", "lmdeploy"):
        subprocess.run(["sh", "-c", shlex.join(serve[engine])], env=env, check=True, cwd=tmp_path)
    vllm_run, lmdeploy_run = (json.loads(line) for line in log.read_text().splitlines())
    assert vllm_run == {"argv": vllm[3:], "v2": "1"}
    assert lmdeploy_run["argv"] == serve["lmdeploy"][1:]


def test_tensorrt_llm_serve_line_writes_its_options(fixtures_root: Path, tmp_path: Path) -> None:
    draft = fixtures_root / "drafts/gpt-oss-20b-DFlash"
    doc = inspect(draft, "--target", str(fixtures_root / "targets/gpt-oss-20b"))
    argv = doc["serve"]["tensorrt-llm"]
    assert "vllm" in doc["serve"] and doc["serve"]["vllm"][0] == "vllm"  # full attention only: no env
    log = tmp_path / "log.jsonl"
    env = _fake_engines(tmp_path / "bin", log)
    subprocess.run(argv, env=env, check=True, cwd=tmp_path)
    assert json.loads(log.read_text())["argv"][:2] == ["serve", str(fixtures_root / "targets/gpt-oss-20b")]
    options = (tmp_path / "dflash-options.yaml").read_text()
    assert "max_draft_len: 7" in options and f'speculative_model: "{draft}"' in options


def test_no_serve_lines_for_a_failing_pair_or_without_target(fixtures_root: Path) -> None:
    draft = fixtures_root / "drafts/Qwen3-4B-DFlash-b16"
    assert inspect(draft)["serve"] == {}
    assert inspect(draft, "--target", str(fixtures_root / "targets/Qwen3-8B"))["serve"] == {}


def test_human_report_ends_with_serve_lines(fixtures_root: Path) -> None:
    res = run_cli("inspect", str(fixtures_root / "drafts/Qwen3-4B-DFlash-b16"), "--target",
                  str(fixtures_root / "targets/Qwen3-4B"), env={"COLUMNS": "400"})
    assert res.code == 0
    lines = res.stdout.rstrip().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("serve it with"))
    tail = lines[start + 1:]
    assert [line.split(":")[0].strip() for line in tail] == ["vllm", "sglang", "tensorrt-llm", "then run", "lmdeploy"]
    assert tail[4].startswith("  lmdeploy: no line: lmdeploy 0.18 reads block_size only from dflash_config")  # said, not dropped
    assert tail[0].startswith("  vllm: vllm serve ") and "num_speculative_tokens\": 15" in tail[0]
    # TensorRT-LLM: the YAML it reads (flow style, one line), then the command: two readable parts of the
    # argv in JSON, which writes the file and runs the command
    yaml = pytest.importorskip("yaml")
    written = tail[2].removeprefix("  tensorrt-llm: write dflash-options.yaml: ")
    command = tail[3].removeprefix("    then run: ")
    argv = inspect(fixtures_root / "drafts/Qwen3-4B-DFlash-b16", "--target", str(fixtures_root / "targets/Qwen3-4B"))["serve"]["tensorrt-llm"]
    script = shlex.split(argv[2])
    assert yaml.safe_load(written) == yaml.safe_load("\n".join(script[2:script.index(">")])) == {"speculative_config": {
        "decoding_type": "DFlash", "max_draft_len": 15, "speculative_model": str(fixtures_root / "drafts/Qwen3-4B-DFlash-b16")}}
    assert shlex.split(command) == script[script.index("exec") + 1:] and command.startswith("trtllm-serve serve ")
