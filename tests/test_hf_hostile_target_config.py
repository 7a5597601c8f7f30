"""The transformers backend against a hostile target config (issue 18): values that name code or
Hub repos are never acted on, the attention implementation is the backend's own, and ~20 broken
target configs are one DF142 line (exit 2) under both backends before anything is allocated."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")

from conftest import ROOT, error_line, no_traceback, smoke  # noqa: E402

from dflash_ckpt.runtime.hf_config import CODE_KEYS, clean_config  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

PAIR = ROOT / "fixtures" / "tiny-pair"
BASE = json.loads((PAIR / "target" / "config.json").read_text())

#: Keys transformers would turn into a Hub download or an import, with hostile values.
HOSTILE_CODE = {
    "_attn_implementation": "kernels-community/flash-attn3",
    "attn_implementation": "evil-org/attention-kernel",
    "_attn_implementation_internal": "evil-org/k2",
    "experts_implementation": "evil-org/moe-kernel",
    "use_kernels": True,
    "kernel_config": {"kernel_mapping": {"RMSNorm": "evil-org/rmsnorm"}},
    "auto_map": {"AutoModelForCausalLM": "modeling_evil.EvilForCausalLM"},
    "custom_pipelines": {"text-generation": {"impl": "pipe_evil.Pipe"}},
    "configuration_files": ["config.evil.json"],
    "_name_or_path": "evil-org/evil-model",
}
#: Of those, the values that ask for kernel code from the Hub: refused on either backend (DF321,
#: issue 39; they ran stripped, exit 0 and no word, in round 4). The rest are stripped and the
#: target runs.
HUB_CODE = ("_attn_implementation", "attn_implementation", "_attn_implementation_internal", "experts_implementation",
            "use_kernels", "kernel_config")
STRIPPED = {**{k: v for k, v in HOSTILE_CODE.items() if k not in HUB_CODE}, "_attn_implementation": "flash_attention_2"}


def target_with(folder: Path, patch: dict[str, Any], *, extra_files: bool = False) -> Path:
    folder.mkdir(parents=True)
    for f in (PAIR / "target").iterdir():
        if f.name != "config.json":
            os.symlink(f, folder / f.name)
    (folder / "config.json").write_text(json.dumps({**BASE, **patch}))
    if extra_files:
        (folder / "modeling_evil.py").write_text("raise SystemExit('custom code ran')\n")
        (folder / "config.evil.json").write_text(json.dumps({**BASE, "hidden_size": 4096}))
        (folder / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "evil-org/base", "peft_type": "LORA"}))
    return folder


def test_clean_config_removes_every_code_key_at_every_level() -> None:
    cfg = {**BASE, **HOSTILE_CODE, "text_config": {**BASE, **HOSTILE_CODE},
           "quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert": ["lm_head"], "kernel": "evil/k"}}
    clean, removed = clean_config(cfg)
    assert not CODE_KEYS & set(clean) and not CODE_KEYS & set(clean["text_config"])
    assert clean["quantization_config"] == {"quant_method": "mxfp4", "modules_to_not_convert": ["lm_head"]}
    assert {f"text_config.{k}" for k in HOSTILE_CODE} <= set(removed)
    assert clean["hidden_size"] == BASE["hidden_size"] and clean["text_config"]["vocab_size"] == BASE["vocab_size"]
    other, _ = clean_config({**BASE, "quantization_config": {"quant_method": "bitsandbytes", "llm_int8_enable_fp32_cpu_offload": True}})
    assert "quantization_config" not in other


@pytest.mark.slow
def test_hostile_code_keys_never_fetch_or_import(cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import transformers.integrations.hub_kernels as hub_kernels

    import dflash_ckpt.runtime.hf_target as hf_target

    calls: list[str] = []

    def forbidden(name: str):
        def fail(*args: Any, **kwargs: Any) -> Any:
            calls.append(name)
            raise AssertionError(f"{name} called with {args!r}")
        return fail

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(socket.socket, "connect", forbidden("socket.connect"))
    for name in ("load_and_register_attn_kernel", "lazy_load_kernel", "get_kernel"):
        if hasattr(hub_kernels, name):
            monkeypatch.setattr(hub_kernels, name, forbidden(name))
    import huggingface_hub

    for name in ("hf_hub_download", "snapshot_download"):
        monkeypatch.setattr(huggingface_hub, name, forbidden(name))
    seen: list[Any] = []
    real_init = hf_target.HFTarget.__init__

    def spy(self: Any, model: Any) -> None:
        seen.append(model)
        real_init(self, model)

    monkeypatch.setattr(hf_target.HFTarget, "__init__", spy)
    target = target_with(tmp_path / "t", STRIPPED, extra_files=True)
    res = smoke(cli, (str(PAIR / "draft"), str(target)), "--backend", "transformers", "-n", "4", "--device", "cpu")
    assert res.code == 0, res.stdout + res.stderr
    assert calls == []
    (model,) = seen
    assert model.config._attn_implementation == "sdpa"  # pinned by the backend, not the config's
    assert model.config.hidden_size == BASE["hidden_size"]  # config.evil.json was never read
    assert getattr(model.config, "auto_map", None) is None


@pytest.mark.parametrize("backend", ["transformers", "native"])
@pytest.mark.parametrize("key", [*HUB_CODE, "text_config._attn_implementation"])
def test_a_config_naming_hub_kernel_code_is_one_line_before_any_load(cli: Any, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch,
                                                                      key: str, backend: str) -> None:
    import dflash_ckpt.runtime.loading as loading
    import dflash_ckpt.runtime.plan as run_plan

    def never(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a target was loaded")

    monkeypatch.setattr(loading, "load_target", never)
    monkeypatch.setattr(run_plan, "plan_target", never)
    if key.startswith("text_config."):
        patch = {"text_config": {**BASE, "_attn_implementation": "kernels-community/flash-attn"},
                 "model_type": BASE["model_type"]}
    else:
        patch = {key: "kernels-community/flash-attn" if "implementation" in key else HOSTILE_CODE[key]}
    target = target_with(tmp_path / "t", patch)
    res = smoke(cli, (str(PAIR / "draft"), str(target)), "--backend", backend, "--device", "cpu")
    assert res.code == 2, res.stdout + res.stderr
    (line,) = res.stderr.strip().splitlines()
    assert f"{target / 'config.json'}: DF321 error: key '{key}' is " in line, line
    assert "fetch from the Hub" in line and "Remove the key" in line


#: ~20 broken target configs: each is one DF142 line, exit 2, under both backends.
BROKEN = {
    "dtype-auto": {"dtype": "auto"}, "torch-dtype-auto": {"torch_dtype": "auto"}, "dtype-number": {"dtype": 42},
    "quant-list": {"quantization_config": [{"quant_method": "fp8"}]}, "quant-string": {"quantization_config": "fp8"},
    "kv-heads-0": {"num_key_value_heads": 0}, "kv-heads-3": {"num_key_value_heads": 3}, "kv-heads-8": {"num_key_value_heads": 8},
    "heads-0": {"num_attention_heads": 0}, "pad-is-vocab": {"pad_token_id": 768}, "pad-huge": {"pad_token_id": 10**12},
    "swapped": {"hidden_size": 256, "intermediate_size": 128}, "intermediate-huge": {"intermediate_size": 1_000_000},
    "vocab-huge": {"vocab_size": 10_000_000}, "layers-4000": {"num_hidden_layers": 4000}, "hidden-negative": {"hidden_size": -1},
    "head-dim-0": {"head_dim": 0}, "head-dim-string": {"head_dim": "32"}, "layers-0": {"num_hidden_layers": 0},
    "vocab-bool": {"vocab_size": True}, "eps-string": {"rms_norm_eps": "tiny"}, "positions-negative": {"max_position_embeddings": -5},
    "hidden-float": {"hidden_size": 1e30}, "text-config-list": {"text_config": [1]},
}
NEEDLE = {"swapped": "embed_tokens.weight", "intermediate-huge": "mlp.", "vocab-huge": "embed_tokens.weight",
          "layers-4000": "decoder layers"}


@pytest.mark.parametrize("backend", ["transformers", "native"])
@pytest.mark.parametrize("name", sorted(BROKEN))
def test_broken_target_config_is_one_line_before_any_load(cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         name: str, backend: str) -> None:
    import dflash_ckpt.runtime.plan as run_plan
    import dflash_ckpt.runtime.loading as loading

    def never(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a target was loaded")

    monkeypatch.setattr(loading, "load_target", never)
    monkeypatch.setattr(run_plan, "plan_target", never)
    target = target_with(tmp_path / "t", BROKEN[name])
    res = smoke(cli, (str(PAIR / "draft"), str(target)), "--backend", backend, "--device", "cpu")
    assert res.code == 2, res.stdout + res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    line = error_line(res)
    assert f"{target}/config.json" in line and "DF142 error:" in line
    assert NEEDLE.get(name, repr(next(iter(BROKEN[name])))[1:-1]) in line


MEASURE = """
import resource, subprocess, sys
proc = subprocess.run([sys.executable, "-m", "dflash_ckpt", *sys.argv[1:]], capture_output=True, text=True)
print(proc.returncode)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
print(proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "")
"""


def _peak(*args: str) -> tuple[int, int, str]:
    proc = subprocess.run([sys.executable, "-c", MEASURE, *args], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    code, peak, line = proc.stdout.split("\n", 2)
    return int(code), int(peak), line.strip()


@pytest.mark.slow
def test_an_oversized_config_is_refused_at_the_memory_of_a_refusal(tmp_path: Path) -> None:
    """``intermediate_size`` a thousand times the weights' (6.5 GB before, issue 18) costs what a
    one-line refusal costs: the peak stays within 100 MiB of refusing a bad ``--device`` (same backend)."""
    draft = str(PAIR / "draft")
    code, baseline, _ = _peak("smoke-run", draft, "--target", str(PAIR / "target"), "--backend", "transformers", "--device", "tpu")
    assert code == 2
    for name in ("intermediate-huge", "layers-4000", "vocab-huge"):
        target = target_with(tmp_path / name, BROKEN[name])
        code, peak, line = _peak("smoke-run", draft, "--target", str(target), "--backend", "transformers")
        assert code == 2 and "DF142" in line, line
        assert peak - baseline < 100 * 1024, f"{name}: {(peak - baseline) // 1024} MiB above a refusal"
