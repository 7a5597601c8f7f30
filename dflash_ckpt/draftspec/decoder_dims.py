"""The transformer dimensions a target and a draft share (``Dims``), decoded once per spec.

``Dims.from_config`` reads the keys once, when a spec is built: what ``inspect`` reports (``None``
where a key is bad, the reason in ``invalid``/``too_large``, made findings by ``dims_findings``)
and the raw values a run's stricter reading needs (``written``). ``read_dims`` is that reading:
every size present and valid, or one DF142 line naming the key (exit 1), or a refusal (exit 2)
for an activation the runtime does not implement; it judges the decoded ``Dims``, never the config
again. No torch here.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from dflash_ckpt.draftspec.config_values import FLOAT_MAX, bad_value, bool_value, float_value
from dflash_ckpt.draftspec.families import Unsupported
from dflash_ckpt.draftspec.values import ABSENT, KEY_BOUNDS, as_int, show_value
from dflash_ckpt.rules import Finding, finding
from dflash_ckpt.sources.jsonfile import json_type

#: Keys a run judges beyond ``inspect``'s sizes, kept as written (``ABSENT`` when missing).
_WRITTEN = ("head_dim", "hidden_act", "rms_norm_eps", "attention_bias")
#: The sizes in the order a run judges them (the first bad one is its DF142 line).
_RUN_ORDER = ("num_hidden_layers", "intermediate_size", "vocab_size")


def default_head_dim(hidden: int | None, heads: int | None) -> int | None:
    """The head size loaders take when ``head_dim`` is absent: ``hidden_size / num_attention_heads``
    when it divides (``None`` otherwise). The one place the derivation is written."""
    return hidden // heads if hidden and heads and hidden % heads == 0 else None


@dataclass(frozen=True)
class Dims:
    """The sizes of one decoder stack, named as the config keys that hold them.

    One type for both readers: ``Dims.from_config`` is what ``inspect`` reports (``None`` where a
    key is missing, invalid or beyond ``KEY_BOUNDS``, with the reason in ``invalid``/``too_large``),
    and ``read_dims`` is what a run needs (every size present and valid, or one DF142 line naming
    the key), so code that holds a run's ``Dims`` may treat the sizes as set.
    """

    hidden_size: int | None
    num_hidden_layers: int | None
    num_attention_heads: int | None
    num_key_value_heads: int | None
    head_dim: int | None
    intermediate_size: int | None
    vocab_size: int | None
    attention_bias: bool
    rms_norm_eps: float | None = 1e-6
    #: key -> the offending raw value (``ABSENT`` when missing)
    invalid: dict[str, Any] = field(default_factory=dict, hash=False)
    #: key -> a positive value beyond ``KEY_BOUNDS`` (treated as unknown by every check)
    too_large: dict[str, int] = field(default_factory=dict, hash=False)
    #: ``_WRITTEN``'s keys as the config writes them: what ``read_dims`` judges beyond the sizes
    written: dict[str, Any] = field(default_factory=dict, hash=False, compare=False, repr=False)

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Dims:
        invalid: dict[str, Any] = {}
        too_large: dict[str, int] = {}

        def pos(key: str, default: Any = ABSENT) -> int | None:
            """A positive int key; a required one (no default) that is absent is invalid."""
            raw = config.get(key, ABSENT)
            if raw is ABSENT or raw is None:
                if default is ABSENT:
                    invalid[key] = raw
                    return None
                return default
            val = as_int(raw)
            if val is None or val <= 0:
                invalid[key] = raw
                return None
            if val > KEY_BOUNDS[key]:
                too_large[key] = val
                return None
            return val

        hidden = pos("hidden_size")
        heads = pos("num_attention_heads")
        kv = pos("num_key_value_heads", heads)
        head_dim = pos("head_dim", default_head_dim(hidden, heads))
        if head_dim is None and "head_dim" not in invalid and hidden and heads:
            invalid["head_dim"] = f"absent, and hidden_size {hidden} is not divisible by {heads} heads"
        eps = config.get("rms_norm_eps", 1e-6)
        return cls(
            hidden_size=hidden,
            num_hidden_layers=pos("num_hidden_layers"),
            num_attention_heads=heads,
            num_key_value_heads=kv,
            head_dim=head_dim,
            intermediate_size=pos("intermediate_size"),
            vocab_size=pos("vocab_size"),
            attention_bias=config.get("attention_bias") is True,
            rms_norm_eps=float(eps) if isinstance(eps, (int, float)) and not isinstance(eps, bool) and 0 < eps <= FLOAT_MAX else None,
            invalid=invalid,
            too_large=too_large,
            written={key: config.get(key, ABSENT) for key in _WRITTEN},
        )


def too_large_finding(where: str, path: str, value: Any, bound: int, what: str = "") -> Finding:
    """DF145: a number (or list) beyond the bound this tool accepts for ``path``."""
    return finding(
        "DF145",
        f"key '{path}' is {show_value(value)}{what}, beyond the {bound:,} this tool accepts (no "
        "real draft comes near); restore the published value", path=where, key=path,
    )


def dims_findings(dims: Dims, where: str) -> tuple[list[Finding], list[Finding]]:
    """``inspect``'s findings on a draft's sizes: DF142 for each invalid one, DF145 for each
    beyond its bound (two lists: the checks report them at two places)."""
    invalid = []
    for key, raw in dims.invalid.items():
        shown = "missing" if raw is ABSENT else (show_value(raw)[1:-1] if isinstance(raw, str) else f"{json_type(raw)} {show_value(raw)}")
        invalid.append(finding("DF142", f"key '{key}' must be a positive integer ({shown}); tensor shapes follow from it",
                               path=where, key=key))
    return invalid, [too_large_finding(where, key, v, KEY_BOUNDS[key]) for key, v in dims.too_large.items()]


def read_dims(dims: Dims, where: str) -> Dims:
    """A run's ``Dims`` from the decoded ones: every size set (a value beyond ``KEY_BOUNDS`` is
    used as written), else the DF142 line of the first bad key in the run's order."""

    def size(key: str, default: int | None = None) -> int:
        if key in dims.too_large:
            return dims.too_large[key]
        if key in dims.invalid:
            raw = dims.invalid[key]
            raise bad_value(where, key, None if raw is ABSENT else raw, "an integer >= 1")
        value = getattr(dims, key)
        value = value if value is not None else default
        if value is None:  # absent, and its default is unknown: the sizes it defaults to are bad
            raise bad_value(where, key, None, "an integer >= 1")
        return value

    hidden = size("hidden_size")
    heads = size("num_attention_heads")
    kv = size("num_key_value_heads", heads)
    if heads % kv:
        raise bad_value(where, "num_key_value_heads", kv, f"a divisor of num_attention_heads ({heads})")
    written = dims.written.get("head_dim", ABSENT)
    if written is ABSENT or written is None:
        head_dim = default_head_dim(hidden, heads)
        if head_dim is None:
            raise bad_value(where, "head_dim", None, f"given (hidden_size {hidden} is not divisible by {heads} heads)")
    else:
        head_dim = size("head_dim")
    if head_dim % 2:
        raise bad_value(where, "head_dim", head_dim, "even (rotary embeddings rotate pairs)")
    act = dims.written.get("hidden_act", ABSENT)
    if act is not ABSENT and act != "silu":
        raise Unsupported(f"{where}: hidden_act {act!r} (only 'silu')")
    sizes = {key: size(key) for key in _RUN_ORDER}
    eps, bias = (None if v is ABSENT else v for v in (dims.written.get("rms_norm_eps"), dims.written.get("attention_bias")))
    return replace(
        dims, invalid={}, too_large={}, hidden_size=hidden, num_attention_heads=heads, num_key_value_heads=kv,
        head_dim=head_dim, **sizes, rms_norm_eps=float_value(eps, "rms_norm_eps", where, default=1e-6),
        attention_bias=bool_value(bias, "attention_bias", where, False),
    )
