"""Degenerate pairs that would otherwise PASS: tied logits (DF414), one repeated token (DF415); and
unfilled weights (DF413, found while reading: ``sources.weight_sample.unfilled_weights``).

A pair whose weights are all zeros runs cleanly: every logit is 0, the target's argmax is token 0
everywhere, the draft (which borrows the target's embedding and LM head) predicts token 0 too, so
DFlash "matches" target-only decoding with every draft accepted. Acceptance and equality measured
that way say nothing; these findings make such a run a failure. Pure functions over what the run
measured (the judge's row counts for DF414, the outputs for DF415).
"""

from __future__ import annotations

from typing import Any, NamedTuple, Sequence

from dflash_ckpt.rules import Finding, finding

#: A prompt is judged for ties only over at least this many positions, and its output counts as
#: one repeated token only from this length: shorter outputs tie or repeat by chance.
MIN_JUDGED = 4


class TieRows(NamedTuple):
    """One prompt's teacher-forced target logits, counted (``runtime.judge.tie_counts``)."""

    prompt: str
    #: Positions judged.
    compared: int
    #: Positions whose two best logits are equal, and whose logits are all equal.
    tied: int
    flat: int


def tied_logit_findings(rows: Sequence[TieRows], target: str) -> list[Finding]:
    """DF414 for each prompt where the target's logits tie at the top at every judged position."""
    out = []
    for row in rows:
        if row.compared < MIN_JUDGED or row.tied < row.compared:
            continue
        what = "every logit is equal" if row.flat == row.compared else "the two best logits are equal"
        out.append(finding(
            "DF414",
            f"{target}: prompt {row.prompt!r}: at all {row.compared} positions judged {what} in the target's "
            "logits, so greedy decoding picks by token id alone and DFlash matching it proves nothing; the "
            "target's weights are degenerate (zeros, one constant) or its LM head is; check them (DF413) and "
            "download them again",
            path=target,
        ))
    return out


def repeated_token_findings(outputs: Sequence[Sequence[int]], who: str, label: str) -> list[Finding]:
    """DF415 when every prompt's output is one token repeated: a draft then only has to copy its
    anchor, so tau and the match say nothing about it (``who``: whose outputs, for the message)."""
    if not outputs or any(len(o) < MIN_JUDGED or len(set(o)) != 1 for o in outputs):
        return []
    tokens = sorted({o[0] for o in outputs})
    shown = ", ".join(map(str, tokens[:5]))
    return [finding(
        "DF415",
        f"{label}: every prompt's {who} output is one token repeated (token {shown}), {min(map(len, outputs))} "
        "times or more: a draft only has to copy its anchor to be accepted, so acceptance and the match "
        "measure nothing; the target's weights are degenerate (check DF413/DF414) or the prompts lead it "
        "into a loop; rerun with other prompts (-p), and check the weights",
        path=label,
    )]


def smoke_degenerate_findings(result: Any) -> list[Finding]:
    """DF414 and DF415 over a smoke-run's runs (``run.smoke_result.SmokeResult``).

    DF415 judges the acceptance verdict: it fires when tau reaches ``--min-acceptance`` (> 0) on
    outputs that repeat one token, where that pass is not earned. With ``--min-acceptance 0``
    acceptance is not judged, and a small untrained model looping on one token is no false PASS
    (its logits are not tied: the lossless check still means something there)."""
    runs = list(result.runs)
    judged = [r for r in runs if r.lossless.status != "skipped"]
    out = tied_logit_findings([TieRows(r.prompt.name, r.lossless.compared, r.lossless.tied_rows, r.lossless.flat_rows)
                               for r in judged], result.target_label)
    tau = result.overall()["tau"] if judged else None
    mina = result.options.min_acceptance
    if tau is not None and mina > 0 and tau >= mina:
        out += repeated_token_findings([r.dflash.tokens for r in judged], "DFlash and target-only", result.target_label)
    return out


__all__ = ["MIN_JUDGED", "TieRows", "repeated_token_findings", "smoke_degenerate_findings", "tied_logit_findings"]
