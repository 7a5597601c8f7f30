"""A transformers-backed target: any decoder transformers implements, behind the target protocol.

The native runtime (``runtime/target.py``) implements dense Qwen3 and Llama 3.x only. Every other
published target family (MoE Qwen3, Qwen3-Next and Qwen3.5 with Gated DeltaNet layers, gpt-oss
with sliding windows, attention sinks and MXFP4 experts, gemma-4, DeepSeek-V3 / Kimi-K2.5 MLA) runs
here through the model classes of ``transformers`` (the optional ``hf`` extra), exposed through the
same protocol the eager DFlash executor (``runtime/eager_dflash.py``) uses: ``device``, ``embed_tokens.weight``,
``lm_head.weight``, ``target(ids, cache=, taps=, logits=)`` and a cache with ``reset()`` and
``crop(length)``. transformers is imported when this module is, so only ``smoke-run`` (after
choosing this backend), the benchmarks and the tests import it.

Loading: ``AutoModelForCausalLM.from_pretrained(use_safetensors=True, local_files_only=True)``,
never ``trust_remote_code``; a config whose model_type transformers does not know (an ``auto_map``
that only custom code could serve) is refused. transformers sees the config only after
``hf_config.clean_config`` has removed every key it would turn into an import, a download or code
(a Hub attention kernel named in ``_attn_implementation``, ``auto_map``, ``quantization_config``...:
the audited list is in ``runtime/hf_config.py`` and the README), from a private folder that holds
nothing else of the target's but links to its safetensors files; the attention implementation is
pinned here (``sdpa``, or ``eager`` where the model class lacks it). Multimodal wrappers (a ``text_config``: Qwen3.5/3.6,
gemma-4, Kimi-K2.5) load their text decoder only, from the text config, with the checkpoint's
text prefix renamed; the vision tower is never built. gpt-oss MXFP4 experts are dequantized on
the CPU while loading (``Mxfp4Config(dequantize=True)``), then the model moves to the device.

Semantics (the same as the native target, so the two backends agree on ``fixtures/tiny-pair``):
- the feature of tap layer ``i`` is the output of decoder layer ``i``, taken by a forward hook on
  that layer (not from ``output_hidden_states``); for the last layer the hook sits on the final
  norm instead, because the z-lab reference reads HF's ``hidden_states[-1]``, which is post-norm;
  tap ``-1`` (DeepSpec drafts) is ``hidden_states[0]``, the first layer's input (a pre-hook);
- ``embed_tokens`` is the raw input-embedding table (gemma's ``sqrt(hidden)`` scaling is not in
  the table; the draft multiplies by its own ``input_embedding_scale`` in ``embed``), and
  ``lm_head`` is ``get_output_embeddings()``; the draft applies its ``output_multiplier`` and
  ``final_logit_softcapping`` in ``logits`` as the reference does; the target's own logits are
  what its transformers forward returns (gemma's soft-capping included).

Cache rollback after a rejected draft (``crop(length)`` keeps the first ``length`` positions):
- attention layers: a ``DynamicCache(config=...)``; ``crop(-n)`` drops the last ``n`` positions.
  Sliding-window layers (gpt-oss, gemma-4) are switched to past recording
  (``activate_past_recording``) so that a verify pass may run past the window and still be cut
  back; each crop trims them to the window again;
- linear-attention layers (Gated DeltaNet in qwen3_next / qwen3_5): their recurrent state is a
  running sum that ``crop`` cannot undo (transformers' ``crop`` only handles the conv window). So
  before every multi-token forward the conv and recurrent states of those layers are snapshotted
  (cloned; they are per layer, not per token, so this costs a few MB); on a crop that removes
  tokens, the states are restored, the attention layers are cropped back to the snapshot's
  length, and the accepted tokens are run again (one extra forward of at most ``block`` tokens,
  no taps, last logits only). The result is exactly the state a clean prefill of the same tokens
  leaves, up to floating-point summation order.
"""

from __future__ import annotations

import inspect
import json
import os
import re
import shutil
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

import torch
from torch import nn

import transformers
from transformers import AutoConfig, AutoModelForCausalLM, DynamicCache
from transformers.cache_utils import LinearAttentionCacheLayerMixin
from transformers.utils import logging as _hf_logging

from dflash_ckpt.draftspec.families import HF_FAMILIES, HF_SUPPORTED_TEXT, hf_family_of
from dflash_ckpt.draftspec.specs import TargetSpec
from dflash_ckpt.errors import InputError, UsageError
from dflash_ckpt.runtime.hf_config import attribute_problem, clean_config, pinned_attention
from dflash_ckpt.runtime.target import TargetOutput


@dataclass(frozen=True)
class HFTargetInfo:
    """What ``smoke-run`` needs to know about a transformers target before loading it."""

    model_type: str
    max_position_embeddings: int | None
    dtype: str | None
    text_config: bool
    mxfp4: bool


def hf_target_info(spec: TargetSpec) -> HFTargetInfo:
    """Judge a target config for this backend without loading anything; refusals exit 2."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    config, where, inner = spec.config, spec.where, spec.decoder  # the raw dict is transformers' input here
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or model_type not in CONFIG_MAPPING_NAMES:
        custom = " (its auto_map names custom code, which is never run)" if config.get("auto_map") else ""
        raise UsageError(f"model_type {model_type!r} is not implemented by transformers "
                         f"{transformers.__version__}{custom}; {HF_SUPPORTED_TEXT}", path=where)
    family = hf_family_of(spec.config)
    if family is None:
        text_type = inner.get("model_type", model_type)
        raise UsageError(f"target model_type {model_type!r} (decoder {text_type!r}) is not one the "
                         f"transformers backend was verified on; {HF_SUPPORTED_TEXT}", path=where)
    method = spec.quant_method
    if method not in (None, "mxfp4"):
        raise UsageError(f"quantization_config.quant_method {method!r}: the transformers backend "
                         "loads unquantized weights and gpt-oss MXFP4 (dequantized) only; the native backend "
                         "dequantizes fp8, awq, gptq and compressed-tensors Qwen3/Llama targets (--backend native)",
                         path=where)
    mpe = spec.max_position_embeddings
    return HFTargetInfo(
        model_type=model_type,
        max_position_embeddings=mpe if mpe is not None and mpe > 0 else None,
        dtype=spec.dtype, text_config=spec.text_config_used, mxfp4=method == "mxfp4",
    )


def require_buildable(spec: TargetSpec) -> None:
    """Refuse (DF142, exit 2) a config transformers cannot build: a key naming a method or a
    read-only property of its config class, or a value of the wrong type (``num_labels: "x"``,
    ``rope_scaling: "x"``). The config object is built here, from the cleaned dict, before
    anything is loaded (after ``hf_target_info`` and inspect's checks, whose lines are more
    precise); whatever transformers raises is one line."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    config, where, inner = spec.config, spec.where, spec.decoder  # built by transformers' own classes
    cls = CONFIG_MAPPING[config["model_type"]]
    text_type = inner.get("model_type") if inner is not config else None
    text_cls = CONFIG_MAPPING[text_type] if isinstance(text_type, str) and text_type in CONFIG_MAPPING else None
    problem = attribute_problem(config, cls, text_cls)
    if problem is not None:
        key, what = problem
        raise InputError(f"key '{key}' names {what}, not a setting; remove it (transformers "
                         "cannot set it)", code="DF142", key=key, path=where)
    try:
        with _quiet():
            cls.from_dict(clean_config(config)[0])
    except (MemoryError, KeyboardInterrupt):
        raise
    except Exception as exc:  # noqa: BLE001 - transformers raises TypeError, AttributeError, ValueError...
        first = (str(exc).strip().splitlines() or [""])[0]
        first = first if len(first) <= 200 else first[:197] + "..."
        raise InputError(f"transformers cannot build {cls.__name__} from it ({type(exc).__name__}: "
                         f"{first}); a value has the wrong type: restore it from the published config",
                         code="DF142", path=where) from None


@contextmanager
def _quiet(bars: bool = False) -> Iterator[None]:
    """transformers' log at errors only inside the block (and, with ``bars``, its progress bars
    off: smoke-run draws its own), both restored after."""
    verbosity, shown = _hf_logging.get_verbosity(), _hf_logging.is_progress_bar_enabled()
    _hf_logging.set_verbosity_error()
    if bars:
        _hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        _hf_logging.set_verbosity(verbosity)
        if bars and shown:
            _hf_logging.enable_progress_bar()


# -- the cache ---------------------------------------------------------------------------------


class HFCache:
    """A ``DynamicCache`` with the protocol's ``reset()`` and ``crop(length)``, exact rollback included."""

    def __init__(self, target: "HFTarget") -> None:
        self.target = target
        self.inner: DynamicCache | None = None
        self.length = 0
        #: (length before the last multi-token forward, its ids, cloned linear-attention states).
        self._snapshot: tuple[int, torch.Tensor, list[tuple[Any, dict, dict]]] | None = None
        self.replays = 0
        self.reset()

    def reset(self) -> None:
        cache = DynamicCache(config=self.target.config)
        for layer in cache.layers:
            if not isinstance(layer, LinearAttentionCacheLayerMixin) and hasattr(layer, "activate_past_recording"):
                layer.activate_past_recording()
        self.inner = cache
        self.length = 0
        self._snapshot = None

    @property
    def linear_layers(self) -> list[Any]:
        assert self.inner is not None
        return [layer for layer in self.inner.layers if isinstance(layer, LinearAttentionCacheLayerMixin)]

    def _attention_crop(self, remove: int) -> None:
        assert self.inner is not None
        for layer in self.inner.layers:
            if not isinstance(layer, LinearAttentionCacheLayerMixin):
                layer.crop(-remove)

    def before_forward(self, ids: torch.Tensor) -> None:
        """Snapshot linear-attention states before a multi-token forward that may be rolled back."""
        layers = self.linear_layers
        if ids.shape[1] <= 1 or not layers or self.length == 0:
            self._snapshot = None
            return

        def cloned(states: dict) -> dict:
            return {k: (v.clone() if v is not None else None) for k, v in states.items()}

        states = [(layer, cloned(layer.conv_states), cloned(layer.recurrent_states)) for layer in layers]
        self._snapshot = (self.length, ids.detach().clone(), states)

    @torch.inference_mode()
    def crop(self, length: int) -> None:
        """Keep the first ``length`` positions."""
        remove = self.length - length
        if remove < 0:
            raise ValueError(f"crop({length}) beyond the cache's {self.length} positions")
        if not self.linear_layers:
            self._attention_crop(remove)
            self.length = length
            return
        if remove == 0:
            self._attention_crop(0)
            return
        if self._snapshot is None or not (self._snapshot[0] <= length):
            raise RuntimeError("a linear-attention cache can only be cropped back into its last multi-token forward")
        start, ids, states = self._snapshot
        for layer, conv, rec in states:
            layer.conv_states.update(conv)
            layer.recurrent_states.update(rec)
        self._attention_crop(self.length - start)
        self.length = start
        self._snapshot = None
        keep = length - start
        if keep:
            self.replays += 1
            self.target(ids[:, :keep], cache=self, logits="last")


# -- the target --------------------------------------------------------------------------------


def _decoder_parts(model: nn.Module) -> tuple[nn.ModuleList, nn.Module]:
    base = model.get_decoder() if hasattr(model, "get_decoder") else model.model
    layers, norm = getattr(base, "layers", None), getattr(base, "norm", None)
    if not isinstance(layers, nn.ModuleList) or norm is None:
        raise UsageError(f"no decoder 'layers' and final 'norm' to tap; {HF_SUPPORTED_TEXT}", path=type(model).__name__)
    return layers, norm


class HFTarget:
    """A transformers causal LM behind the target protocol (batch 1, with an ``HFCache``)."""

    backend = "transformers"

    def __init__(self, model: nn.Module) -> None:
        self.model = model.eval()
        self.config = model.config
        self.layers, self.norm = _decoder_parts(model)
        self.embed_tokens = model.get_input_embeddings()
        head = model.get_output_embeddings()
        if head is None:
            raise UsageError("no output embeddings (lm_head)", path=type(model).__name__)
        self.lm_head = head
        # transformers 5.24 renamed ``past_key_values`` to ``cache`` (the old name warns).
        params = inspect.signature(model.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"

    @property
    def device(self) -> torch.device:
        return self.embed_tokens.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.embed_tokens.weight.dtype

    def new_cache(self, capacity: int = 0) -> HFCache:
        """A fresh cache; it grows as needed, ``capacity`` is accepted for the protocol's sake."""
        return HFCache(self)

    @torch.inference_mode()
    def forward(self, ids: torch.Tensor, *, cache: HFCache, taps: Sequence[int] = (), logits: str = "all") -> TargetOutput:
        """Run ``ids [1, n]`` after the cache's positions, appending to it; ``logits`` all/last/none."""
        last = len(self.layers) - 1
        feats: dict[int, torch.Tensor] = {}
        handles = []

        def keep(i: int):
            def hook(_mod: nn.Module, _inp: Any, out: Any) -> None:
                feats[i] = out[0] if isinstance(out, (tuple, list)) else out
            return hook

        def keep_input(_mod: nn.Module, args: Any, kwargs: Any) -> None:
            feats[-1] = args[0] if args else kwargs["hidden_states"]

        for i in dict.fromkeys(taps):
            if i == -1:  # the embedding output (HF's hidden_states[0]): what the first layer receives
                handles.append(self.layers[0].register_forward_pre_hook(keep_input, with_kwargs=True))
                continue
            module = self.norm if i == last else self.layers[i]
            handles.append(module.register_forward_hook(keep(i)))
        cache.before_forward(ids)
        n = ids.shape[1]
        positions = torch.arange(cache.length, cache.length + n, device=ids.device)[None]
        try:
            with _quiet():  # kernel fall-back notes; README says which kernels speed up what
                out = self.model(input_ids=ids, **{self._cache_kw: cache.inner}, use_cache=True,
                                 position_ids=positions, logits_to_keep=1 if logits in ("last", "none") else 0)
        finally:
            for h in handles:
                h.remove()
        cache.length += n
        features = torch.cat([feats[i] for i in taps], dim=-1) if taps else None
        return TargetOutput(None if logits == "none" else out.logits, features)

    __call__ = forward


# -- loading -----------------------------------------------------------------------------------


def _text_prefix_mapping(names: Sequence[str]) -> dict[str, str] | None:
    """Rename a wrapper's text-model prefix to the plain causal LM's (``model.``, ``lm_head``)."""
    embeds = sorted((k[: -len("embed_tokens.weight")] for k in names if k.endswith("embed_tokens.weight")),
                    key=lambda p: ("language_model" not in p, len(p)))
    if not embeds or embeds[0] == "model.":
        return None
    prefix = embeds[0]
    mapping = {"^" + re.escape(prefix): "model."}
    heads = sorted((k for k in names if k.endswith("lm_head.weight")), key=len)
    if heads and heads[0] != "lm_head.weight":
        mapping["^" + re.escape(heads[0][: -len("lm_head.weight")]) + r"lm_head\."] = "lm_head."
    return mapping


def _staging_folder(folder: Path) -> Path:
    """A private folder for transformers: the cleaned config.json and links to the safetensors
    files (and their index), nothing else of the target's (no code, no adapter_config.json)."""
    from dflash_ckpt.sources.local import LocalSource
    from dflash_ckpt.draftspec.specs import read_config

    config, _ = read_config(LocalSource(folder, label=str(folder)))
    clean, _removed = clean_config(config)
    staging = Path(tempfile.mkdtemp(prefix="dflash-ckpt-hf-"))
    try:
        (staging / "config.json").write_text(json.dumps(clean))
        for entry in os.scandir(folder):
            if entry.name.endswith((".safetensors", ".safetensors.index.json")) and "/" not in entry.name:
                os.symlink(os.path.realpath(entry.path), staging / entry.name)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return staging


def load_hf_target(folder: Path, info: HFTargetInfo, *, dtype: torch.dtype, device: torch.device,
                   tensor_names: Sequence[str]) -> HFTarget:
    """Load the text decoder of ``folder`` with transformers, safetensors only, onto ``device``."""
    staging = _staging_folder(folder)
    try:
        with _quiet(bars=True):  # unused vision weights and tied-head notes are expected
            config = AutoConfig.from_pretrained(str(staging), trust_remote_code=False, local_files_only=True)
            text = config.get_text_config(decoder=True)
            kwargs: dict[str, Any] = {}
            if info.mxfp4:
                from transformers import Mxfp4Config

                kwargs["quantization_config"] = Mxfp4Config(dequantize=True)
            if text is not config:
                text = text.__class__.from_dict(text.to_dict())
                if getattr(config, "tie_word_embeddings", None) is not None and "tie_word_embeddings" not in text.to_dict():
                    text.tie_word_embeddings = config.tie_word_embeddings
                mapping = _text_prefix_mapping(tensor_names)
                if mapping:
                    kwargs["key_mapping"] = mapping
            # Loaded on the CPU (a device_map would need accelerate), MXFP4 experts dequantized there,
            # then moved to the device.
            attention = pinned_attention(AutoModelForCausalLM._model_mapping[type(text)])
            model, loading = AutoModelForCausalLM.from_pretrained(
                str(staging), config=text, dtype=dtype, use_safetensors=True, trust_remote_code=False,
                local_files_only=True, attn_implementation=attention, output_loading_info=True, **kwargs)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        if isinstance(exc, OSError) and "memory" in str(exc).lower():
            raise  # out of memory: memory.out_of_memory makes it DF407
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise InputError(f"transformers could not load the target ({type(exc).__name__}: {first})",
                         code="DF212", path=folder) from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # links and a config: the weights stay where they are
    tied = {"lm_head.weight"} if getattr(model.config, "tie_word_embeddings", False) else set()
    missing = sorted(set(loading.get("missing_keys") or ()) - tied)
    if missing:
        raise InputError(f"the safetensors files lack {len(missing)} tensor(s) of the "
                         f"{type(model).__name__} text model, first '{missing[0]}'; a shard is absent or the "
                         "checkpoint's names do not match its config", code="DF212", path=folder)
    if info.mxfp4:
        # Some transformers releases (5.18) dequantize into bf16 whatever dtype was asked for. FP4
        # values times a power of two are exact in bf16, so casting to the run dtype loses nothing.
        with torch.no_grad():
            for name, param in model.named_parameters():
                if ".experts." in name and param.is_floating_point() and param.dtype != dtype:
                    param.data = param.data.to(dtype)
    model = model.to(device)
    return HFTarget(model)


__all__ = ["HF_FAMILIES", "HFCache", "HFTarget", "HFTargetInfo", "require_buildable", "hf_target_info", "load_hf_target"]
