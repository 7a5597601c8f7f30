"""A target's config checked against itself and its safetensors headers, before any allocation.

Both smoke-run backends build the target from its config: the native runtime through
``draftspec/target_settings.py``, the transformers backend through transformers' config classes, which accept
nearly anything and fail (or allocate gigabytes) later. A hostile or broken ``config.json`` must
not get that far: ``require_target_config`` is the one gate both backends pass, and refuses with one
DF142 line (exit 2):

- the shape keys of the decoder (``text_config`` for a wrapper): ``hidden_size``,
  ``num_hidden_layers``, ``num_attention_heads``, ``vocab_size`` required, ``num_key_value_heads``,
  ``intermediate_size``, ``head_dim``, ``max_position_embeddings`` when given: positive integers
  within ``limits``, the kv heads a divisor of the heads; ``rms_norm_eps`` a positive number;
- ``dtype`` / ``torch_dtype``: a dtype name (``"auto"`` is an argument of ``from_pretrained``,
  never a config value); ``quantization_config``: an object with a string ``quant_method``;
- ``pad_token_id``: a row of the embedding table (``-vocab_size <= id < vocab_size``);
- the shapes the config implies against the headers: ``embed_tokens`` is ``[vocab_size,
  hidden_size]``, the dense MLP's projections are ``[intermediate_size, hidden_size]`` and back,
  attention projections read and write ``hidden_size``, and the files hold at least
  ``num_hidden_layers`` decoder layers. So an ``intermediate_size`` a thousand times the weights',
  or ``hidden_size`` and ``intermediate_size`` swapped, is refused before a byte is allocated.

Pure: the caller reads the config and the headers (``sources``); nothing here imports torch.
"""

from __future__ import annotations

import math
import re
from typing import Any, Mapping

from dflash_ckpt import limits
from dflash_ckpt.checks.hub_code import require_no_hub_code
from dflash_ckpt.draftspec.quant import require_headers
from dflash_ckpt.draftspec.specs import TargetSpec
from dflash_ckpt.errors import InputError

#: dtype names a config may declare (torch's names, as ``config.json`` spells them).
CONFIG_DTYPES = ("float32", "float16", "bfloat16", "float64", "float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu")

_LAYER = re.compile(r"layers\.(\d+)\.(.+)$")


def _bad(where: str, key: str, value: Any, want: str) -> InputError:
    shown = repr(value)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    return InputError(f"key '{key}' must be {want}, found {shown}; restore it from the published config",
                      code="DF142", path=where)


def _int(cfg: Mapping[str, Any], key: str, where: str, cap: int, *, required: bool) -> int | None:
    value = cfg.get(key)
    if value is None:
        if required:
            raise _bad(where, key, value, f"an integer from 1 to {cap:,}")
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= cap:
        raise _bad(where, key, value, f"an integer from 1 to {cap:,}")
    return value


def _values(config: Mapping[str, Any], inner: Mapping[str, Any], key: str) -> list[tuple[str, Any]]:
    """``key`` where it is set: the wrapper's level and the decoder's (``text_config.key``)."""
    out = [(key, config[key])] if key in config else []
    if inner is not config and key in inner:
        out.append((f"text_config.{key}", inner[key]))
    return out


def require_target_config(spec: TargetSpec, tensors: Mapping[str, Any] | None = None) -> None:
    """Refuse (one DF142 line, exit 2) a target config either backend would choke on or
    over-allocate for; ``tensors`` (name -> info with ``.shape``) adds the shape checks. The raw
    dict is read here, once per run, because each line names the key at the level it is written."""
    config, where = spec.config, spec.where
    text = config.get("text_config")
    if text is not None and not isinstance(text, dict):
        raise _bad(where, "text_config", text, "an object")
    inner: Mapping[str, Any] = text if isinstance(text, dict) else config
    pre = "text_config." if inner is not config else ""
    hidden = _int(inner, "hidden_size", where, limits.MAX_DIM, required=True)
    heads = _int(inner, "num_attention_heads", where, limits.MAX_DIM, required=True)
    layers = _int(inner, "num_hidden_layers", where, limits.MAX_LAYERS, required=True)
    vocab = _int(inner, "vocab_size", where, limits.MAX_VOCAB, required=True)
    assert hidden and heads and layers and vocab
    kv = _int(inner, "num_key_value_heads", where, limits.MAX_DIM, required=False)
    if kv is not None and heads % kv:
        raise _bad(where, f"{pre}num_key_value_heads", kv, f"a divisor of num_attention_heads ({heads})")
    inter = inner.get("intermediate_size")
    if not (isinstance(inter, list) and inter and all(isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= limits.MAX_DIM for v in inter)):
        _int(inner, "intermediate_size", where, limits.MAX_DIM, required=False)  # one per layer (a list) is fine too
    _int(inner, "head_dim", where, limits.MAX_DIM, required=False)
    _int(inner, "max_position_embeddings", where, 1 << 30, required=False)
    eps = inner.get("rms_norm_eps")
    if eps is not None and (isinstance(eps, bool) or not isinstance(eps, (int, float)) or not math.isfinite(eps) or eps <= 0):
        raise _bad(where, f"{pre}rms_norm_eps", eps, "a positive number")
    for key in ("dtype", "torch_dtype"):
        for name, value in _values(config, inner, key):
            if value is not None and value not in CONFIG_DTYPES:
                raise _bad(where, name, value, f"one of {', '.join(CONFIG_DTYPES)} (or absent)")
    for name, value in _values(config, inner, "quantization_config"):
        if value is not None and not (isinstance(value, dict) and isinstance(value.get("quant_method"), str)):
            raise _bad(where, name, value, "an object with a quant_method string (or absent)")
    for name, value in _values(config, inner, "pad_token_id"):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not -vocab <= value < vocab):
            raise _bad(where, name, value, f"a token id below vocab_size ({vocab}), or null")
    require_no_hub_code(config, where)  # DF321: a Hub kernel transformers would fetch and load
    scheme = spec.quant_scheme()  # DF180 (decoded when the spec was built): a format the runtime does not dequantize
    if scheme is not None and tensors:
        require_headers(scheme, tensors)  # DF181: the config names a quantization the tensors lack
    if tensors:
        _require_shapes(inner, where, pre, tensors, hidden=hidden, vocab=vocab, layers=layers,
                      quantized=_quantized(config, inner))


def _quantized(config: Mapping[str, Any], inner: Mapping[str, Any]) -> bool:
    """Packed weights (AWQ, GPTQ, ...) have other shapes; gpt-oss MXFP4 packs only its experts."""
    for src in (config, inner):
        q = src.get("quantization_config")
        if isinstance(q, dict) and q.get("quant_method") != "mxfp4":
            return True
    return False


def _text_prefix(names: list[str]) -> str | None:
    """Where the decoder's tensors live (``model.``, ``model.language_model.``...): the prefix of
    ``embed_tokens.weight``, a language model's first (a wrapper's vision tower has its own layers)."""
    embeds = sorted((n[: -len("embed_tokens.weight")] for n in names if n.endswith("embed_tokens.weight")),
                    key=lambda p: ("language_model" not in p, len(p)))
    return embeds[0] if embeds else None


def _require_shapes(inner: Mapping[str, Any], where: str, pre: str, tensors: Mapping[str, Any], *,
                  hidden: int, vocab: int, layers: int, quantized: bool) -> None:
    names = list(tensors)
    prefix = _text_prefix(names)
    if prefix is None:
        return  # no embedding table: the loader names what is missing
    embed = tuple(tensors[prefix + "embed_tokens.weight"].shape)
    if embed != (vocab, hidden):
        raise InputError(
            f"vocab_size {vocab} and hidden_size {hidden} ({pre or 'top level'}) imply "
            f"{prefix}embed_tokens.weight [{vocab}, {hidden}], but the safetensors header has {list(embed)}; "
            "the config does not describe these weights (restore it from the published config)", code="DF142",
            path=where)
    inter = inner.get("intermediate_size")
    seen_layers = -1
    for name in names:
        if not name.startswith(prefix):
            continue
        m = _LAYER.match(name, len(prefix))
        if m is None:
            continue
        i, rest = int(m.group(1)), m.group(2)
        seen_layers = max(seen_layers, i)
        shape = tuple(tensors[name].shape)
        if quantized or len(shape) != 2:
            continue
        want = _expected(rest, shape, hidden, inter[i] if isinstance(inter, list) and i < len(inter) else inter)
        if want is not None:
            key, implied = want
            raise InputError(
                f"{key} {name} {implied}, but the safetensors header has {list(shape)}; the config "
                "does not describe these weights (restore it from the published config)", code="DF142", path=where)
    if seen_layers + 1 < layers:
        raise InputError(
            f"key '{pre}num_hidden_layers' is {layers}, but the safetensors files hold {seen_layers + 1} "
            "decoder layers; restore it from the published config", code="DF142", path=where)


def _expected(rest: str, shape: tuple[int, ...], hidden: int, inter: Any) -> tuple[str, str] | None:
    """``("KEYS imply", implied shape)`` when a dense layer tensor disagrees with the config, else ``None``."""
    rows, cols = shape
    if rest in ("mlp.gate_proj.weight", "mlp.up_proj.weight"):
        if isinstance(inter, int) and (rows, cols) != (inter, hidden):
            return "intermediate_size and hidden_size imply", f"[{inter}, {hidden}]"
        if cols != hidden:
            return "hidden_size implies", f"[*, {hidden}]"
    elif rest == "mlp.down_proj.weight":
        if isinstance(inter, int) and (rows, cols) != (hidden, inter):
            return "hidden_size and intermediate_size imply", f"[{hidden}, {inter}]"
        if rows != hidden:
            return "hidden_size implies", f"[{hidden}, *]"
    elif rest in ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"):
        if cols != hidden:
            return "hidden_size implies", f"[*, {hidden}]"
    elif rest == "self_attn.o_proj.weight" and rows != hidden:
        return "hidden_size implies", f"[{hidden}, *]"
    return None


__all__ = ["CONFIG_DTYPES", "require_target_config"]
