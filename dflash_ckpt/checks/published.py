"""Published drafts' reported acceptance beside the measured one (package data, no torch).

Why: a tau of 3.1 means nothing on its own. Beside the model card's 6.50 on GSM8K for the same
draft it is the signature of something the checks cannot see: a draft run in fp16, the wrong
chat template or thinking mode, a wrong tap list, the wrong block layout. The table
(``dflash_ckpt/data/published_figures.json``) holds only figures with a source we can cite: each
row names its draft, target, benchmark, tau (bonus included), speedup where reported, engine,
hardware, temperature, verification rule, block size and thinking mode.

A run's draft is known by a fingerprint of its safetensors headers and config (``published_draft``),
never by the name it was given: a local folder called ``z-lab/Qwen3-4B-DFlash-b16/`` holding
another draft must not be held to that draft's figures (``known_draft`` still maps a repo id, for
callers that name the table's rows). The fingerprint covers what makes it that draft's shape: the resolved DFlash keys and every tensor's name and shape (not the dtype: a
local fp16 copy of a published draft must still be recognised, since fp16 is one of the causes
the comparison is there to reveal). The fingerprint names an architecture and its DFlash keys,
not the trained values; a retrain with the same shapes matches, and a repo re-uploaded with
other layers or taps (z-lab/dflash#152) no longer does.

Suites map to the benchmarks of the same task (``BENCHMARKS``); where a suite maps to two, the
comparison uses the lower published figure, so it can only under-fire.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib.resources import files
from typing import Any

#: Our suites (``sources/suites.py``) and the published benchmarks of the same task. ``long`` has
#: no published counterpart.
BENCHMARKS: dict[str, tuple[str, ...]] = {
    "math": ("GSM8K", "Math500"),
    "code": ("HumanEval", "MBPP"),
    "chat": ("MT-Bench",),
}

#: The measured tau is "far below" when even its upper 95% bound is under this share of the
#: published figure. Why 0.6: a faithful run can sit 20-25% under a card's figure for honest
#: reasons (our suites are not the benchmark's prompts: the card's own two math benchmarks differ
#: by 17%, GSM8K 6.50 against Math500 7.84; temperature 1 costs 8-15%, 6.50 -> 5.98 and
#: 7.84 -> 6.67; hardware numerics and near ties), while the failures this finding is for land far
#: lower: an fp16 draft accepts 0.06 of 15 drafts (tau ~1.1), wrong taps or layout give tau ~1,
#: a wrong template or thinking mode roughly halves it. 0.6 leaves the honest gap a margin and
#: still catches them; using the upper bound means noise alone never fires it.
FAR_BELOW = 0.6

#: Keys of the fingerprint, in order.
_KEYS = ("block_size", "mask_token_id", "target_layer_ids", "num_target_layers")


@dataclass(frozen=True)
class PublishedRow:
    """One published figure (a row of ``published_figures.json``)."""

    draft: str
    target: str
    benchmark: str
    tau: float
    speedup: float | None
    temperature: float
    rule: str  # "greedy", or the sampling rule the source's engine runs ("match": z-lab's benchmark)
    block_size: int
    engine: str
    hardware: str
    thinking: str | None  # "off", "on", or None where the source does not say
    source: str  # a URL

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@lru_cache(maxsize=1)
def _table() -> dict[str, Any]:
    return json.loads(files("dflash_ckpt.data").joinpath("published_figures.json").read_text(encoding="utf-8"))


def rows() -> list[PublishedRow]:
    """Every published figure, in the file's order."""
    table = _table()
    sources = table["sources"]
    return [PublishedRow(**{**r, "source": sources[r["source"]]["url"]}) for r in table["rows"]]


def drafts() -> dict[str, dict[str, Any]]:
    """Published draft repo id -> ``{"target", "fingerprint", "config"}``."""
    return dict(_table()["drafts"])


def fingerprint_of(keys: Mapping[str, Any], shapes: Mapping[str, Sequence[int]]) -> str:
    """``sha256:`` + 16 hex digits over the DFlash keys and the tensors' names and shapes.

    Names lose a leading ``model.`` (a third-party dump of the same draft), the JSON is canonical
    (sorted keys, no spaces), so the value depends on nothing but what it names."""
    doc = {"keys": {k: keys.get(k) for k in _KEYS},
           "tensors": {name.removeprefix("model."): list(shape) for name, shape in shapes.items()}}
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()[:16]


def fingerprint(spec: Any) -> str | None:
    """A ``DraftSpec``'s fingerprint, or ``None`` when its weights were not all read (an
    inventory with unreadable headers would fingerprint a partial list)."""
    inventory = getattr(spec, "weights", None)
    if inventory is None or not inventory.readable or not inventory.tensors:
        return None
    keys = {"block_size": spec.block_size, "mask_token_id": spec.mask_token_id,
            "target_layer_ids": spec.target_layer_ids, "num_target_layers": spec.num_target_layers}
    return fingerprint_of(keys, {name: info.shape for name, info in inventory.tensors.items()})


def known_draft(repo_or_fingerprint: str) -> str | None:
    """The published draft's repo id for a repo id (``org/name``, any case, ``@rev`` ignored) or
    a fingerprint, else ``None``."""
    known = drafts()
    if repo_or_fingerprint.startswith("sha256:"):
        return next((repo for repo, d in known.items() if d["fingerprint"] == repo_or_fingerprint), None)
    wanted = repo_or_fingerprint.split("@", 1)[0].strip("/").lower()
    return next((repo for repo in known if repo.lower() == wanted), None)


def published_draft(spec: Any) -> str | None:
    """The published draft a run's ``DraftSpec`` is, by the fingerprint of its weights' headers
    and DFlash keys alone (``None``: unknown, or its headers were not all read). Neither a Hub id
    nor a folder name is evidence of the weights: a folder is named by whoever made it, and a Hub
    repo may be re-uploaded with other weights (z-lab/dflash#152)."""
    found = fingerprint(spec)
    return known_draft(found) if found is not None else None


def published_for(repo_or_fingerprint: str) -> list[PublishedRow]:
    """Every published figure of the draft a repo id or fingerprint names (empty when unknown)."""
    repo = known_draft(repo_or_fingerprint)
    return [r for r in rows() if r.draft == repo] if repo else []


def comparable(figures: Iterable[PublishedRow], suite: str, temperature: float) -> list[PublishedRow]:
    """The figures to set beside a suite measured at ``temperature``.

    Greedy runs compare with greedy figures. A sampled run at temperature ``t <= 1`` compares with
    the temperature-1 figures: acceptance falls as the temperature rises, so a figure taken at 1
    is a floor for any lower temperature and the comparison can only under-fire. Above 1, and
    for a suite without a benchmark (``long``), there is none."""
    names = BENCHMARKS.get(suite, ())
    if temperature == 0.0:
        return [r for r in figures if r.benchmark in names and r.temperature == 0.0]
    if temperature <= 1.0:
        return [r for r in figures if r.benchmark in names and r.temperature == 1.0]
    return []


def reference_tau(figures: Sequence[PublishedRow]) -> float | None:
    """The published tau a suite is held to: the lowest of its comparable figures."""
    return min((r.tau for r in figures), default=None)


def far_below(measured_tau: float, ci_high: float | None, published_tau: float) -> bool:
    """Whether a measured tau is far below a published one: its upper 95% bound under
    ``FAR_BELOW`` x published. No interval (too little evidence) is never far below: that run
    gets the evidence warning instead. ``measured_tau`` is taken for the message's sake and must
    lie within its interval."""
    if ci_high is None:
        return False
    if not measured_tau <= ci_high:
        raise ValueError("the measured tau lies above its own upper bound")
    return ci_high < FAR_BELOW * published_tau


def far_below_message(suite: str, measured_tau: float, ci: tuple[float, float], published: PublishedRow) -> str:
    """The finding's text (proposed code DF409, a warning), naming the usual causes."""
    return (f"suite {suite}: tau {measured_tau:.2f} (95% interval {ci[0]:.2f}-{ci[1]:.2f}) is far below the "
            f"{published.tau:.2f} published for {published.draft} on {published.benchmark} "
            f"(temperature {published.temperature:g}, block {published.block_size}, thinking "
            f"{published.thinking or 'not stated'}; {published.source}): its upper bound is under "
            f"{FAR_BELOW:g} x the published figure. Check the draft's dtype (keep it bf16), the chat template "
            f"and thinking mode (--thinking), target_layer_ids and the block layout")
