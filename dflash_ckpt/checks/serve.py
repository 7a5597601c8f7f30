"""Serve lines: for a pair that passes, the command that launches it in each engine that loads it.

Each command is an argv list (JSON ``serve: {engine: argv}``), built from the checked facts:
``num_speculative_tokens`` = block_size - 1 for vLLM (it does not read block_size), the trained
block for SGLang's ``--speculative-num-draft-tokens`` and lmdeploy's
``speculative_dflash_block_size``, ``max_draft_len`` = block_size - 1 for TensorRT-LLM (it raises
above that). The launch syntax is the engines' (shared/DESIGN.md section 10): vLLM
``--speculative-config`` JSON, SGLang ``--speculative-algorithm DFLASH``, lmdeploy's
``TurbomindEngineConfig(speculative_algorithm=...)``, TensorRT-LLM's ``trtllm-serve`` with a
``speculative_config`` in its extra options file. An environment variable an engine needs (vLLM:
``VLLM_USE_V2_MODEL_RUNNER=1`` for a draft mixing sliding and full layers) is part of the argv
through ``env``, so each list runs as it is. Draft and target are named as the user named them.
"""

from __future__ import annotations

import json
import re
import shlex

from dflash_ckpt.checks.reading import Verdict
from dflash_ckpt.neutral import OPENER
from dflash_ckpt.draftspec.specs import DraftSpec, TargetSpec

#: Engines with a launch command, in report order.
SERVE_ENGINES = ("vllm", "sglang", "lmdeploy", "tensorrt-llm")


def mixed_attention(spec: DraftSpec) -> bool:
    lt = spec.config.get("layer_types")
    return isinstance(lt, list) and "sliding_attention" in lt and "full_attention" in lt


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
    n = block - 1
    dflash2 = spec.generation == "DFlash2"
    out: dict[str, list[str]] = {}
    if readers.get("vllm", Verdict(False, "")).loads:
        spec_config: dict[str, object] = {"method": "dflash", "model": draft, "num_speculative_tokens": n}
        if revision:
            spec_config["revision"] = revision
        config = quoted_json(spec_config)
        env = ["env", "VLLM_USE_V2_MODEL_RUNNER=1"] if mixed_attention(spec) else []
        out["vllm"] = [*env, "vllm", "serve", target_name, *_revision(target_revision), "--speculative-config", config]
    if readers.get("sglang", Verdict(False, "")).loads:
        out["sglang"] = ["python", "-m", "sglang.launch_server", "--model-path", target_name, *_revision(target_revision),
                         "--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", draft,
                         "--speculative-num-draft-tokens", str(block),
                         *(["--speculative-draft-model-revision", revision] if revision else [])]
    if readers.get("lmdeploy", Verdict(False, "")).loads:
        algo = "dflash2" if dflash2 else "dflash"
        code = ("from lmdeploy import TurbomindEngineConfig, pipeline; "
                f"pipe = pipeline({quoted(target_name)}, backend_config=TurbomindEngineConfig("
                f"speculative_algorithm={quoted(algo)}, speculative_draft_model={quoted(draft)}, "
                f"speculative_dflash_block_size={block})); print(pipe([\"Hello\"]))")
        out["lmdeploy"] = ["python", "-c", code]
    if readers.get("tensorrt-llm", Verdict(False, "")).loads:
        lines = ("speculative_config:", "  decoding_type: DFlash", f"  max_draft_len: {n}",
                 f"  speculative_model_dir: {quoted(draft)}")
        script = (f"printf '%s\\n' {' '.join(map(shlex.quote, lines))} > dflash-options.yaml && "
                  f"exec trtllm-serve {shlex.quote(target_name)} --backend pytorch --extra_llm_api_options dflash-options.yaml")
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
