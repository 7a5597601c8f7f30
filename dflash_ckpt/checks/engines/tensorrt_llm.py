"""TensorRT-LLM: ``tensorrt_llm/_torch/models/modeling_dflash.py`` at
009d8fa431bd3de92245aab80f8b57dc70da1ac4: ``mask_token_id`` from ``dflash_config``, else the top
level, else ``vocab_size``; ``target_layer_ids`` from ``dflash_config`` only; ``block_size`` by
``getattr`` on the top level; ``dflash_config.use_swa`` with ``swa_window_size < 1`` raises; one
uniform ``num_key_value_heads``. ``_torch/speculative/dflash.py`` (not reachable here:
shared/DESIGN.md section 10) raises when ``max_draft_len + 1`` exceeds the trained block.
``decoding_type: DFlash`` is 1+N, ``DSpark`` resolves ``shift_label`` (default true).

Serve options (section 10 corrections): ``speculative_model`` (alias ``speculative_model_dir``)
and ``max_draft_len`` at most block_size - 1 on the DFlash path, written to a YAML file that
``trtllm-serve serve T --backend pytorch --config FILE`` reads.

Newer limits (shared/ecosystem-2026-12.md section 3 rows 6-7, from the PRs' text [X]): PR #19159
refuses DFlash2 drafters under ``attn_backend: TRTLLM`` (non-causal sliding windows are not supported
by TRTLLM attention; it is the PyTorch backend's default), so the serve line of a DFlash2 draft names
``attn_backend: FLASHINFER`` [I: the other backend with sliding windows]; PR #16914 loads mixed
sliding/full drafts but fails early when the layers' effective RoPE differ (one shared RoPE cache)."""

from __future__ import annotations

import shlex

from dflash_ckpt.checks.engines.launch import ServeFacts, quoted
from dflash_ckpt.checks.engines.reading import (NESTED_ONLY, NESTED_THEN_TOP, TOP_ONLY, EnginePath, Reading, Verdict,
                                                compare, flag, one_plus_n)
from dflash_ckpt.checks.engines.record import Engine
from dflash_ckpt.checks.engines.versions import Versions
from dflash_ckpt.draftspec.siblings import DSPARK
from dflash_ckpt.draftspec.specs import DraftSpec, TargetSpec, as_int

DSPARK_LAUNCH = "decoding_type: DSpark"


def judge(spec: DraftSpec, target: TargetSpec | None) -> Verdict:
    """Block top level only, mask nested then top (else ``vocab_size``), taps nested only."""
    r = Reading(spec)
    block = r.read("block_size", TOP_ONLY)
    mask = r.read("mask_token_id", NESTED_THEN_TOP, required=False)
    if mask is None and not spec.keys["mask_token_id"].present:
        r.problems.append(f"mask_token_id is in neither place, so it falls back to vocab_size ({spec.dims.vocab_size}), "
                          "a row that is no mask: it would run and accept nothing")
    r.read("target_layer_ids", NESTED_ONLY, kind="list")
    dc = spec.dflash_config or {}
    if dc.get("use_swa"):
        window = as_int(dc.get("swa_window_size"))
        if window is None or window < 1:
            r.problems.append("dflash_config.use_swa needs a positive dflash_config.swa_window_size")
    per_layer = spec.top("num_key_value_heads_per_layer")
    if isinstance(per_layer, list) and len(set(map(str, per_layer))) > 1:
        r.problems.append("needs one uniform num_key_value_heads across draft layers")
    differ = rope_differs(spec)
    if differ:
        r.problems.append(f"fails early on a mixed sliding/full draft whose layers' effective RoPE differ ({differ}; "
                          "one RoPE cache for every layer, PR #16914)")
    if spec.generation == "DFlash2":
        r.notes.append(f"refuses DFlash2 drafters under attn_backend {DEFAULT_ATTN_BACKEND} (its default, PR #19159); "
                       f"serve with attn_backend {DFLASH2_ATTN_BACKEND}")
    hint = f"max_draft_len at most {block - 1}" if isinstance(block, int) and block >= 2 else "max_draft_len at most block_size - 1"
    return r.verdict(f"loads as is ({hint})")


#: The PyTorch backend's default attention backend, which refuses DFlash2 drafters (PR #19159), and
#: the one the serve line names for them instead.
DEFAULT_ATTN_BACKEND, DFLASH2_ATTN_BACKEND = "TRTLLM", "FLASHINFER"
#: Keys that set a sliding layer's RoPE apart from a full one's.
_LOCAL_ROPE_KEYS = ("rope_local_base_freq", "sliding_rope_theta", "swa_rope_theta")


def rope_differs(spec: DraftSpec) -> str | None:
    """How a draft mixing sliding and full layers gives them different RoPE, or ``None``:
    ``rope_parameters`` keyed by layer type with different values, a local base frequency other
    than ``rope_theta``, or ``no_rope_layers`` marking some layers only."""
    kinds = spec.layer_type_list
    if not (isinstance(kinds, list) and "sliding_attention" in kinds and "full_attention" in kinds):
        return None
    params = spec.top("rope_parameters")
    if isinstance(params, dict) and isinstance(params.get("sliding_attention"), dict) \
            and isinstance(params.get("full_attention"), dict) and params["sliding_attention"] != params["full_attention"]:
        return "rope_parameters differ between sliding_attention and full_attention"
    theta = spec.top("rope_theta", (params or {}).get("rope_theta") if isinstance(params, dict) else None)
    for key in _LOCAL_ROPE_KEYS:
        local = spec.top(key)
        if local is not None and local != theta:
            return f"{key} {local} against rope_theta {theta}"
    nope = spec.top("no_rope_layers")
    if isinstance(nope, list) and len(set(map(str, nope))) > 1:
        return "no_rope_layers leaves RoPE out of some layers only"
    return None


def path(spec: DraftSpec) -> EnginePath:
    """``decoding_type: DSpark`` reads ``shift_label`` (nested, else top level; default true)."""
    if spec.family == DSPARK:
        shift = (spec.dflash_config or {}).get("shift_label", spec.top("shift_label"))
        return compare(spec.block_layout.layout, flag(shift, True), True, "decoding_type: DSpark (shift_label, default true)")
    return one_plus_n(spec, "decoding_type: DFlash")


def serve(f: ServeFacts) -> list[str]:
    """``max_draft_len`` = the drafts per block (it raises above block_size - 1 on its DFlash path)."""
    lines = ("speculative_config:", f"  decoding_type: {'DSpark' if f.dspark else 'DFlash'}",
             f"  max_draft_len: {f.drafts}", f"  speculative_model: {quoted(f.draft)}",
             *([f"attn_backend: {DFLASH2_ATTN_BACKEND}"] if f.spec.generation == "DFlash2" else []))
    script = (f"printf '%s\\n' {' '.join(map(shlex.quote, lines))} > dflash-options.yaml && "
              f"exec trtllm-serve serve {shlex.quote(f.target)} --backend pytorch --config dflash-options.yaml")
    return ["sh", "-c", script]


def readable(argv: list[str]) -> tuple[str, str] | None:
    """``serve``'s argv as a person reads it: the YAML it writes to ``dflash-options.yaml``, on one
    line in YAML's flow style (the same document), and the command run after (the argv itself is
    one ``sh -c`` line, hard to read, that writes the file where it runs); None for an argv
    ``serve`` did not make."""
    if len(argv) != 3 or argv[:2] != ["sh", "-c"]:
        return None
    try:
        words = shlex.split(argv[2])
    except ValueError:
        return None
    if words[:2] != ["printf", r"%s\n"] or ">" not in words or "exec" not in words:
        return None
    head, *entries = words[2:words.index(">")]
    if not head.endswith(":") or not all(e.startswith("  ") and ": " in e for e in entries):
        return None
    return f"{{{head} {{{', '.join(e.strip() for e in entries)}}}}}", shlex.join(words[words.index("exec") + 1:])


ENGINE = Engine("tensorrt-llm", "TensorRT-LLM", judge, path, dspark_launch=DSPARK_LAUNCH, serve=serve, serve_rank=4,
                versions=Versions("1.3.0rc27", "1.4.0rc1", "read in source at git 009d8fa and its docs"))
