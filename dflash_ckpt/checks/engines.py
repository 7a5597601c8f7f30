"""Reader verdicts: would each engine load this config as is, and if not, why (docs/DESIGN.md section 3).

Each reader is modelled by where it looks for every DFlash key and what else it demands. The
models are deliberately small: they encode the lookup order the engines document or implement
(late 2026), not their whole loaders.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

from dflash_ckpt.draftspec.specs import ABSENT, NESTED, TOP_LEVEL, DraftSpec, TargetSpec, as_int, as_int_list, same_json


class Verdict(NamedTuple):
    loads: bool
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"loads": self.loads, "reason": self.reason}


Order = tuple[str, ...]
NESTED_ONLY: Order = (NESTED,)
TOP_ONLY: Order = (TOP_LEVEL,)
NESTED_THEN_TOP: Order = (NESTED, TOP_LEVEL)
TOP_THEN_NESTED: Order = (TOP_LEVEL, NESTED)

_PLACE = {NESTED: "dflash_config", TOP_LEVEL: "the top level"}


class _Reading:
    """Collects what one reader sees, its blocking problems and its caveats."""

    def __init__(self, spec: DraftSpec) -> None:
        self.spec = spec
        self.problems: list[str] = []
        self.notes: list[str] = []

    def read(self, key: str, order: Order, *, required: bool = True, kind: str = "int") -> Any:
        rk = self.spec.keys.get(key) or self.spec.extra_keys[key]
        for place in order:
            raw = rk.at(place)
            if raw is ABSENT:
                continue
            valid = as_int(raw) is not None if kind == "int" else as_int_list(raw) is not None
            if not valid:
                self.problems.append(f"{key} read from {_PLACE[place]} is not {'an integer' if kind == 'int' else 'a list of integers'}")
                return None
            other = rk.at(TOP_LEVEL if place == NESTED else NESTED)
            if other is not ABSENT and not same_json(other, raw):
                self.notes.append(f"reads {key}={raw} from {_PLACE[place]}, ignoring the conflicting {other}")
            return raw
        if required:
            if len(order) > 1:
                self.problems.append(f"{key} is in neither dflash_config nor the top level")
            else:
                elsewhere = rk.at(TOP_LEVEL if order[0] == NESTED else NESTED)
                there = f" (it is only in {_PLACE[TOP_LEVEL if order[0] == NESTED else NESTED]})" if elsewhere is not ABSENT else ""
                self.problems.append(f"reads {key} only from {_PLACE[order[0]]}, where it is absent{there}")
        return None

    def verdict(self, ok_text: str = "loads as is") -> Verdict:
        if self.problems:
            return Verdict(False, "fails: " + "; ".join(self.problems))
        return Verdict(True, ok_text + ("; " + "; ".join(self.notes) if self.notes else ""))


def _zlab_legacy(spec: DraftSpec, target: TargetSpec | None) -> Verdict:
    r = _Reading(spec)
    r.read("block_size", TOP_ONLY)
    r.read("mask_token_id", NESTED_ONLY)
    r.read("target_layer_ids", NESTED_ONLY, kind="list")
    r.read("num_target_layers", TOP_ONLY)
    return r.verdict()


def _zlab(spec: DraftSpec, target: TargetSpec | None) -> Verdict:
    r = _Reading(spec)
    r.read("block_size", NESTED_THEN_TOP)
    r.read("mask_token_id", NESTED_THEN_TOP)
    r.read("target_layer_ids", NESTED_ONLY, kind="list")
    return r.verdict()


def _sglang(spec: DraftSpec, target: TargetSpec | None) -> Verdict:
    r = _Reading(spec)
    r.read("block_size", NESTED_THEN_TOP)
    mask = r.read("mask_token_id", NESTED_THEN_TOP)
    r.read("target_layer_ids", NESTED_THEN_TOP, kind="list")
    r.read("num_target_layers", NESTED_THEN_TOP)
    vocab = as_int(target.vocab_size) if target else None
    if mask is not None and vocab is not None and mask >= vocab:
        r.problems.append(f"mask_token_id {mask} is not below the target's vocab_size {vocab}")
    for key in ("output_multiplier", "final_logit_softcapping"):
        rk = spec.extra_keys[key]
        if rk.nested is ABSENT and rk.top not in (ABSENT, None):
            r.notes.append(f"but ignores the top-level {key}={rk.top} (read only from dflash_config)")
    return r.verdict()


def _vllm(spec: DraftSpec, target: TargetSpec | None) -> Verdict:
    r = _Reading(spec)
    r.read("mask_token_id", NESTED_ONLY)
    r.read("target_layer_ids", NESTED_ONLY, kind="list")
    block = spec.block_size
    if target is not None:
        tv, dv = as_int(target.vocab_size), spec.dims.vocab_size
        if tv is not None and dv is not None and tv != dv:
            r.problems.append(f"vocab_size {dv} differs from the target's {tv}")
    weights = spec.weights
    if weights is not None and weights.tensors and "fc.weight" not in weights.tensors:
        if any(n.endswith(".fc.weight") for n in weights.tensors):
            r.problems.append("tensor names are prefixed; it expects unprefixed names (fc.weight)")
    for key in ("output_multiplier", "final_logit_softcapping"):
        if spec.extra_keys[key].value is not None:
            r.notes.append(f"but does not apply {key}")
    hint = f"pass num_speculative_tokens={block - 1}" if block and block >= 2 else "pass num_speculative_tokens = block_size - 1"
    return r.verdict(f"loads as is (block_size is not read: {hint})")


def _lmdeploy(spec: DraftSpec, target: TargetSpec | None) -> Verdict:
    r = _Reading(spec)
    r.read("block_size", NESTED_ONLY)
    r.read("mask_token_id", NESTED_ONLY)
    ids = r.read("target_layer_ids", NESTED_ONLY, kind="list")
    if ids is not None and any(b <= a for a, b in zip(ids, ids[1:])):
        r.problems.append("target_layer_ids must be strictly increasing")
    ntl = r.read("num_target_layers", TOP_ONLY)
    depth = as_int(target.num_hidden_layers) if target else None
    if ntl is not None and depth is not None and ntl != depth:
        r.problems.append(f"num_target_layers {ntl} differs from the target's depth {depth}")
    lt = spec.config.get("layer_types")
    if not isinstance(lt, list):
        r.problems.append("needs an explicit layer_types list")
    elif spec.dims.num_hidden_layers is not None and len(lt) != spec.dims.num_hidden_layers:
        r.problems.append(f"layer_types has {len(lt)} entries for {spec.dims.num_hidden_layers} layers")
    return r.verdict()


def _speculators(spec: DraftSpec, target: TargetSpec | None) -> Verdict:
    r = _Reading(spec)
    r.read("block_size", TOP_THEN_NESTED)
    r.read("mask_token_id", NESTED_ONLY)
    r.read("target_layer_ids", NESTED_ONLY, kind="list")
    if target is not None:
        th, dh = as_int(target.hidden_size), spec.dims.hidden_size
        if th is not None and dh is not None and th != dh:
            r.problems.append(f"hidden_size {dh} differs from the target's {th}")
    return r.verdict()


class Reader(NamedTuple):
    key: str
    title: str
    judge: Callable[[DraftSpec, TargetSpec | None], Verdict]


READERS: tuple[Reader, ...] = (
    Reader("zlab-legacy", "z-lab (older)", _zlab_legacy),
    Reader("zlab", "z-lab (main)", _zlab),
    Reader("sglang", "SGLang", _sglang),
    Reader("vllm", "vLLM", _vllm),
    Reader("lmdeploy", "lmdeploy 0.18", _lmdeploy),
    Reader("speculators", "speculators", _speculators),
)

READER_TITLES: dict[str, str] = {r.key: r.title for r in READERS}


def judge_readers(spec: DraftSpec, target: TargetSpec | None = None) -> dict[str, Verdict]:
    """Verdict of every reader, keyed by its short name."""
    return {reader.key: reader.judge(spec, target) for reader in READERS}
