"""The largest token id a target's ``tokenizer_config.json`` names (its ``added_tokens_decoder``
keys), so that ids past the embedding rows are caught before a run (DF316, llama.cpp#28158).

Best effort: a tokenizer config that cannot be read or parsed gives ``None`` here (inspect checks
the model; smoke-run reads the tokenizer itself and reports what is wrong with it)."""

from __future__ import annotations

from dflash_ckpt.errors import DFlashCkptError
from dflash_ckpt.sources.base import Source
from dflash_ckpt.sources.jsonfile import decode_json_bytes, require_object

NAME = "tokenizer_config.json"


def added_token_ids(source: Source) -> tuple[int, ...] | None:
    """The ids of the tokenizer's special and added tokens (``added_tokens_decoder``), sorted; None
    without a readable tokenizer config that lists them. Every id below the first is an ordinary
    token of the tokenizer's base vocabulary (BPE vocabularies are numbered first, added tokens
    after them), which a mask id must not be (DF320)."""
    if not source.exists(NAME):
        return None
    try:
        where = source.where(NAME)
        config = require_object(decode_json_bytes(source.read_json_bytes(NAME), where), where)
    except DFlashCkptError:
        return None
    added = config.get("added_tokens_decoder")
    ids = [int(k) for k in added if isinstance(k, str) and k.isascii() and k.isdigit() and len(k) < 12] if isinstance(added, dict) else []
    return tuple(sorted(ids)) or None
