"""What each engine does with the draft architectures registered since October 2026 (vLLM 0.33 and
0.34, speculators 0.9.0): runs, refuses, misserves, or unknown (not read in its source).

Sources (shared/ecosystem-2026-12.md section 1.3-1.4; vLLM wheels' ``model_executor/models/registry.py``
and ``transformers_utils/configs/speculators/algos.py``; speculators 0.9.0 ``models/*/config.py``).
``judge_readers`` turns a refusal or misserve into a failing row, and "unknown" into a note on a
row that loads, so no row claims more than was read.
"""

from __future__ import annotations

from typing import NamedTuple

from dflash_ckpt.checks.engines.reading import MISSERVES, REFUSES, RUNS
from dflash_ckpt.draftspec.specs import DraftSpec

UNKNOWN = "unknown"


class ArchFacts(NamedTuple):
    """One architecture: each engine's status and why (engines not named: ``other``)."""

    engines: dict[str, tuple[str, str]]
    other: tuple[str, str]


_XPRESS_ELSEWHERE = (UNKNOWN, "no XPress path read in its source (at best the DFlash backbone without its "
                              "xpress_head refiner)")
_VLLM_XPRESS = (RUNS, "vLLM 0.33+ only (qwen3_xpress.py; 0.32 does not register it), 1+N only: its XPress "
                      "speculator raises for sample_from_anchor true (xpress/speculator.py:29-35)")
_NEW_ELSEWHERE = (UNKNOWN, "architecture registered only by vLLM; not read in this engine's source")

ARCHITECTURES: dict[str, ArchFacts] = {
    "Qwen3XPressModel": ArchFacts({"vllm": _VLLM_XPRESS}, _XPRESS_ELSEWHERE),
    "DFlashQwen3XPressModel": ArchFacts({"vllm": _VLLM_XPRESS}, _XPRESS_ELSEWHERE),
    "XPressSpeculator": ArchFacts({
        "vllm": (REFUSES, "its speculators adapter registers dflash, dflash2 and dspark, not xpress "
                          "(0.34 algos.py:58,97,120)"),
        "speculators": (RUNS, "speculators 0.9.0's XPress config (models/xpress/config.py)"),
    }, _XPRESS_ELSEWHERE),
    "DFlashSpeculator": ArchFacts({
        "vllm": (RUNS, "through its speculators adapter, which sets architectures DFlashDraftModel (algos.py:77)"),
        "speculators": (RUNS, "speculators 0.9.0's DFlash class default"),
    }, (UNKNOWN, "speculators' class name; convert the draft to the z-lab form (dflash-ckpt normalize) for this engine")),
    "DSparkSpeculator": ArchFacts({
        "vllm": (RUNS, "through its speculators adapter (dspark: algos.py:120-154, default Qwen3DSparkModel)"),
        "speculators": (RUNS, "speculators 0.9.0's DSpark class default"),
    }, (UNKNOWN, "speculators' class name; not read in this engine's source")),
    "DFlash2BeamDraftModel": ArchFacts({
        "vllm": (RUNS, "vLLM 0.33+ (vllm/models/beam/, NVIDIA and AMD kernels only: not on the CPU build)"),
    }, _NEW_ELSEWHERE),
    "DFlash2RicursiveDraftModel": ArchFacts({
        "vllm": (RUNS, "vLLM 0.34+ (ricursive_dflash2.py: NoPE layers from the target's no_rope_layers)"),
    }, _NEW_ELSEWHERE),
    "DSparkMiniMaxDraftModel": ArchFacts({
        "vllm": (RUNS, "vLLM 0.34+ with method dspark (minimax_m3/common/dspark.py; MiniMax-M3 ships the draft in "
                       "the target's dspark/ folder)"),
    }, _NEW_ELSEWHERE),
    "MuseSparkDSparkModel": ArchFacts({
        "vllm": (RUNS, "vLLM 0.33+ with method dspark (muse_spark/common/dspark.py)"),
    }, _NEW_ELSEWHERE),
    "MistralLarge4DSparkModel": ArchFacts({
        "vllm": (RUNS, "vLLM 0.34+ with method dspark (mistral_large4, NVIDIA and AMD kernels only)"),
    }, _NEW_ELSEWHERE),
}


def architecture_status(engine: str, spec: DraftSpec) -> list[tuple[str, str, str]]:
    """``(architecture, status, why)`` for each of the draft's architectures in the table."""
    out = []
    for arch in spec.architectures:
        facts = ARCHITECTURES.get(arch)
        if facts is not None:
            status, why = facts.engines.get(engine, facts.other)
            out.append((arch, status, why))
    return out


def architecture_problems(engine: str, spec: DraftSpec) -> tuple[list[str], list[str]]:
    """(problems that fail the row, notes on a row that loads) for this engine."""
    problems: list[str] = []
    notes: list[str] = []
    for arch, status, why in architecture_status(engine, spec):
        if status in (REFUSES, MISSERVES):
            problems.append(f"{status} {arch}: {why}")
        elif status == UNKNOWN:
            notes.append(f"{arch} unverified: {why}")
        else:
            notes.append(f"{arch}: {why}")
    return problems, notes
