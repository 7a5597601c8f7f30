"""What the transformers backend lets through from a target's config: values, never code.

transformers turns some config values into imports, downloads or code it runs. Audited in
transformers 5.x (``configuration_utils.PreTrainedConfig``, ``modeling_utils.from_pretrained``,
``integrations/hub_kernels.py``, the quantizers), these are the keys, at the top level and in every
sub-config (``text_config``, ``vision_config``...), that ``clean_config`` removes before
transformers sees the config:

- ``attn_implementation`` / ``_attn_implementation`` (and ``_attn_implementation_internal``,
  ``_attn_implementation_autoset``): a value shaped ``org/name`` (``kernels-community/...``) is
  a Hub kernel repo that the ``kernels`` package downloads and imports; ``flash_attention_*``
  imports flash-attn or falls back to a Hub kernel. The backend pins the implementation itself:
  ``sdpa`` where the model class supports it, else ``eager`` (what transformers picks for a
  config that names none, so results do not change);
- ``experts_implementation`` / ``_experts_implementation`` (and ``_internal``): MoE kernels,
  chosen the same way (transformers' default is used);
- ``use_kernels``, ``kernel_config``: ``kernelize`` with Hub kernels;
- ``auto_map``, ``custom_pipelines``: Python modules shipped with the checkpoint
  (``trust_remote_code``, never set here);
- ``configuration_files``: makes transformers read another config file named there;
- ``_name_or_path``, ``name_or_path``, ``_commit_hash``: where transformers would look things up again;
- ``quantization_config``: a quantizer imports its package and may fetch Hub kernels (MXFP4's
  ``kernels-community/triton_kernels``); only gpt-oss MXFP4 is accepted (``describe`` refuses
  others), reduced to ``quant_method`` and ``modules_to_not_convert`` and always dequantized.

Files other than the config are kept away too: transformers is given a private folder holding
only the cleaned ``config.json`` and links to the safetensors files, so an ``adapter_config.json``
(PEFT would download its ``base_model_name_or_path``), ``*.py`` code or a ``generation_config.json``
in the target folder is never read by it; and it loads with ``local_files_only``.
"""

from __future__ import annotations

from typing import Any

#: Config keys whose values transformers turns into imports, downloads or code (see above).
CODE_KEYS = frozenset({
    "attn_implementation", "_attn_implementation", "_attn_implementation_internal", "_attn_implementation_autoset",
    "experts_implementation", "_experts_implementation", "_experts_implementation_internal",
    "use_kernels", "kernel_config",
    "auto_map", "custom_pipelines",
    "configuration_files",
    "_name_or_path", "name_or_path", "_commit_hash",
})
#: What an MXFP4 ``quantization_config`` keeps (everything else could name kernels or packages).
MXFP4_KEYS = ("quant_method", "modules_to_not_convert")


def clean_config(config: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """A copy of ``config`` without ``CODE_KEYS`` (in sub-configs too), and the dotted keys removed."""
    removed: list[str] = []

    def walk(node: dict[str, Any], path: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in node.items():
            dotted = f"{path}{key}"
            if key in CODE_KEYS:
                removed.append(dotted)
                continue
            if key == "quantization_config":
                kept = _clean_quantization(value)
                if kept != value:
                    removed.append(dotted if kept is None else f"{dotted} (all but {', '.join(MXFP4_KEYS)})")
                if kept is not None:
                    out[key] = kept
                continue
            out[key] = walk(value, dotted + ".") if isinstance(value, dict) else value
        return out

    return walk(config, ""), removed


def _clean_quantization(value: Any) -> dict[str, Any] | None:
    if not isinstance(value, dict) or value.get("quant_method") != "mxfp4":
        return None
    kept = {k: value[k] for k in MXFP4_KEYS if k in value}
    modules = kept.get("modules_to_not_convert")
    if modules is not None and not (isinstance(modules, list) and all(isinstance(m, str) for m in modules)):
        del kept["modules_to_not_convert"]
    return kept


def attribute_problem(config: dict[str, Any], config_class: type, text_class: type | None = None) -> tuple[str, str] | None:
    """``(dotted key, what it names)`` for the first key of ``config`` (or of its ``text_config``,
    against ``text_class``) that names something of the transformers config class other than a
    setting: a method (``to_dict``, ``get_text_config``), a property without a setter
    (``use_return_dict``, ``is_heterogeneous``) or a class property (``sub_configs``). transformers
    sets every key as an attribute, so such a key is an ``AttributeError`` from deep inside it,
    or replaces a method it calls later (``'int' object is not callable``); ``None`` when clean."""
    import inspect

    levels: list[tuple[str, dict[str, Any], type]] = [("", config, config_class)]
    text = config.get("text_config")
    if isinstance(text, dict) and text_class is not None:
        levels.append(("text_config.", text, text_class))
    for prefix, node, cls in levels:
        for key in node:
            if not isinstance(key, str) or key.startswith("__"):
                continue
            found = inspect.getattr_static(cls, key, None)
            if isinstance(found, property):
                if found.fset is None:
                    return f"{prefix}{key}", f"a read-only property of transformers' {cls.__name__}"
            elif isinstance(found, (staticmethod, classmethod)) or inspect.isroutine(found):
                return f"{prefix}{key}", f"a method of transformers' {cls.__name__}"
            elif found is not None and type(found).__name__ == "classproperty":
                return f"{prefix}{key}", f"a class property of transformers' {cls.__name__}"
    return None


def pinned_attention(model_class: Any) -> str:
    """``sdpa`` when the model class implements it, else ``eager``: never a kernel or flash-attn."""
    return "sdpa" if getattr(model_class, "_supports_sdpa", False) else "eager"


__all__ = ["CODE_KEYS", "MXFP4_KEYS", "attribute_problem", "clean_config", "pinned_attention"]
