"""What a run samples with: temperature, top-p, top-k, seed and the verification rule (no torch).

smoke-run's options (``--temperature``, ``--top-p``, ``--top-k``, ``--seed``, ``--verify``,
``--sampling generation-config``) become one ``SamplingSettings``, validated here before any
weight is loaded, so a bad value is one DF004 line and not a traceback from inside a step. The
tensor work lives in ``runtime/sampling.py``; this module stays torch-free because the options,
the report and the JSON need it and must not pay for importing torch.

Why two rules, named as engines run them: ``match`` is what the z-lab reference's
``dflash_generate`` runs (and so the paper's temperature-1 tables): the target samples its own
token at every block position and a draft counts as accepted when it equals that sample.
``rejection`` is speculative sampling as vLLM and SGLang run it (accept a draft with probability
min(1, p/q), resample from the residual on rejection). With DFlash's drafts, which are the
draft's argmax (q one-hot), the two have the same law: both accept x with probability p(x) and
on a miss emit a token from p without x (tests/test_sampling_lossless.py checks it). They differ
in their random streams, and they would differ for a drafter that samples; the report names the
rule that ran so that an engine's acceptance is compared under its own rule.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from dflash_ckpt.errors import UsageError

#: The verification rules, and which engines run each (the report names them beside the rule).
RULES: dict[str, tuple[str, ...]] = {
    "match": ("z-lab reference (dflash_generate, its benchmark)", "the DFlash paper's temperature-1 tables"),
    "rejection": ("vLLM (v1 rejection sampler, one-hot DFlash drafts)", "SGLang"),
}

#: The rule when the user names none: the one the paper's published figures were measured with.
DEFAULT_RULE = "match"


@dataclass(frozen=True)
class SamplingSettings:
    """One run's sampling. ``temperature == 0`` is greedy (argmax; top-p, top-k and the seed do
    not apply), which is the default and keeps smoke-run's exact, tie-aware lossless check."""

    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0  # 0: off (as in vLLM and Hugging Face)
    seed: int = 0
    rule: str = DEFAULT_RULE
    source: str = "options"  # or "generation_config.json": where the values came from

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def engines(self) -> tuple[str, ...]:
        """The engines that verify drafts with this settings' rule (for the report)."""
        return RULES[self.rule]

    def to_json(self) -> dict[str, Any]:
        """The ``settings.sampling`` object of smoke-run's JSON (proposed field name)."""
        return {**asdict(self), "greedy": self.greedy, "engines": list(self.engines())}


def make_settings(temperature: float = 0.0, top_p: float = 1.0, top_k: int | None = 0, seed: int = 0,
                  rule: str = DEFAULT_RULE, source: str = "options") -> SamplingSettings:
    """Validated settings; every bad value is one ``UsageError`` naming its option.

    A NaN or infinite temperature, a negative one, a top-p outside (0, 1] or a negative top-k
    would otherwise surface as NaN probabilities deep in a step (torch's multinomial raises,
    inverse-CDF sampling silently picks the last token)."""
    if not isinstance(temperature, (int, float)) or not math.isfinite(temperature) or temperature < 0:
        raise UsageError(f"--temperature must be a finite number >= 0 (0: greedy), got {temperature!r}",
                         key="--temperature")
    if not isinstance(top_p, (int, float)) or not math.isfinite(top_p) or not 0.0 < top_p <= 1.0:
        raise UsageError(f"--top-p must be in (0, 1] (1: off), got {top_p!r}", key="--top-p")
    k = 0 if top_k is None or top_k == -1 else top_k  # -1: off in vLLM's spelling
    if not isinstance(k, int) or isinstance(k, bool) or k < 0:
        raise UsageError(f"--top-k must be an integer >= 0 (0 or -1: off), got {top_k!r}", key="--top-k")
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2**63:
        raise UsageError(f"--seed must be an integer in 0..2**63-1, got {seed!r}", key="--seed")
    if rule not in RULES:
        raise UsageError(f"--verify must be one of {', '.join(RULES)}, got {rule!r}", key="--verify")
    return SamplingSettings(float(temperature), float(top_p), k, seed, rule, source)


#: ``generation_config.json`` keys ``--sampling generation-config`` reads, and the JSON types each
#: may have. transformers reads them as Python values: ``true`` as a temperature is 1.0 and the
#: string ``"false"`` as ``do_sample`` is truthy, so either would run as something the file does
#: not say; a value of another type is refused, naming the file and the key.
GENERATION_KEYS: dict[str, tuple[str, str]] = {
    "do_sample": ("bool", "true or false"),
    "temperature": ("number", "a number (0: greedy)"),
    "top_p": ("number", "a number in (0, 1]"),
    "top_k": ("int", "an integer (0 or -1: off)"),
}


def _typed(value: Any, kind: str) -> bool:
    if kind == "bool":
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    return isinstance(value, int) if kind == "int" else isinstance(value, (int, float))


def from_generation_config(generation: dict[str, Any], *, seed: int = 0, rule: str = DEFAULT_RULE,
                           where: str = "generation_config.json") -> SamplingSettings:
    """``--sampling generation-config``: the target's ``generation_config.json`` defaults.

    Hugging Face's own defaults fill what the file leaves out (temperature 1.0, top_p 1.0,
    top_k 50), and ``do_sample`` false (or absent, its default) means greedy whatever the other
    keys say, as ``generate()`` does. Qwen3's file (do_sample true, 0.6 / 0.95 / 20) becomes
    exactly what vLLM serves it with, since vLLM reads the same file. A key of the wrong type
    (``GENERATION_KEYS``; ``null`` counts as absent) or a value out of range is one DF004 line at
    ``where`` naming the key."""
    for key, (kind, want) in GENERATION_KEYS.items():
        value = generation.get(key)
        if value is not None and not _typed(value, kind):
            shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
            raise UsageError(f"key '{key}' must be {want}, found {shown} ({type(value).__name__}); fix the file, or "
                             "give --temperature (and --top-p, --top-k) instead of --sampling generation-config",
                             key=key, path=where)
    if not generation.get("do_sample"):
        return make_settings(0.0, 1.0, 0, seed, rule, "generation_config.json")
    values = {key: generation.get(key) if generation.get(key) is not None else default
              for key, default in (("temperature", 1.0), ("top_p", 1.0), ("top_k", 50))}
    try:
        return make_settings(values["temperature"], values["top_p"], values["top_k"], seed, rule, "generation_config.json")
    except UsageError as err:  # make_settings names the option; here the value is the file's key
        option = err.key or ""
        key = option.removeprefix("--").replace("-", "_")
        if key not in values:
            raise
        bound = err.text.removeprefix(f"{option} ").split(", got ")[0]
        raise UsageError(f"key '{key}' is {values[key]!r}: {bound}", key=key, path=where) from None
