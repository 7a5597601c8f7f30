"""A target config that names code to fetch from the Hub: refused before either backend starts.

transformers turns a few config values into a download and an import of code from the Hub
(transformers 5.x ``integrations/hub_kernels.py``): an attention or experts implementation
spelled ``org/name`` (``kernels-community/flash-attn``) is a kernel repo the ``kernels`` package
fetches and loads, and ``use_kernels`` / ``kernel_config`` ``kernelize`` the model with Hub
kernels. The transformers backend strips these keys (``runtime/hf_config.py``), so nothing would
be fetched; but the config then runs as something it does not say, and a config that asks for
code from the Hub is one this tool will not run (it never runs a checkpoint's code). So such a
value is one DF321 line (exit 2) on both backends; everything else ``hf_config`` strips (an
``auto_map`` the backend never honours, ``_name_or_path``, a plain ``sdpa``) still runs.
Pure: no torch, no transformers.
"""

from __future__ import annotations

from typing import Any, Mapping

from dflash_ckpt.errors import InputError

#: Keys whose ``org/name`` value is a Hub kernel repo (a plain name: a built-in implementation).
IMPLEMENTATION_KEYS = ("attn_implementation", "_attn_implementation", "_attn_implementation_internal",
                       "experts_implementation", "_experts_implementation", "_experts_implementation_internal")
#: Keys that kernelize the model with Hub kernels when set (true, or a non-empty mapping).
KERNEL_KEYS = ("use_kernels", "kernel_config")


def _named_code(config: Mapping[str, Any], path: str = "") -> tuple[str, Any] | None:
    """``(dotted key, value)`` of the first key, at any level, whose value names Hub code."""
    for key, value in config.items():
        dotted = f"{path}{key}"
        if key in IMPLEMENTATION_KEYS and isinstance(value, str) and "/" in value:
            return dotted, value
        if key in IMPLEMENTATION_KEYS and isinstance(value, dict):  # per sub-config: {"text_config": "org/k"}
            inner = next((v for v in value.values() if isinstance(v, str) and "/" in v), None)
            if inner is not None:
                return dotted, inner
        if key in KERNEL_KEYS and value not in (None, False, {}, []):
            return dotted, value
        if isinstance(value, dict):
            found = _named_code(value, dotted + ".")
            if found is not None:
                return found
    return None


def require_no_hub_code(config: Mapping[str, Any], where: str) -> None:
    """Refuse (DF321, exit 2) a target config naming code to fetch from the Hub (see above)."""
    found = _named_code(config)
    if found is None:
        return
    key, value = found
    shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
    raise InputError(f"key '{key}' is {shown}: it names kernel code that transformers would fetch from the Hub and "
                     "load; this tool never runs code from a checkpoint. Remove the key (the run picks its own "
                     "attention: sdpa, or eager)", code="DF321", key=key, path=where)


__all__ = ["IMPLEMENTATION_KEYS", "KERNEL_KEYS", "require_no_hub_code"]
