"""Where each engine reads a draft's block layout from, so ``probe-taps --write`` records the key
the engines a user names will read (``--layout-for``). Facts: shared DESIGN section 12.

No key is read by every engine, and some readers read none (vLLM's V1 runner, SGLang's DFLASH,
the z-lab loaders, mlx-vlm's DFlash: 1+N only, whatever the config says). With no engine named,
the copy keeps every declaration the config has (rewritten to the measured value, so they cannot
conflict) and, where there is none, gets ``dflash_config.sample_from_anchor``: what vLLM's
speculators adapter writes for a DFlash draft and its V2 runner reads.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from dflash_ckpt.errors import UsageError

#: engine -> (where, key): ``where`` is ``dflash_config`` or ``top_level``.
LAYOUT_KEYS: dict[str, tuple[str, str]] = {
    "vllm": ("dflash_config", "sample_from_anchor"),  # the V2 runner (refuses true); the adapter writes it there
    "speculators": ("top_level", "sample_from_anchor"),  # flat config, top level (>= PR #760)
    "vllm-dspark": ("top_level", "sample_from_anchor"),  # method "dspark", default true
    "sglang-dspark": ("top_level", "sample_from_anchor"),  # --speculative-algorithm DSPARK, default true
    "mlx-vlm-dspark": ("top_level", "sample_from_anchor"),  # its dspark drafter, default true
    "specforge": ("dflash_config", "shift_label"),  # Domino drafts (projector_type "domino")
}
DEFAULT_KEY = ("dflash_config", "sample_from_anchor")


def require_layout_engines(engines: Iterable[str]) -> None:
    """A usage error (exit 2) for an engine name ``LAYOUT_KEYS`` does not know."""
    for name in engines:
        if name not in LAYOUT_KEYS:
            raise UsageError(f"--layout-for {name!r}: use one of {', '.join(LAYOUT_KEYS)}")


def layout_paths(config: Mapping[str, Any], engines: Iterable[str]) -> list[tuple[str, ...]]:
    """The config paths to write the measured layout to: the named engines' keys plus every
    declaration already there (``DEFAULT_KEY`` when neither gives one)."""
    from dflash_ckpt.draftspec.layout import DECLARATIONS

    from dflash_ckpt.draftspec.speculators_format import is_speculators_native

    wanted = [LAYOUT_KEYS[e] for e in engines]
    if is_speculators_native(config):  # the copy is the z-lab form, whose layout key is dflash_config's
        return list(dict.fromkeys(("dflash_config", k) if w == "dflash_config" else (k,) for w, k in [*wanted, DEFAULT_KEY]))
    nested = config.get("dflash_config")
    nested = nested if isinstance(nested, Mapping) else {}
    wanted += [(w, k) for w, k in DECLARATIONS if k in (nested if w == "dflash_config" else config)]
    wanted = wanted or [DEFAULT_KEY]
    paths = [("dflash_config", k) if w == "dflash_config" else (k,) for w, k in wanted]
    return list(dict.fromkeys(paths))
