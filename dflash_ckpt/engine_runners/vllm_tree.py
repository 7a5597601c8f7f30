"""What a vLLM file tree can do for DFlash, judged from the paths it holds (no import, no run).

The same function judges the installed tree (the facts probe lists the watched paths of the
engine's python's ``vllm/``) and the listings of the registry's wheels that the tests keep
(``tests/data/vllm-trees/<dist>-<version>.txt``, made by ``tests/make_vllm_trees.py``), so the
facts for 0.32, 0.33 and 0.34 are tested the way the probe reads them.

Facts (shared/ecosystem-2026-12.md section 1.2-1.3; paths in the wheels' listings):

- V1 DFlash: ``model_executor/models/qwen3_dflash.py`` and ``v1/spec_decode/dflash.py`` (the V1
  ``DFlashProposer``), in 0.32.0 and 0.33.0; 0.34.0 removed every ``v1/spec_decode/*`` but
  ``metrics.py`` and ``dynamic/``.
- V2 DFlash: ``v1/worker/gpu/spec_decode/dflash/speculator.py`` beside ``v1/worker/gpu/model_runner.py``
  (0.32.0 onwards).
- The V1 runner: ``v1/worker/gpu_model_runner.py`` (and the CPU build's ``v1/worker/cpu_model_runner.py``);
  gone in 0.34.0 (Model Runner V1 removed). Without it ``VLLM_USE_V2_MODEL_RUNNER=0`` raises and
  ``=1`` only warns (0.34 ``platforms/interface.py:1480-1490``); with it, no Triton means V1
  (0.32/0.33 ``config/vllm.py`` ``use_v2_model_runner``: "Model Runner V2 requires Triton; using
  the V1 model runner instead").
- x86 CPUs need Triton (triton-cpu, not on the registry) when the V1 CPU runner is gone: 0.34
  ``platforms/cpu.py:239-243`` raises "vLLM on x86 CPUs requires Triton (triton-cpu)"; other CPUs
  get ``v1/worker/cpu/standalone_model_runner.py`` (``cpu.py:652-656``).
- The DSpark method check: ``v1/worker/gpu/spec_decode/speculator_config.py`` (0.34.0, ``:404-425``)
  refuses ``method: "dflash"`` on a DSpark checkpoint with a clear message; before it the
  DeepSpec drafts failed in the registry (vllm#49614).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

#: The paths under ``vllm/`` the facts read, as ``/``-separated patterns (``*`` within one part).
WATCHED: tuple[str, ...] = (
    "model_executor/models/qwen3_dflash.py",
    "model_executor/models/qwen3_dflash2.py",
    "model_executor/models/*dflash*.py",
    "model_executor/models/*dspark*.py",
    "model_executor/models/*xpress*.py",
    "v1/spec_decode/dflash.py",
    "v1/worker/gpu_model_runner.py",
    "v1/worker/cpu_model_runner.py",
    "v1/worker/gpu/model_runner.py",
    "v1/worker/gpu/spec_decode/*/speculator.py",
    "v1/worker/gpu/spec_decode/speculator_config.py",
    "v1/worker/cpu/model_runner.py",
    "v1/worker/cpu/standalone_model_runner.py",
    "platforms/cpu.py",
    "transformers_utils/configs/speculators/algos.py",
)

V1, V2 = "V1", "V2"


@dataclass(frozen=True)
class Capabilities:
    """What the tree holds, as the facts use it."""

    #: The V1 DFlash proposer and model (``v1/spec_decode/dflash.py``, ``qwen3_dflash.py``).
    v1_dflash: bool
    #: The V2 runner's DFlash speculator and the model.
    v2_dflash: bool
    #: Model Runner V1 is in the tree (GPU or the CPU build's).
    v1_runner: bool
    #: The CPU worker runs the V2 runner (``v1/worker/cpu/model_runner.py`` without the V1 CPU runner).
    cpu_runner_v2_only: bool
    #: ``qwen3_dflash2.py`` and the V2 DFlash2 speculator.
    dflash2: bool

    @property
    def dflash(self) -> bool:
        """Any DFlash path at all (DF421 when not)."""
        return self.v1_dflash or self.v2_dflash


def capabilities(paths: Iterable[str]) -> Capabilities:
    """Judge a tree by its watched paths (relative to ``vllm/``)."""
    have = set(paths)
    model = "model_executor/models/qwen3_dflash.py" in have
    # The V1 proposer ships only beside the V1 runner (both removed together in 0.34).
    v1_proposer = "v1/spec_decode/dflash.py" in have
    v1_runner = v1_proposer or "v1/worker/gpu_model_runner.py" in have or "v1/worker/cpu_model_runner.py" in have
    return Capabilities(
        v1_dflash=model and v1_proposer,
        v2_dflash=model and "v1/worker/gpu/spec_decode/dflash/speculator.py" in have
        and "v1/worker/gpu/model_runner.py" in have,
        v1_runner=v1_runner,
        cpu_runner_v2_only="v1/worker/cpu/model_runner.py" in have and "v1/worker/cpu_model_runner.py" not in have,
        dflash2="model_executor/models/qwen3_dflash2.py" in have
        and "v1/worker/gpu/spec_decode/dflash2/speculator.py" in have,
    )


@dataclass(frozen=True)
class Host:
    """What the machine the engine's python runs on offers vLLM."""

    #: ``platform.machine()`` (``x86_64``, ``aarch64``, ...).
    machine: str
    #: Whether the engine's python has Triton with a CPU backend (``triton/backends/cpu``: triton-cpu);
    #: vLLM's CPU build counts Triton only then (``triton_utils/importing.py``, "Check Triton CPU").
    triton_cpu: bool
    #: Whether a GPU device is visible (``/dev/nvidia<N>``, ``/dev/kfd`` for ROCm, ``/dev/dxg`` under WSL).
    gpu: bool

    @property
    def x86(self) -> bool:
        return self.machine.lower() in ("x86_64", "amd64", "i386", "i686", "x86")


@dataclass(frozen=True)
class Runner:
    """Which model runner would run DFlash here, or why nothing would start."""

    #: ``V1``, ``V2`` or ``None`` (refused: ``code`` and ``reason`` say why).
    runner: str | None
    code: str | None = None
    reason: str | None = None


#: The variable that picks the model runner (0.32/0.33: ``envs.py`` ``maybe_convert_bool``).
RUNNER_ENV = "VLLM_USE_V2_MODEL_RUNNER"


def runner_for(caps: Capabilities, host: Host, *, cpu_build: bool, version: str | None,
               env_v2: str | None = None) -> Runner:
    """The runner a DFlash draft would get, given ``VLLM_USE_V2_MODEL_RUNNER`` (``env_v2``, the
    child inherits it; the tool never sets it). Refusals, before anything starts:

    - DF421: no DFlash path in the tree;
    - DF429: a CUDA build (distribution ``vllm``, no ``+cpu``) where no GPU is visible (vLLM's
      platform detection finds no device and it fails after loading; the tool starts nothing);
    - DF428: a CPU build whose CPU worker is V2-only (V1 removed, 0.34) on an x86 CPU without
      Triton (``platforms/cpu.py:239-243`` raises "vLLM on x86 CPUs requires Triton (triton-cpu)");
    - DF432: ``VLLM_USE_V2_MODEL_RUNNER`` set to anything but ``1`` where V1 is gone (0.34
      ``platforms/interface.py:1480-1486`` raises "... is no longer supported: Model Runner V1 has
      been removed").

    Where V1 exists, ``0`` forces V1 and ``1`` V2 (0.32/0.33 ``config/vllm.py`` ``use_v2_model_runner``
    takes the variable before it looks for Triton).
    """
    shown = version or "(version unknown)"
    if env_v2 is not None and env_v2 != "1" and not caps.v1_runner and caps.dflash:
        return Runner(None, "DF432", f"{RUNNER_ENV}={env_v2} is set, and vLLM {shown} removed Model Runner V1: it "
                                     f"raises '{RUNNER_ENV}={env_v2} is no longer supported' at start")
    forced = None if env_v2 is None else env_v2.strip().lower() in ("1", "true")
    if forced is False and caps.v1_dflash:
        return Runner(V1)
    if not caps.dflash:
        return Runner(None, "DF421", f"the installed vLLM {shown} has no DFlash (neither the V1 proposer "
                                     "v1/spec_decode/dflash.py nor the V2 speculator "
                                     "v1/worker/gpu/spec_decode/dflash/, beside model_executor/models/qwen3_dflash.py)")
    if not cpu_build and not host.gpu:
        return Runner(None, "DF429", f"the installed vLLM {shown} is a CUDA build and this machine has no GPU "
                                     "(no /dev/nvidia*); it would fail after loading")
    if cpu_build:
        if caps.cpu_runner_v2_only or not caps.v1_runner:
            if host.x86 and not host.triton_cpu:
                return Runner(None, "DF428", f"vLLM {shown} removed Model Runner V1, and on an x86 CPU its V2 runner "
                                             "requires Triton (triton-cpu), which this python lacks and the "
                                             "registry does not carry (vLLM raises 'vLLM on x86 CPUs requires Triton')")
            return Runner(V2) if caps.v2_dflash else Runner(None, "DF421", f"vLLM {shown} has no V2 DFlash speculator")
        # 0.32/0.33: the V2 runner needs Triton, else V1 (config/vllm.py use_v2_model_runner).
        if (host.triton_cpu or forced) and caps.v2_dflash:
            return Runner(V2)
        return Runner(V1) if caps.v1_dflash else Runner(None, "DF421", f"vLLM {shown} has no V1 DFlash proposer")
    return Runner(V2) if caps.v2_dflash else Runner(V1)
