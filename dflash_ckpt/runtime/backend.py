"""Which runtime runs a ``smoke-run`` or ``probe-taps`` target: the native one, or transformers (``--backend``).

``native`` is the project's own pure-PyTorch target (dense Qwen3 and Llama 3.x,
``runtime/target.py``); ``transformers`` wraps transformers' model classes
(``runtime/hf_target.py``, the optional ``hf`` extra) for every other published family;
``auto`` takes native where it implements the target and transformers otherwise. Both sit
behind the same target protocol, so the DFlash loop, the lossless check and the figures are the
same code whichever runs.

The choice is made from the config alone, before any weight is read, and refusals are one line
(exit 2) naming what each backend supports.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from dflash_ckpt.draftspec.families import Unsupported, hf_family_of
from dflash_ckpt.draftspec.specs import TargetSpec
from dflash_ckpt.draftspec.target_settings import TargetSettings, ensure_supported
from dflash_ckpt.errors import InputError, UsageError
from dflash_ckpt.runtime.memory import require_fits, needed_bytes
from dflash_ckpt.sources.weights import WeightInventory

BACKENDS = ("auto", "native", "transformers")
#: How to add the ``hf`` extra, as README's set-up line installs it.
HF_EXTRA_HINT = 'in the clone\'s root, pip install -e ".[run,hf]" (transformers>=5.18,<6)'


def hf_available() -> bool:
    return importlib.util.find_spec("transformers") is not None


def _need_transformers(why: str) -> None:
    if not hf_available():
        raise UsageError(f"{why} needs transformers, which is not installed: {HF_EXTRA_HINT}")


def _point_to_transformers(refusal: Unsupported, spec: TargetSpec) -> None:
    """Re-raise a native refusal with the way out, when the transformers backend runs the target."""
    if hf_family_of(spec.config) is not None:
        raise UsageError(f"{refusal}; --backend transformers (or auto) runs this target") from None


def select_backend(name: str, spec: TargetSpec) -> str:
    """``native`` or ``transformers`` for ``--backend name`` (validated with the options,
    ``plan.PlanOptions``); refuses (exit 2) what neither runs.

    Only the kind of target is judged here (as ``ensure_supported`` does), so that a supported
    pair with bad values still reaches inspect's checks (exit 1). The draft is not judged: the
    runtime runs both draft generations.
    """
    if name == "native":
        try:
            ensure_supported(spec)
        except Unsupported as refusal:
            _point_to_transformers(refusal, spec)
            raise
        return "native"
    if name == "transformers":
        _need_transformers("--backend transformers")
        from dflash_ckpt.runtime.hf_target import hf_target_info

        hf_target_info(spec)
        return "transformers"
    try:
        ensure_supported(spec)
        try:
            TargetSettings.from_spec(spec)
        except InputError:
            pass  # a value problem, reported after inspect's checks on the native path
        return "native"
    except Unsupported as refusal:
        if not hf_available():
            raise UsageError(f"{refusal}; other target families run on the transformers backend: "
                             f"{HF_EXTRA_HINT}") from None
        from dflash_ckpt.runtime.hf_target import hf_target_info

        hf_target_info(spec)
        return "transformers"


@dataclass
class TargetPlan:
    """What ``smoke-run`` needs from a target before and while loading it, per backend."""

    backend: str
    model_type: str
    max_position_embeddings: int | None
    #: The dtype the config declares, if any.
    dtype: str | None
    #: Decoder layers (what probe-taps taps), when the config says.
    num_layers: int | None
    #: ``load(folder, dtype, device, label, inv)`` -> a protocol target with ``new_cache``.
    load: Callable[[Path, torch.dtype, torch.device, str, WeightInventory], Any]


def plan_target(backend: str, spec: TargetSpec) -> TargetPlan:
    """Read the target's settings for ``backend`` (after inspect's checks passed)."""
    if backend == "native":
        from dflash_ckpt.runtime.loading import load_target

        try:
            args = TargetSettings.from_spec(spec)
        except Unsupported as refusal:  # a setting native lacks (rope type, sliding window, ...)
            _point_to_transformers(refusal, spec)
            raise

        scheme = spec.quant_scheme()  # a quantized target is dequantized while loading

        def load_native(folder: Path, dtype: torch.dtype, device: torch.device, label: str, inv: WeightInventory) -> Any:
            return load_target(folder, args, dtype=dtype, device=device, label=label, inv=inv, scheme=scheme)

        return TargetPlan("native", args.model_type, args.rope.max_position_embeddings, args.dtype, args.dims.num_hidden_layers,
                          load_native)
    from dflash_ckpt.runtime.hf_target import require_buildable, hf_target_info, load_hf_target

    info = hf_target_info(spec)
    require_buildable(spec)

    def load_hf(folder: Path, dtype: torch.dtype, device: torch.device, label: str, inv: WeightInventory) -> Any:
        if device.type != "cpu":  # transformers loads (and dequantizes) in host memory, then moves
            require_fits(needed_bytes(inv.tensors, dtype), torch.device("cpu"), None,
                       lead=f"{label} (loaded in host memory first): ")
        return load_hf_target(folder, info, dtype=dtype, device=device, tensor_names=list(inv.tensors))

    layers = spec.num_hidden_layers
    return TargetPlan("transformers", str(spec.model_type), info.max_position_embeddings, info.dtype,
                      layers if isinstance(layers, int) and not isinstance(layers, bool) and layers > 0 else None, load_hf)
