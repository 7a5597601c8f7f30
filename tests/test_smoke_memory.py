"""smoke-run's (and probe-taps') memory pre-check (runtime/memory.py, DF407): the peak counted from the config
shapes, real limits (RLIMIT_AS set in a child process, as ``prlimit --as`` does), and an
out-of-memory error during the run reported as one line with exit 2, never a traceback/exit 1.

The pairs have Qwen3-0.6B's real shapes with sparse weight files (a real header, a hole for the
data): 1.3 GiB on paper, nothing on disk, so refusals before loading cost nothing."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from conftest import ROOT, one_error_line
from dflash_ckpt.draftspec.specs import build_spec, target_from_config
from dflash_ckpt.runtime import memory
from dflash_ckpt.runtime.memory import RunEstimate, Shapes, cgroup_room, require_fits, estimate_run, is_out_of_memory

sys.path.insert(0, str(ROOT))
from benchmarks.real_pairs import SHAPES, build_pair  # noqa: E402

GIB = 2 ** 30
Q06 = {k: v for k, v in SHAPES["0.6b"].items() if k != "taps"}


@pytest.fixture(scope="module")
def sparse_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return build_pair("0.6b", tmp_path_factory.mktemp("q06"), sparse=True)


def _shapes(config: dict) -> Shapes | None:
    return Shapes.of_target(target_from_config(config, label="t", where="t"))


def _estimate(target_config: dict = Q06, **over) -> RunEstimate:
    kw = dict(target=_shapes(target_config), target_file_bytes=0, target_dtype=torch.bfloat16,
              draft=Shapes.of_draft(build_spec({**Q06, "num_hidden_layers": 5}, label="d")), draft_file_bytes=0,
              draft_dtype=torch.bfloat16, capacity=1024, longest=1000, block=16, backend="native", taps=5)
    return estimate_run(**{**kw, **over})


def test_the_estimate_counts_config_shapes_caches_activations_and_logits() -> None:
    est = _estimate()
    # Qwen3-0.6B: 596M parameters with tied embeddings (its model card: 0.6B), bf16.
    assert _shapes(Q06).params() == pytest.approx(596e6, rel=0.01)
    draft = (5 * (1024 * (16 + 16) * 128 + 16 * 128 * 1024 + 3 * 1024 * 3072 + 2 * 1024 + 256) + 1024
             + 1024 * 5 * 1024) * 2
    assert est.parts["weights"] == _shapes(Q06).params() * 2 + draft
    assert est.parts["KV caches"] == 2 * (28 + 5) * 8 * 128 * 1024 * 2
    assert est.parts["logits"] == 1000 * 151936 * 10  # bf16 + the judge's float32 copy + compare
    assert est.parts["activations"] > 2 * 16 * 1000 * 1024 * 4  # attention scores over the cache
    # A config far above its files is counted by the config (the model is built from it) ...
    big = _estimate(target_config={**Q06, "intermediate_size": 30720}, target_file_bytes=10)
    assert big.parts["weights"] - est.parts["weights"] == 28 * 3 * 1024 * (30720 - 3072) * 2
    # ... and files above the config (extra tensors) by the files; MoE configs by the files only.
    assert _estimate(target_file_bytes=10 * GIB).parts["weights"] > 10 * GIB
    moe = _estimate(target_config={**Q06, "num_experts": 64}, target_file_bytes=GIB)
    assert moe.parts["weights"] == GIB + draft
    hf = _estimate(backend="transformers", target_file_bytes=GIB)
    assert hf.parts["transformers overhead"] > 0 and hf.mapped == GIB
    assert _estimate(capacity=4096).parts["KV caches"] == 4 * est.parts["KV caches"]


def test_refusal_names_needed_and_available_and_advice_fits_the_dtype(monkeypatch) -> None:
    est = RunEstimate({"weights": 3 * GIB, "KV caches": GIB})
    monkeypatch.setattr(memory, "memory_limits", lambda device: {"MemAvailable": 8 * GIB, "cgroup memory room": 2 * GIB})
    with pytest.raises(Exception) as info:
        require_fits(est, torch.device("cpu"), "t", target_dtype=torch.bfloat16)
    err = info.value
    assert err.code == "DF407" and err.exit_code == 2
    assert f"needs 4.00 GiB ({4 * GIB} bytes)" in err.message and f"({2 * GIB} bytes) are free (cgroup memory room)" in err.message
    assert "weights 3.00 GiB, KV caches 1.00 GiB" in err.message and "bfloat16" not in err.message
    with pytest.raises(Exception) as info:
        require_fits(est, torch.device("cpu"), "t", target_dtype=torch.float32)
    assert "--target-dtype bfloat16" in info.value.message
    # The transformers backend's mappings count against the address space only.
    monkeypatch.setattr(memory, "memory_limits", lambda device: {"MemAvailable": 8 * GIB, "RLIMIT_AS room": 5 * GIB})
    require_fits(est, torch.device("cpu"), "t")
    with pytest.raises(Exception) as info:
        require_fits(RunEstimate(est.parts, mapped=2 * GIB), torch.device("cpu"), "t")
    assert "(RLIMIT_AS room)" in info.value.message and "files mapped 2.00 GiB" in info.value.message


def test_cgroup_limits_v1_and_v2_are_read_along_the_path(tmp_path: Path) -> None:
    root = tmp_path / "cg"
    leaf = root / "a" / "b"
    leaf.mkdir(parents=True)
    (root / "a" / "memory.max").write_text(f"{3 * GIB}\n")
    (root / "a" / "memory.current").write_text(f"{GIB}\n")
    (leaf / "memory.max").write_text("max\n")
    (leaf / "memory.current").write_text("5\n")
    self_cg = tmp_path / "self"
    self_cg.write_text("0::/a/b\n")
    assert cgroup_room(root, self_cg) == 2 * GIB
    v1 = root / "memory" / "x"
    v1.mkdir(parents=True)
    (v1 / "memory.limit_in_bytes").write_text(f"{GIB}\n")
    (v1 / "memory.usage_in_bytes").write_text(f"{GIB // 4}\n")
    self_cg.write_text("4:memory:/x\n3:cpu:/y\n")
    assert cgroup_room(root, self_cg) == GIB - GIB // 4
    self_cg.write_text("0::/nowhere\n")
    assert cgroup_room(root, self_cg) is None


def test_out_of_memory_errors_are_recognised() -> None:
    assert is_out_of_memory(MemoryError())
    assert is_out_of_memory(RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 8 bytes"))
    assert is_out_of_memory(RuntimeError("unable to mmap 1192135064 bytes from file <x>: Cannot allocate memory (12)"))
    assert not is_out_of_memory(RuntimeError("shape mismatch"))
    assert not is_out_of_memory(ValueError("out of memory"))


_CHILD = textwrap.dedent("""
    import resource, sys
    import dflash_ckpt.run.smoke, dflash_ckpt.commands.smoke_cmd, dflash_ckpt.cli, dflash_ckpt.entry, tokenizers, jinja2
    import dflash_ckpt.runtime.memory as memory
    mode, extra, command = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    if mode == "run-oom":  # the pre-check believes everything fits: the run itself must run out
        memory.memory_limits = lambda device: {}
        import dflash_ckpt.sources.weight_sample as ws  # and the sparse (zero) weights pass DF413
        ws.constant_tensors = lambda *a, **k: []
    vm = next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmSize:"))
    resource.setrlimit(resource.RLIMIT_AS, (vm + extra, resource.RLIM_INFINITY))
    sys.argv = ["dflash-ckpt", command, *sys.argv[4:]]
    dflash_ckpt.entry.main()
""")


def _limited(mode: str, extra: int, pair: tuple[Path, Path], command: str = "smoke-run") -> subprocess.CompletedProcess:
    args = [str(pair[0]), "--target", str(pair[1]), "-n", "8", "--min-acceptance", "0", "--ignore-eos", "-p", "hi",
            "--no-chat-template", "--quiet"]
    return subprocess.run([sys.executable, "-c", _CHILD, mode, str(extra), command, *args], capture_output=True, text=True,
                          timeout=300, env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin",
                                            "PYTHONPATH": str(ROOT)}, cwd=ROOT)


@pytest.mark.slow
@pytest.mark.parametrize("command", ["smoke-run", "probe-taps"])
def test_an_address_space_limit_refuses_before_loading(sparse_pair, command: str) -> None:
    """RLIMIT_AS with 600 MiB of room (what ``prlimit --as`` sets): the 0.6B pair needs ~1.5
    GiB; before, this passed the check and died in loading with exit 1 (probe-taps, which opens
    the pair as smoke-run does, too)."""
    err = one_error_line(_limited("precheck", 600 << 20, sparse_pair, command), code="DF407")
    assert "(RLIMIT_AS room)" in err and "at its peak on cpu (weights 1.27 GiB" in err
    assert "--target-dtype" not in err  # the target already runs in bf16


@pytest.mark.slow
def test_running_out_of_memory_during_the_run_is_one_line_exit_2(sparse_pair) -> None:
    """The pre-check is blinded; the load itself runs out of address space."""
    err = one_error_line(_limited("run-oom", 600 << 20, sparse_pair), code="DF407")
    assert "ran out of memory during the run" in err
