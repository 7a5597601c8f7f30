"""Draft architecture names that vLLM 0.34, speculators 0.9.0 and exllamav3 1.6.5 register beyond
the ones the tool knew (shared/ecosystem-2026-12.md sections 1.3-1.5), grouped by the generation
whose tensors they carry, so DF140 ("not a known DFlash draft") no longer fires for them.
What each engine does with each is ``checks/engines/architectures.py``.

Plain data, importing nothing, so ``draftspec.specs`` and ``draftspec.layout`` can use it.
"""

from __future__ import annotations

#: DFlash v1 backbones: speculators' class default (``models/dflash/config.py:29-31``) and
#: XPress (DFlash plus a latent refiner head ``xpress_head.*``; vLLM 0.33+ ``registry.py:686-687``
#: (0.34 ``:716-717``), speculators ``models/xpress/config.py:25-27``).
XPRESS_ARCHITECTURES = frozenset({"Qwen3XPressModel", "DFlashQwen3XPressModel", "XPressSpeculator"})
DFLASH_ARCHITECTURES = frozenset({"DFlashDraftModel", "DFlashSpeculator"}) | XPRESS_ARCHITECTURES
#: DFlash2 variants: Beam targets (vLLM 0.33+ ``registry.py:667``, ``vllm/models/beam/``) and
#: Ricursive (NoPE layers from the target's ``no_rope_layers``; vLLM 0.34 ``registry.py:690``).
DFLASH2_ARCHITECTURES = frozenset({"DFlash2DraftModel", "DFlash2BeamDraftModel", "DFlash2RicursiveDraftModel"})
#: DSpark drafts new since vLLM 0.32: MiniMax-M3 (0.34 ``registry.py:707``), Muse-Spark (0.33+),
#: Mistral-Large-4 (0.34 ``registry.py:726``), and speculators' class default
#: (``models/dspark/config.py:23-25``).
NEW_DSPARK_ARCHITECTURES = frozenset({"DSparkMiniMaxDraftModel", "MuseSparkDSparkModel", "MistralLarge4DSparkModel",
                                      "DSparkSpeculator"})
#: Tensor-name prefixes a generation's extra parts use, not modelled name by name (XPress's refiner).
XPRESS_PREFIX = "xpress_head."
