"""DF319: the same Hub repo, another cached commit, another draft.

Hub repos have been re-uploaded in place with other layers, taps or sliding windows (z-lab/dflash#152:
1.4-2.6% acceptance against 10-12% after a retrain with 6 layers and 8 taps where there were 4 and 6).
An engine started from the older snapshot still in the cache serves the other draft. Pure: the
configs come from ``sources.hub.snapshots``.
"""

from __future__ import annotations

from typing import Any

from dflash_ckpt.checks.config import show_value
from dflash_ckpt.draftspec.specs import DraftSpec
from dflash_ckpt.rules import Finding, finding

#: What makes two drafts of one repo different models: depth, taps, attention kinds and window, block.
FINGERPRINT_KEYS = ("num_hidden_layers", "target_layer_ids", "layer_types", "sliding_window", "block_size")


def fingerprint(spec: DraftSpec) -> dict[str, Any]:
    """The values of ``FINGERPRINT_KEYS`` (DFlash keys nested first, then top level)."""
    return {k: spec.declared(k).value if k in ("target_layer_ids", "block_size") else spec.top(k)
            for k in FINGERPRINT_KEYS}


def hub_layout_findings(label: str, commit: str, spec: DraftSpec, others: list[tuple[str, DraftSpec]]) -> list[Finding]:
    """DF319 for each other cached commit whose fingerprint differs from the one checked."""
    now = fingerprint(spec)
    out: list[Finding] = []
    for other, then_spec in others:
        then = fingerprint(then_spec)
        diffs = [f"{k} {show_value(then[k])} (here {show_value(now[k])})" for k in FINGERPRINT_KEYS if then[k] != now[k]]
        if diffs:
            repo = label.split("@", 1)[0]
            out.append(finding(
                "DF319",
                f"{label}: the cache also holds commit {other} of this repo, a different draft: {'; '.join(diffs)}; "
                f"the repo changed in place (z-lab/dflash#152) and an engine started from that snapshot serves it: "
                f"pin {repo}@{commit} everywhere (or delete the old snapshot)",
                path=label,
            ))
    return out
