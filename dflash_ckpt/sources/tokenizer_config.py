"""The largest token id a target's ``tokenizer_config.json`` names (its ``added_tokens_decoder``
keys), so that ids past the embedding rows are caught before a run (DF316, llama.cpp#28158)."""

from __future__ import annotations

from typing import Any


def max_added_token_id(config: dict[str, Any]) -> int | None:
    added = config.get("added_tokens_decoder")
    ids = [int(k) for k in added if isinstance(k, str) and k.isdigit()] if isinstance(added, dict) else []
    return max(ids) if ids else None
