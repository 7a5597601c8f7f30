"""Findings a run produces (DF401-DF406 from smoke-run, DF410-DF411 from probe-taps; smoke-run's
DF408-DF409 on its evidence are ``checks/evidence_findings.py``'s).

Pure functions, no torch, like every check: the lossless verdict (DF401/DF402), non-finite
values (DF404), a ``--block-size`` above the trained block (DF405), an impossible speedup
(DF406), acceptance below ``--min-acceptance`` (DF403, with the prompt format as a likely cause
besides the taps; neither judged below the minimum of evidence, ``overall.evidence``); and probe-taps' DF410 (configured tap layers beaten) and DF411 (no tap set works).
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Any, Sequence

from dflash_ckpt.stats.ranking import LIKELY_Z
from dflash_ckpt.errors import CheckFailed
from dflash_ckpt.rules import Finding, finding

if TYPE_CHECKING:
    from dflash_ckpt.sources.prompts import Prompt


def special_token_texts(special_tokens: dict[str, Any]) -> list[str]:
    """The text of every special token a tokenizer names (``bos``, ``eos``, additional ones)."""
    out: list[str] = []
    for value in special_tokens.values():
        for text in value if isinstance(value, list) else [value]:
            if isinstance(text, str) and text:
                out.append(text)
    return out


def prompt_format_causes(
    prompts: Sequence[Prompt],
    *,
    chat_template: bool,
    thinking: bool,
    custom: bool,
    special_tokens: Sequence[str] = (),
) -> list[str]:
    """Ways in which the prompts differ from the chat format DFlash drafts are trained on.

    Drafts are trained on the target's replies to chat-formatted prompts (thinking off for the
    published Qwen3 drafts), so acceptance measured on text in another format is lower for
    reasons that have nothing to do with the checkpoint.
    """
    causes: list[str] = []
    plain = [p.name for p in prompts if p.text is not None and not any(t in p.text for t in special_tokens)]
    if not chat_template and plain:
        causes.append(f"the chat template is off (--no-chat-template, or the target has none), so {_names(plain)} "
                      "went in as plain text, not in the target's chat format")
    if chat_template and thinking:
        causes.append("--thinking renders the template with enable_thinking true, while published DFlash "
                      "drafts are trained on replies with thinking off")
    if chat_template:
        twice = [p.name for p in prompts if p.text is not None and any(t in p.text for t in special_tokens)]
        if twice:
            causes.append(f"{_names(twice)} already hold chat-template tokens and were templated again "
                          "(pass such text with --no-chat-template)")
    if custom:
        causes.append("the prompts are your own (-p/--prompts), and acceptance depends on how close they are "
                      "to the draft's training data")
    return causes


def prompt_format_note(causes: Sequence[str]) -> str:
    """The sentence DF403 adds when the prompt format may explain low acceptance ('' if not)."""
    if not causes:
        return ""
    return ("; the prompt format may also explain it: " + "; ".join(causes)
            + "; rerun without -p/--prompts, --no-chat-template and --thinking to tell the two apart")


def block_size_findings(block_size: int, trained: int) -> list[Finding]:
    """DF405 when the block run is larger than the one the draft was trained with."""
    if block_size <= trained:
        return []
    return [finding(
        "DF405",
        f"--block-size {block_size} is above the draft's trained block_size {trained}: positions "
        f"{trained}..{block_size - 1} of each block were never trained, so tau measured here understates "
        f"the draft; leave --block-size out or give at most {trained}", path=None,
    )]


def _names(names: list[str]) -> str:
    shown = ", ".join(repr(n) for n in names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    return ("prompt " if len(names) == 1 else "prompts ") + shown


def smoke_findings(result: Any, *, target_layer_ids: Sequence[int], mask_token_id: int) -> list[Finding]:
    """Findings DF401-DF406 from a smoke-run's settings and runs (``run.smoke_result.SmokeResult``:
    ``runs``, ``overall()``, ``block_size``, ``trained_block_size``, ``tie_tolerance``, the dtypes,
    ``prompt_format`` and ``options.min_acceptance``)."""
    out: list[Finding] = block_size_findings(result.block_size, result.trained_block_size)
    opts = result.options
    for run in result.runs:
        name = run.prompt.name
        for gen, who in ((run.target, "target-only"), (run.dflash, "DFlash")):
            if gen.overflow:
                out.append(finding("DF404", overflow_message(name, who, gen.overflow, result), path=None))
        lo = run.lossless
        if lo.status in ("differs", "tie"):
            where = (f"prompt {name!r}: DFlash output differs from target-only output at new token {lo.position} "
                     f"(target {lo.target_token}, DFlash {lo.dflash_token})")
            if lo.margin is None:
                out.append(finding("DF401", f"{where}; one output is a prefix of the other", path=None))
            elif lo.status == "tie":
                out.append(finding("DF402", f"{where}, a near tie: DFlash's token (rank {lo.rank} in the target's "
                                            f"logits) is {lo.margin:.4g} below the maximum <= tolerance "
                                            f"{result.tie_tolerance:g}; {lo.ties} tie(s), the largest {lo.largest_margin:.4g}",
                                            path=None))
            else:
                out.append(finding("DF401", f"{where}; DFlash's token (rank {lo.rank} in the target's logits) is "
                                            f"{lo.margin:.4g} below the maximum (tolerance {result.tie_tolerance:g}), "
                                            "not a tie; rerun with --json and report it", path=None))
    stats = result.overall() if result.runs else None
    # Below the minimum of evidence there is no verdict on tau or the speed (DF408 says so).
    judged = bool(stats) and (stats.get("evidence") or {}).get("enough", True)
    tau = stats["tau"] if stats and judged else None
    if stats and judged and not stats["speedup_plausible"]:
        # Judged on the overall figures (medians over every prompt's steps, the most robust);
        # a single prompt's implausible figure is withheld in its row without a finding.
        out.append(finding(
            "DF406",
            f"measured speedup {stats['speedup_measured']:.2f}x is above tau {stats['tau']:.2f}: impossible, since "
            "a DFlash step costs at least one target step; the machine's load changed while timing, so the "
            "speedup is withheld; rerun on an idle machine or with --threads 1", path=None))
    if tau is not None and tau < opts.min_acceptance:
        ids = list(target_layer_ids)
        out.append(finding(
            "DF403",
            f"mean acceptance length tau {tau:.2f} is below --min-acceptance {opts.min_acceptance:g}: a draft "
            f"reading the wrong tap layers loads cleanly and lands here; check target_layer_ids {ids} against "
            f"the draft's model card (they are the 0-based outputs of target layers, not HF hidden_states "
            f"indices) or measure the trained ids with `dflash-ckpt probe-taps {shlex.quote(str(opts.draft))} --target "
            f"{shlex.quote(str(opts.target))}`, check mask_token_id {mask_token_id}, the block layout"
            + (f" it ran in ({result.layout}; probe-taps measures both)" if getattr(result, "layout", None) else "")
            + ", and keep the draft in bfloat16"
            + prompt_format_note(result.prompt_format), path=None,
        ))
    return out


def overflow_message(name: str, who: str, where: str, result: Any) -> str:
    if where == "fused features":
        return (f"prompt {name!r}: the fused features (fc output) hold inf/NaN in the draft's "
                f"{result.draft_dtype}; target hidden-state outliers overflow there; keep the draft in bfloat16 "
                "(--draft-dtype bfloat16), target tensors are cast to it")
    return (f"prompt {name!r} ({who}): the target's {where} hold inf/NaN in {result.target_dtype}; its hidden "
            "states overflow that dtype; run the target in bfloat16 (--target-dtype bfloat16) and keep the "
            "draft in bfloat16")


def probe_findings(result: Any) -> list[Finding]:
    """DF410 when the configured ids are not the best measured; DF411 when nothing works
    (``result``: a ``run.probe_result.ProbeResult``)."""
    out: list[Finding] = []
    best = result.best
    if best is None:
        return out
    ids = list(best.target_layer_ids)
    mina = result.options.min_acceptance
    if best.tau < mina:
        out.append(finding(
            "DF411",
            f"no tap set measured reaches tau {mina:g}: the best, {ids}, reaches {best.tau:.2f} over "
            f"{result.search.evaluated if result.search else 0} candidates; the draft may not belong to this "
            "target, or the prompt format may differ from training (rerun without -p/--prompts and "
            "--no-chat-template), or a search needs a larger --budget", path=None,
        ))
    if result.configured is not None:
        conf = result.candidate(result.configured)
        shown = list(result.configured)
        if result.configured_problem is not None:
            out.append(finding("DF410", f"target_layer_ids {shown} cannot be "
                                        f"right ({result.configured_problem}); the best measured tap set is {ids} "
                                        f"at tau {best.tau:.2f}", path=f"{result.draft_path}/config.json"))
        elif conf is not None and conf is not best and (best.z_over(conf) or 0.0) >= LIKELY_Z:
            out.append(finding(
                "DF410",
                f"target_layer_ids {shown} reach tau {conf.tau:.2f} but {ids} reach "
                f"{best.tau:.2f} ({best.z_over(conf):.1f} standard errors apart); the configured tap layers are "
                "probably not the ones this draft was trained on; check the model card, then write the measured ones",
                path=f"{result.draft_path}/config.json",
            ))
    return out


def unclear_findings(result: Any) -> list[Finding]:
    """DF412 when a recovered winner (no usable ids configured) still leads only narrowly."""
    best, second = result.best, result.runner_up
    if best is None or second is None or (result.configured is not None and result.configured_problem is None):
        return []
    c = result.confidence()
    if c["verdict"] != "narrow":
        return []
    ev = getattr(result, "evidence", None) or {}
    rounds = ev.get("rounds") or [{}]
    n = ev.get("max_new_tokens")
    spent = f" after {len(rounds) - 1} more round(s) of measurement, up to {n} tokens per prompt," if len(rounds) > 1 else ""
    z = "—" if c["z"] is None else f"{c['z']:.1f}"
    return [finding(
        "DF412",
        f"key 'target_layer_ids': {list(best.target_layer_ids)} "
        f"(tau {best.tau:.2f}) leads {list(second.target_layer_ids)} (tau {second.tau:.2f}) by {z} standard errors"
        f"{spent} which is within noise; no winner is claimed: rerun with more -n or --prompts in the draft's training "
        "format, or --write OUT --force to write the leader anyway",
        path=f"{result.draft_path or result.draft_label}/config.json", key="target_layer_ids",
    )]


def refuse_unclear_write(result: Any) -> None:
    """``--write`` of a winner that leads only within noise (DF412): refused unless ``--force``."""
    if any(f.code == "DF412" for f in result.findings) and not result.options.force:
        raise CheckFailed(f"--write {result.options.write}: nothing written; {list(result.best.target_layer_ids)} lead only "
                          "within measurement noise (DF412); give --force to write them anyway")


def missing_taps(findings: Sequence[Finding]) -> bool:
    """Whether the pre-check found ``target_layer_ids`` missing (DF101): probe-taps can measure it."""
    return any(f.code == "DF101" and f.key == "target_layer_ids" for f in findings)


def probe_taps_command(draft: str, target: str | None) -> str:
    """The command line that measures a draft's lost tap layers and writes a copy with them."""
    import shlex

    return f"dflash-ckpt probe-taps {shlex.quote(draft)} --target {shlex.quote(target or 'TARGET')} --write OUT"
