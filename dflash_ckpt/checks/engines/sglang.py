"""SGLang: ``python/sglang/srt/speculative/dflash_utils.py`` ``parse_dflash_draft_config`` at
00731f0bc9fa81c39802754fb4b62e9cce967582 reads each DFlash key nested or at the top level;
``conv_kernel_size``/``conv_group_size`` and ``selector_rank``/``selector_top_k`` from
``dflash_config`` only, each pair together or a ValueError, absent pair = feature off;
``output_multiplier``, ``final_logit_softcapping``, ``attention_sink_bias``,
``attention_value_scale`` from ``dflash_config`` only. DFLASH reads no layout key in 0.5.23
(shared/DESIGN.md section 12): 1+N; DSPARK (with ``markov_rank > 0``) reads the top-level
``sample_from_anchor``.

Serve line: ``--speculative-algorithm DFLASH`` (or ``DSPARK``), ``--speculative-num-draft-tokens``
the verify window, bonus token included: the trained block B for 1+N, B+1 for an anchor-first
DSPARK draft (its draft samples from the anchor row)."""

from __future__ import annotations

from dflash_ckpt.checks.engines.launch import ServeFacts, revision_flag
from dflash_ckpt.checks.engines.reading import (MISSERVES, NESTED_THEN_TOP, RUNS, EnginePath, Reading, Verdict,
                                                dspark_from_anchor, one_plus_n)
from dflash_ckpt.checks.engines.record import Engine
from dflash_ckpt.checks.engines.versions import Versions
from dflash_ckpt.draftspec.layout import ONE_PLUS_N
from dflash_ckpt.draftspec.siblings import DSPARK
from dflash_ckpt.draftspec.specs import ABSENT, DraftSpec, TargetSpec, as_int

DSPARK_LAUNCH = "--speculative-algorithm DSPARK"
#: SGLang turns the DFlash2 features on per pair of nested keys.
PAIRS = (("conv_kernel_size", "conv_group_size", "conv layers"), ("selector_rank", "selector_top_k", "candidate selector"))


def judge(spec: DraftSpec, target: TargetSpec | None) -> Verdict:
    """Every DFlash key nested then top level; the mask id below the target's vocabulary; the
    output scaling keys read only from ``dflash_config``."""
    r = Reading(spec)
    r.read("block_size", NESTED_THEN_TOP)
    mask = r.read("mask_token_id", NESTED_THEN_TOP)
    ids = r.read("target_layer_ids", NESTED_THEN_TOP, kind="list")
    r.read("num_target_layers", NESTED_THEN_TOP)
    # parse_dflash_draft_config and resolve_target_layer_ids raise for these (dflash_utils.py in
    # the 0.5.23 wheel; tests/test_engine_parser_judges.py runs them)
    if mask is not None and mask < 0:
        r.problems.append(f"mask_token_id {mask} is negative")
    depth = as_int(target.num_hidden_layers) if target else None
    if ids is not None and not ids:
        r.problems.append("target_layer_ids is empty")
    elif ids and depth is not None and any(i < 0 or i >= depth for i in ids):
        r.problems.append(f"target_layer_ids {ids} leave the target's {depth} layers")
    vocab = as_int(target.vocab_size) if target else None
    if mask is not None and vocab is not None and mask >= vocab:
        r.problems.append(f"mask_token_id {mask} is not below the target's vocab_size {vocab}")
    for key in ("output_multiplier", "final_logit_softcapping"):
        rk = spec.extra_keys[key]
        if rk.nested is ABSENT and rk.top not in (ABSENT, None):
            r.notes.append(f"but ignores the top-level {key}={rk.top} (read only from dflash_config)")
    return r.verdict()


def path(spec: DraftSpec) -> EnginePath:
    """DSPARK for a DSpark draft with a Markov head; else DFLASH, 1+N."""
    if spec.family != DSPARK:
        return one_plus_n(spec, "--speculative-algorithm DFLASH")
    rank = spec.markov_rank
    if rank is not None and rank > 0:
        return dspark_from_anchor(spec, DSPARK_LAUNCH)
    if spec.block_layout.layout == ONE_PLUS_N:
        return EnginePath(RUNS, False, "--speculative-algorithm DFLASH runs it 1+N")
    return EnginePath(MISSERVES, False, f"its DSPARK path needs markov_rank > 0 (this draft has {rank}) and DFLASH "
                                        "runs it 1+N: every draft one position off, acceptance ~1 with no error")


def dflash2_gate(spec: DraftSpec, target: TargetSpec | None) -> list[str]:
    """Each DFlash2 feature is on only with both keys of its pair in ``dflash_config``."""
    out: list[str] = []
    for a, b, what in PAIRS:
        has_a, has_b = spec.declared(a).nested is not ABSENT, spec.declared(b).nested is not ABSENT
        if has_a != has_b:
            out.append(f"switches the {what} on by the pair dflash_config.{a} + {b}; only "
                       f"{a if has_a else b} is there")
        elif not has_a:
            out.append(f"would run without the {what} (dflash_config.{a} and {b} are absent)")
    return out


def target_quantized(target: TargetSpec) -> bool:
    """Whether the target config carries a ``quantization_config`` (top level or its text config)."""
    return bool(target.quantization_blocks)


def draft_quantization(f: ServeFacts) -> list[str]:
    """``--speculative-draft-model-quantization unquant`` when the target is quantized and the
    draft is not: SGLang gives the draft the target's ``--quantization`` otherwise, and a bf16
    DFlash2 draft served so accepts nothing (sglang PR #35629 thread; server_args:
    shared/ecosystem-2026-12.md section 3 row 4)."""
    if target_quantized(f.target_spec) and f.spec.quantization_config is None:
        return ["--speculative-draft-model-quantization", "unquant"]
    return []


def serve(f: ServeFacts) -> list[str]:
    """``python -m sglang.launch_server`` with the verify window of the draft's layout, and the
    draft kept unquantized beside a quantized target."""
    window = str(f.spec.block_layout.verify_width(f.block))
    algorithm = ["DSPARK", "--speculative-dspark-block-size", str(f.block)] if f.dspark else ["DFLASH"]
    return ["python", "-m", "sglang.launch_server", "--model-path", f.target, *revision_flag(f.target_revision),
            "--speculative-algorithm", *algorithm, "--speculative-draft-model-path", f.draft,
            "--speculative-num-draft-tokens", window, *draft_quantization(f),
            *(["--speculative-draft-model-revision", f.revision] if f.revision else [])]


ENGINE = Engine("sglang", "SGLang", judge, path, dspark_launch=DSPARK_LAUNCH, dflash2_gate=dflash2_gate,
                serve=serve, serve_rank=2,
    versions=Versions("0.5.23", "0.5.23", "read in source, git 00731f0"),
)
