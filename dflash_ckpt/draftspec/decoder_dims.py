"""A run's reading of the transformer dimensions a target and a draft share (``specs.Dims``).

``Dims.from_config`` keeps what ``inspect`` reports (``None`` where a key is bad); ``read_dims``
builds the same type for a run: every size present and valid, or one DF142 line naming the key
(exit 1), or a refusal (exit 2) for an activation the runtime does not implement. It lives here,
not in ``specs``, because ``config_values`` (its typed readers) imports ``specs``. No torch here.
"""

from __future__ import annotations

from typing import Any

from dflash_ckpt.draftspec.config_values import bad_value, get_bool, get_float, get_int
from dflash_ckpt.draftspec.families import Unsupported
from dflash_ckpt.draftspec.specs import Dims, default_head_dim


def read_dims(cfg: dict[str, Any], where: str) -> Dims:
    """The dimensions of the decoder settings ``cfg`` (a target's ``text_config`` when wrapped)."""
    hidden = get_int(cfg, "hidden_size", where)
    heads = get_int(cfg, "num_attention_heads", where)
    kv = get_int(cfg, "num_key_value_heads", where, default=heads)
    if heads % kv:
        raise bad_value(where, "num_key_value_heads", kv, f"a divisor of num_attention_heads ({heads})")
    head_dim = get_int(cfg, "head_dim", where, default=default_head_dim(hidden, heads))
    if head_dim is None:
        raise bad_value(where, "head_dim", None, f"given (hidden_size {hidden} is not divisible by {heads} heads)")
    if head_dim % 2:
        raise bad_value(where, "head_dim", head_dim, "even (rotary embeddings rotate pairs)")
    act = cfg.get("hidden_act", "silu")
    if act != "silu":
        raise Unsupported(f"{where}: hidden_act {act!r} (only 'silu')")
    return Dims(
        hidden_size=hidden,
        num_hidden_layers=get_int(cfg, "num_hidden_layers", where),
        num_attention_heads=heads,
        num_key_value_heads=kv,
        head_dim=head_dim,
        intermediate_size=get_int(cfg, "intermediate_size", where),
        vocab_size=get_int(cfg, "vocab_size", where),
        rms_norm_eps=get_float(cfg, "rms_norm_eps", where, default=1e-6),
        attention_bias=get_bool(cfg, "attention_bias", where, False),
    )
