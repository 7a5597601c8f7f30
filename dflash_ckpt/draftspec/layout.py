"""Which block layout a draft was trained with: "1+N" or "anchor-first".

Both layouts share one ``block_size`` number and the same input block ``[bonus, mask, ...]``; they
differ in which block slots are drafts (1..B-1 or 0..B-1) and so in the verify width (B or B+1).
Serving one as the other shifts every draft by a position: acceptance length ~1.0 and no error
(docs of the format: shared DESIGN section 12). The layout is resolved like every DFlash key, with
where it came from, and a declaration that contradicts another is a conflict, never picked silently.

Order: an explicit declaration (``sample_from_anchor`` nested or top level,
``dflash_config.query_zero_predicts_next``, ``dflash_config.shift_label``), then a DSpark-family
architecture (DeepSpec drafts declare nothing and are anchor-first), then a speculators DSpark
export without a key (ambiguous: readers default differently), else 1+N.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from dflash_ckpt.draftspec.speculators_format import SPEC_TOKENS_PATH, speculative_tokens

ONE_PLUS_N = "1+N"
ANCHOR_FIRST = "anchor-first"

#: Architectures of the DSpark family (DFlash backbone, anchor-first blocks).
DSPARK_ARCHITECTURES = frozenset(
    {
        "Qwen3DSparkModel",
        "Qwen3OmniDSparkModel",
        "Gemma4DSparkModel",
        "K3DSparkModel",
        "DSparkDraftModel",
        "DSparkV41DraftModel",
    }
)

#: (where, key) of each explicit declaration; a true value means anchor-first.
DECLARATIONS: tuple[tuple[str, str], ...] = (
    ("dflash_config", "sample_from_anchor"),
    ("top_level", "sample_from_anchor"),
    ("dflash_config", "query_zero_predicts_next"),
    ("dflash_config", "shift_label"),
)


@dataclass(frozen=True)
class BlockLayout:
    """The resolved layout and its provenance.

    ``source`` names what decided it: a declaration (``"dflash_config.sample_from_anchor"``,
    ``"sample_from_anchor"`` for the top level, ...), ``"architectures"`` or ``"default"``.
    ``declared`` maps each declaration found to its raw value. ``conflict`` is a one-line
    description when declarations disagree, ``invalid`` when one is not a JSON boolean; in either
    case ``layout`` is the first valid declaration's (or 1+N) and must not be trusted.
    ``ambiguous`` is set for a speculators DSpark export that declares nothing.
    """

    layout: str
    source: str
    declared: dict[str, Any]
    conflict: str | None = None
    invalid: str | None = None
    ambiguous: bool = False

    @property
    def anchor_first(self) -> bool:
        return self.layout == ANCHOR_FIRST

    @property
    def first_draft_slot(self) -> int:
        """The first block slot whose output is a draft token (0 anchor-first, 1 for 1+N)."""
        return 0 if self.anchor_first else 1

    def drafts_per_block(self, block_size: int) -> int:
        """Draft tokens per block: B for anchor-first, B-1 for 1+N."""
        return block_size - self.first_draft_slot

    def verify_width(self, block_size: int) -> int:
        """Tokens the target verifies per step: the bonus token plus the drafts."""
        return self.drafts_per_block(block_size) + 1


def _name(where: str, key: str) -> str:
    return f"dflash_config.{key}" if where == "dflash_config" else key


def _said(name: str, anchor_first: bool, declared: dict[str, Any]) -> str:
    if name == SPEC_TOKENS_PATH:
        return f"{name} is {declared[name]} ({ANCHOR_FIRST if anchor_first else ONE_PLUS_N})"
    return f"{name} is {str(anchor_first).lower()}"


def speculative_tokens_layout(config: Mapping[str, Any]) -> tuple[bool, int] | None:
    """A speculators export's second layout declaration: ``speculative_tokens`` is ``block_size``
    for an anchor-first draft and ``block_size - 1`` for 1+N (speculators 0.9.0
    ``models/dflash/core.py``); (anchor-first?, the value), or ``None`` when the config is not a
    speculators export or the count is neither (a proposal may ask for fewer drafts: no declaration)."""
    if "speculators_model_type" not in config:
        return None
    k, block = speculative_tokens(config), config.get("block_size")
    if not isinstance(k, int) or isinstance(k, bool) or not isinstance(block, int) or isinstance(block, bool):
        return None
    if k == block:
        return True, k
    if k == block - 1:
        return False, k
    return None


def is_dspark_architecture(config: Mapping[str, Any]) -> bool:
    archs = config.get("architectures")
    return isinstance(archs, list) and any(isinstance(a, str) and a in DSPARK_ARCHITECTURES for a in archs)


def resolve_layout(config: Mapping[str, Any]) -> BlockLayout:
    """Resolve the block layout of a draft config (pure: reads the dict only)."""
    nested = config.get("dflash_config")
    nested = nested if isinstance(nested, Mapping) else {}
    declared: dict[str, Any] = {}
    valid: list[tuple[str, bool]] = []
    invalid: list[str] = []
    for where, key in DECLARATIONS:
        place = nested if where == "dflash_config" else config
        if key not in place:
            continue
        name = _name(where, key)
        value = place[key]
        declared[name] = value
        if isinstance(value, bool):
            valid.append((name, value))
        else:
            shown = repr(value)
            invalid.append(f"{name} is {shown if len(shown) <= 60 else shown[:57] + '...'}, not true or false")
    tokens = speculative_tokens_layout(config)
    if tokens is not None:
        declared[SPEC_TOKENS_PATH] = tokens[1]
        valid.append((SPEC_TOKENS_PATH, tokens[0]))
    conflict = None
    if len({v for _, v in valid}) > 1:
        conflict = " but ".join(_said(n, v, declared) for n, v in valid)
    bad = "; ".join(invalid) or None
    if valid:
        name, value = valid[0]
        return BlockLayout(ANCHOR_FIRST if value else ONE_PLUS_N, name, declared, conflict, bad)
    if is_dspark_architecture(config):
        return BlockLayout(ANCHOR_FIRST, "architectures", declared, None, bad)
    if config.get("speculators_model_type") == "dspark":
        return BlockLayout(ANCHOR_FIRST, "speculators_model_type", declared, None, bad, ambiguous=True)
    return BlockLayout(ONE_PLUS_N, "default", declared, None, bad)


def layout_json(resolved: BlockLayout) -> dict[str, Any]:
    """The resolved layout as inspect's JSON ``block_layout`` holds it (``engines`` added there)."""
    return {
        "layout": resolved.layout,
        "source": resolved.source,
        "declared": dict(resolved.declared),
        "conflict": resolved.conflict,
        "invalid": resolved.invalid,
        "ambiguous": resolved.ambiguous,
    }
