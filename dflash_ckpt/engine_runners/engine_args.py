"""``--engine-arg KEY=VALUE``: an allow-list of ``vllm.LLM`` keywords that change how vLLM runs, not what it runs.

A keyword of ``vllm.LLM`` can load code (``trust_remote_code`` runs a checkpoint's ``auto_map``,
``worker_cls`` imports any class), replace what is measured (``model=``, ``speculative_config=``)
or change the measured settings (``max_num_seqs``, ``dtype``, ``seed``): each would make the
verdict about another pair, or run code this tool promises never to run. So only the keywords of
``ALLOWED`` pass, each with the one kind of value it takes (a number in range, true/false, or one
of a few names); every other keyword is refused by name, with why, as one DF004 line (exit 2).

Values are scalars: VALUE is read as JSON only when it is short and does not open an array or
an object, so no value can nest (a 5,000-deep JSON array is one line, never a RecursionError).
``--max-model-len``, ``--tensor-parallel-size`` and ``--pipeline-parallel-size`` have flags of
their own; their keywords are taken as those flags (``flag_values``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from dflash_ckpt.errors import UsageError

#: The longest VALUE read (every allowed value is a number, true/false or a short name).
MAX_VALUE_CHARS = 64


@dataclass(frozen=True)
class Allowed:
    """What one allowed keyword takes: ``kind`` in the refusal, ``ok`` the check of its value."""

    kind: str
    ok: Callable[[Any], bool]


def _number(lo: float, hi: float = math.inf, *, lo_open: bool = False) -> Callable[[Any], bool]:
    def ok(v: Any) -> bool:
        return (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                and (v > lo if lo_open else v >= lo) and v <= hi)
    return ok


def _integer(lo: int) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, int) and not isinstance(v, bool) and lo <= v <= 1 << 48


def _boolean(v: Any) -> bool:
    return isinstance(v, bool)


#: Keywords that change how vLLM runs (memory, caching, scheduling chunks, eager or graphs), not
#: which weights, code or decoding settings it runs.
ALLOWED: dict[str, Allowed] = {
    "gpu_memory_utilization": Allowed("a fraction above 0 and at most 1", _number(0.0, 1.0, lo_open=True)),
    "swap_space": Allowed("GiB, a number >= 0", _number(0.0, 1 << 20)),
    "cpu_offload_gb": Allowed("GiB, a number >= 0", _number(0.0, 1 << 20)),
    "kv_cache_memory_bytes": Allowed("an integer >= 1", _integer(1)),
    "num_gpu_blocks_override": Allowed("an integer >= 1", _integer(1)),
    "block_size": Allowed("tokens per KV-cache block, an integer >= 1", _integer(1)),
    "max_num_batched_tokens": Allowed("an integer >= 1", _integer(1)),
    "enforce_eager": Allowed("true or false", _boolean),
    "enable_prefix_caching": Allowed("true or false", _boolean),
    "enable_chunked_prefill": Allowed("true or false", _boolean),
    "disable_custom_all_reduce": Allowed("true or false", _boolean),
    "distributed_executor_backend": Allowed("mp, uni or ray", lambda v: v in ("mp", "uni", "ray")),
}
#: Keywords that are our own flags: taken as the flag (``flag_values``).
FLAGS = {"max_model_len": "--max-model-len", "tensor_parallel_size": "--tensor-parallel-size",
         "pipeline_parallel_size": "--pipeline-parallel-size"}

_LOADS_CODE = ("loads code or files this tool did not check", (
    "trust_remote_code", "worker_cls", "worker_extension_cls", "hf_overrides", "tokenizer", "tokenizer_mode",
    "logits_processors", "compilation_config", "load_format", "model_loader_extra_config", "code_revision",
    "download_dir", "allowed_local_media_path", "kv_transfer_config", "kv_events_config", "hf_token",
    "override_pooler_config", "mm_processor_kwargs", "reasoning_parser", "structured_outputs_config"))
_REPLACES = ("replaces the model or the draft that is measured", (
    "model", "speculative_config", "revision", "tokenizer_revision", "quantization", "served_model_name",
    "enable_lora", "max_loras", "model_impl", "skip_tokenizer_init", "runner", "convert", "task"))
_MEASURED = ("changes a setting the run measures with (this tool sets it)", (
    "max_num_seqs", "dtype", "seed", "kv_cache_dtype", "max_logprobs", "disable_log_stats", "temperature", "top_p",
    "top_k", "generation_config", "override_generation_config", "async_scheduling", "calculate_kv_scales",
    "num_speculative_tokens"))
#: Why a known keyword is refused.
REFUSED: dict[str, str] = {key: why for why, keys in (_LOADS_CODE, _REPLACES, _MEASURED) for key in keys}


def _refuse(message: str) -> UsageError:
    return UsageError(message, code="DF004", key="--engine-arg")


def allowed_names() -> str:
    return ", ".join(sorted(ALLOWED))


def _value(key: str, text: str) -> Any:
    """VALUE as a scalar: a JSON number or true/false when it is one, else the text itself."""
    body = text.strip()
    if len(body) > MAX_VALUE_CHARS:
        raise _refuse(f"--engine-arg {key}: a value of {len(body)} characters; {key} takes "
                      f"{ALLOWED[key].kind if key in ALLOWED else 'a positive integer'}")
    if body[:1] in ("[", "{"):
        raise _refuse(f"--engine-arg {key}: an array or object; {key} takes "
                      f"{ALLOWED[key].kind if key in ALLOWED else 'a positive integer'}")
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        return body


def parse_engine_args(items: Sequence[str]) -> dict[str, Any]:
    """``--engine-arg KEY=VALUE`` (repeatable) as ``LLM(**kwargs)``: only ``ALLOWED`` keywords
    (``FLAGS`` keywords too, for ``flag_values``), each value checked; anything else is one
    DF004 ``UsageError`` naming the keyword and why it is refused."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key.isidentifier():
            raise _refuse(f"--engine-arg {item[:80]!r}: give KEY=VALUE, KEY one of {allowed_names()} "
                          "(e.g. --engine-arg gpu_memory_utilization=0.85)")
        if key in REFUSED:
            raise _refuse(f"--engine-arg {key}: refused: it {REFUSED[key]}; the keywords passed to vLLM are "
                          f"{allowed_names()}")
        if key not in ALLOWED and key not in FLAGS:
            raise _refuse(f"--engine-arg {key[:80]}: not a keyword this tool passes to vLLM (only what changes how "
                          f"vLLM runs, not what it runs: {allowed_names()})")
        parsed = _value(key, value)
        if key in FLAGS:
            if not _integer(1)(parsed):
                raise _refuse(f"--engine-arg {key}={value[:40]}: must be an integer >= 1 (or give {FLAGS[key]})")
        elif not ALLOWED[key].ok(parsed):
            raise _refuse(f"--engine-arg {key}={value[:40]}: {key} takes {ALLOWED[key].kind}")
        if key in out and out[key] != parsed:
            raise _refuse(f"--engine-arg {key}: given twice with different values")
        out[key] = parsed
    return out


def flag_values(args: dict[str, Any], flags: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """The flags' values with their keywords from ``args`` folded in (and removed from ``args``):
    a keyword and its flag set to different values is one DF004 line."""
    out = dict(flags)
    for key, flag in FLAGS.items():
        if key not in args:
            continue
        value = args.pop(key)
        if out[key] != defaults[key] and out[key] != value:
            raise _refuse(f"--engine-arg {key}={value} and {flag} {out[key]}: give one")
        out[key] = value
    return out


__all__ = ["ALLOWED", "FLAGS", "REFUSED", "flag_values", "parse_engine_args"]
