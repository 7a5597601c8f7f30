"""Serve lines: for a pair that passes, the command that launches it in each engine that loads it.

Each command is an argv list (JSON ``serve: {engine: argv}``), built from the checked facts:
``num_speculative_tokens`` = the drafts per block for vLLM (it does not read block_size: B-1 for a
1+N draft, B for anchor-first), the verify window for SGLang's ``--speculative-num-draft-tokens``
(the trained block B for DFLASH, B+1 for an anchor-first DSPARK draft), the block for lmdeploy's
``--speculative-dflash-block-size``, ``max_draft_len`` = the drafts per block for
TensorRT-LLM (it raises above block_size - 1 on its DFlash path). The launch syntax is the
engines' (shared/DESIGN.md section 10, corrected from lmdeploy's 0.18.0 wheel and TensorRT-LLM's
source): vLLM ``--speculative-config`` JSON, SGLang ``--speculative-algorithm DFLASH``, lmdeploy's
PyTorch engine ``lmdeploy serve api_server T --backend pytorch --speculative-algorithm dflash``,
TensorRT-LLM's ``trtllm-serve serve T --backend pytorch --config FILE`` with a
``speculative_config`` naming ``speculative_model``. A DSpark draft an engine serves through its
DSpark path gets that path's line (``checks.layout``): vLLM ``method: "dspark"`` (V2 runner only),
SGLang ``DSPARK``, TensorRT-LLM ``decoding_type: DSpark``; an engine whose path would run the draft
in the other block layout gets no line (its verdict fails).

vLLM's line sets ``--max-num-seqs`` and ``--max-num-batched-tokens`` so that every scheduled
sequence's K+1 verify tokens fit a batch (``max_num_seqs * (K+1) <= max_num_batched_tokens``; the
0.32.0 defaults of ``vllm serve`` break it: 1024 x 16 against 8192 on an H100, PR #53970's
out-of-bounds gathers), and ``--max-model-len`` when the draft's ``max_position_embeddings`` is
below the target's (vLLM's V2 runner crashes at the first longer request, vllm#57941). An
environment variable an engine needs (vLLM: ``VLLM_USE_V2_MODEL_RUNNER=1`` for what its V1 runner
refuses: a draft mixing sliding and full layers, DFlash2, LiLiCorr, DSpark) is part of the argv
through ``env``, so each list runs as it is. Draft and target are named as the user named them.
"""

from __future__ import annotations

import json
import re
import shlex

from dflash_ckpt.checks.layout import engine_path
from dflash_ckpt.checks.reader_gates import vllm_v1_refusals
from dflash_ckpt.checks.reading import Verdict
from dflash_ckpt.checks.siblings import target_context
from dflash_ckpt.neutral import OPENER
from dflash_ckpt.draftspec.specs import DraftSpec, TargetSpec, as_int

#: Engines with a launch command, in report order.
SERVE_ENGINES = ("vllm", "sglang", "lmdeploy", "tensorrt-llm")


#: Sequences per batch the vLLM line asks for, and the smallest token budget it sets.
VLLM_MAX_NUM_SEQS = 128
VLLM_MIN_BATCHED_TOKENS = 8192


def vllm_batching(k: int) -> list[str]:
    """``--max-num-seqs S --max-num-batched-tokens T`` with ``S * (k+1) <= T``."""
    tokens = max(VLLM_MIN_BATCHED_TOKENS, VLLM_MAX_NUM_SEQS * (k + 1))
    return ["--max-num-seqs", str(VLLM_MAX_NUM_SEQS), "--max-num-batched-tokens", str(tokens)]


def context_cap(spec: DraftSpec, target: TargetSpec) -> int | None:
    """The draft's ``max_position_embeddings`` when it is below the target's (else ``None``)."""
    draft = as_int(spec.config.get("max_position_embeddings"))
    full = target_context(target)
    return draft if draft is not None and full is not None and 0 < draft < full else None


def serve_commands(spec: DraftSpec, target: TargetSpec, readers: dict[str, Verdict], *,
                   draft: str, target_name: str, revision: str | None = None,
                   target_revision: str | None = None) -> dict[str, list[str]]:
    """engine -> argv for each engine in ``SERVE_ENGINES`` whose verdict loads the draft.

    ``revision`` is the commit a Hub draft resolved to: vLLM and SGLang are told to load that one
    (the repo may change layout under its branch, DF314); ``target_revision`` the revision a Hub
    target was named with."""
    block = spec.block_size
    if block is None or block < 2:
        return {}
    draft, target_name = as_argument(draft), as_argument(target_name)
    k = spec.block_layout.drafts_per_block(block)
    out: dict[str, list[str]] = {}
    loads = {e: readers.get(e, Verdict(False, "")).loads for e in SERVE_ENGINES}
    dspark = {e: engine_path(e, spec).dspark for e in SERVE_ENGINES}
    if loads["vllm"]:
        spec_config: dict[str, object] = {"method": "dspark" if dspark["vllm"] else "dflash", "model": draft,
                                          "num_speculative_tokens": k}
        if revision:
            spec_config["revision"] = revision
        env = ["env", "VLLM_USE_V2_MODEL_RUNNER=1"] if vllm_v1_refusals(spec) else []
        cap = context_cap(spec, target)
        out["vllm"] = [*env, "vllm", "serve", target_name, *_revision(target_revision),
                       "--speculative-config", quoted_json(spec_config), *vllm_batching(k),
                       *(["--max-model-len", str(cap)] if cap else [])]
    if loads["sglang"]:
        # --speculative-num-draft-tokens is the verify window, bonus token included: B for 1+N (the
        # trained block), B+1 for an anchor-first DSPARK draft (its draft samples from the anchor row)
        window = str(spec.block_layout.verify_width(block))
        algorithm = ["DSPARK", "--speculative-dspark-block-size", str(block)] if dspark["sglang"] else ["DFLASH"]
        out["sglang"] = ["python", "-m", "sglang.launch_server", "--model-path", target_name, *_revision(target_revision),
                         "--speculative-algorithm", *algorithm, "--speculative-draft-model-path", draft,
                         "--speculative-num-draft-tokens", window,
                         *(["--speculative-draft-model-revision", revision] if revision else [])]
    if loads["lmdeploy"]:
        out["lmdeploy"] = ["lmdeploy", "serve", "api_server", target_name, "--backend", "pytorch",
                           "--speculative-algorithm", "dflash", "--speculative-draft-model", draft,
                           "--speculative-dflash-block-size", str(block)]
    if loads["tensorrt-llm"]:
        lines = ("speculative_config:", f"  decoding_type: {'DSpark' if dspark['tensorrt-llm'] else 'DFlash'}",
                 f"  max_draft_len: {k}", f"  speculative_model: {quoted(draft)}")
        script = (f"printf '%s\\n' {' '.join(map(shlex.quote, lines))} > dflash-options.yaml && "
                  f"exec trtllm-serve serve {shlex.quote(target_name)} --backend pytorch --config dflash-options.yaml")
        out["tensorrt-llm"] = ["sh", "-c", script]
    return out


def _revision(rev: str | None) -> list[str]:
    return ["--revision", rev] if rev else []


#: What a literal writes as ``\uXXXX`` and a pasted line cannot carry: control characters (a
#: newline, a tab that a shell would complete on), C1 controls, line separators, bidi controls and
#: marks (they reorder what is shown), lone surrogates (a byte that is not UTF-8, which Python
#: carries as ``\udcXX``) and non-characters.
_UNSHOWN = re.compile(r"[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff\ufffe\uffff]")


def as_argument(name: str) -> str:
    """A draft or target as an engine's argument: a local path starting with ``-`` (which the
    engine's CLI would take for an option; no Hub id starts so) is written ``./-x``."""
    return "./" + name if name.startswith("-") else name


def quoted(text: str) -> str:
    """A double-quoted literal that JSON, Python and YAML all read back as exactly ``text``: the
    real characters (an emoji stays an emoji, not a pair of surrogate escapes that Python and YAML
    would read as two lone surrogates), with what cannot be shown written as ``\\uXXXX``."""
    return _UNSHOWN.sub(lambda m: f"\\u{ord(m.group()):04x}", json.dumps(text, ensure_ascii=False))


def quoted_json(value: object) -> str:
    """``value`` as JSON text, its strings ``quoted``."""
    return _UNSHOWN.sub(lambda m: f"\\u{ord(m.group()):04x}", json.dumps(value, ensure_ascii=False))


def shell_line(argv: list[str]) -> str | None:
    """One line a user pastes into a POSIX shell (``shlex.split`` gives ``argv`` back exactly), or
    None when an argument holds a character the line cannot carry faithfully (``_UNSHOWN``: shown
    as an escape, or reordered, it would paste as something else). No CI runner reads it as a
    command."""
    if any(_UNSHOWN.search(arg) for arg in argv):
        return None
    # ``##[`` in a line is a CI runner's command (``neutral``): every one is inside single quotes
    # (``#`` and ``[`` are quoted), where ``''`` ends and reopens the quote: the same argument.
    return OPENER.sub(r"\1''[", shlex.join(argv))


#: What the report says instead of a serve line ``shell_line`` cannot show.
NOT_SHOWN = ("not shown: an argument holds a newline, control character, bidi mark or byte that is not UTF-8, "
             "which a pasted line would not keep; the exact argv is in --json 'serve'")
