"""Pairing checks (DF3xx): does this draft fit this target?"""

from __future__ import annotations

from dflash_ckpt.rules import Finding, finding
from dflash_ckpt.limits import MAX_DIM, MAX_LAYERS, MAX_VOCAB
from dflash_ckpt.draftspec.specs import DraftSpec, TargetSpec, as_int, bounded_int


def short_list(items: list[int], show: int = 8) -> str:
    """A list of ints for a one-line message: the first ``show``, then how many more."""
    if len(items) <= show:
        return str(items)
    return "[" + ", ".join(map(str, items[:show])) + f", ... ({len(items) - show} more)]"


def check_pairing(spec: DraftSpec, target: TargetSpec) -> list[Finding]:
    tw = target.where + (" (text_config)" if target.text_config_used else "")
    depth = bounded_int(target.num_hidden_layers, MAX_LAYERS)
    hidden = bounded_int(target.hidden_size, MAX_DIM)
    vocab = bounded_int(target.vocab_size, MAX_VOCAB)
    out: list[Finding] = []
    for key, val, raw, bound in (
        ("num_hidden_layers", depth, target.num_hidden_layers, MAX_LAYERS),
        ("hidden_size", hidden, target.hidden_size, MAX_DIM),
        ("vocab_size", vocab, target.vocab_size, MAX_VOCAB),
    ):
        if val is None or val <= 0:
            big = as_int(raw) is not None and raw > bound
            out.append(finding(
                "DF308",
                f"key '{key}' is " + (f"beyond the {bound:,} this tool accepts" if big else
                "missing or not a positive integer") + "; point --target at the target model's folder",
                path=tw, key=key,
            ))
    depth, hidden, vocab = (v if v is not None and v > 0 else None for v in (depth, hidden, vocab))
    w = spec.where
    ntl = spec.num_target_layers
    if depth and ntl is not None and ntl != depth:
        out.append(finding(
            "DF301",
            f"num_target_layers is {ntl} but the target {target.label} has {depth} layers; "
            "this draft was trained for another target", path=w,
        ))
    if hidden and spec.dims.hidden_size is not None and spec.dims.hidden_size != hidden:
        out.append(finding(
            "DF302",
            f"hidden_size is {spec.dims.hidden_size} but the target's is {hidden}; use the draft "
            "trained for this target", path=w,
        ))
    if vocab and spec.dims.vocab_size is not None and spec.dims.vocab_size != vocab:
        out.append(finding(
            "DF303",
            f"vocab_size is {spec.dims.vocab_size} but the target's is {vocab}; the draft uses "
            "the target's lm_head, so they must match", path=w,
        ))
    mask = spec.mask_token_id
    draft_vocab = spec.dims.vocab_size
    said = draft_vocab is not None and mask is not None and mask >= draft_vocab  # DF122 says it, once is enough
    if mask is not None and vocab and mask >= vocab and not said:
        out.append(finding(
            "DF304",
            f"mask_token_id {mask} is not below the target's vocab_size {vocab}; it must be a "
            "row of the target's embedding table", path=w, key="mask_token_id",
        ))
    pad = bounded_int(target.pad_token_id, MAX_VOCAB)
    if mask is not None and pad is not None and mask == pad:
        out.append(finding(
            "DF305",
            f"mask_token_id {mask} is the target's pad_token_id; use the family's dedicated "
            "mask token", path=w, key="mask_token_id",
        ))
    ids = spec.target_layer_ids or []
    if depth:
        beyond = [i for i in ids if i >= depth]
        if beyond:
            out.append(finding(
                "DF306",
                f"target_layer_ids {short_list(beyond)} are beyond the target's {depth} layers (0..{depth - 1})",
                path=w,
            ))
        if depth - 1 in ids:
            out.append(finding(
                "DF307",
                f"target_layer_ids taps layer {depth - 1}, the target's last; Hugging Face's "
                "last hidden state is taken after the final norm, engines differ on which they feed", path=w,
            ))
    return out
