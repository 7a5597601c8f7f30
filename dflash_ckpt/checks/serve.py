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
import shlex

from dflash_ckpt.checks.reading import Verdict
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
    n = block - 1
    dflash2 = spec.generation == "DFlash2"
    out: dict[str, list[str]] = {}
    if readers.get("vllm", Verdict(False, "")).loads:
        spec_config: dict[str, object] = {"method": "dflash", "model": draft, "num_speculative_tokens": n}
        if revision:
            spec_config["revision"] = revision
        config = json.dumps(spec_config)
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
                f"pipe = pipeline({json.dumps(target_name)}, backend_config=TurbomindEngineConfig("
                f"speculative_algorithm={json.dumps(algo)}, speculative_draft_model={json.dumps(draft)}, "
                f"speculative_dflash_block_size={block})); print(pipe([\"Hello\"]))")
        out["lmdeploy"] = ["python", "-c", code]
    if readers.get("tensorrt-llm", Verdict(False, "")).loads:
        lines = ("speculative_config:", "  decoding_type: DFlash", f"  max_draft_len: {n}",
                 f"  speculative_model_dir: {json.dumps(draft)}")
        script = (f"printf '%s\\n' {' '.join(map(shlex.quote, lines))} > dflash-options.yaml && "
                  f"exec trtllm-serve {shlex.quote(target_name)} --backend pytorch --extra_llm_api_options dflash-options.yaml")
        out["tensorrt-llm"] = ["sh", "-c", script]
    return out


def _revision(rev: str | None) -> list[str]:
    return ["--revision", rev] if rev else []


def shell_line(argv: list[str]) -> str:
    """One line a user pastes into a POSIX shell; ``shlex.split`` gives ``argv`` back."""
    return shlex.join(argv)
