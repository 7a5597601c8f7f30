"""What every reader model shares: a verdict, the lookup orders, and the reader that records
where each DFlash key was found (``checks.engines`` and ``checks.engines_more`` use it)."""

from __future__ import annotations

from typing import Any, NamedTuple

from dflash_ckpt.draftspec.specs import ABSENT, NESTED, TOP_LEVEL, DraftSpec, as_int, as_int_list, resolve_key, same_json

#: Every reader's short name (``--require-engines``, JSON ``readers``) and how a report names it.
TITLES: dict[str, str] = {
    "zlab-legacy": "z-lab (older)",
    "zlab": "z-lab (main)",
    "sglang": "SGLang",
    "vllm": "vLLM",
    "lmdeploy": "lmdeploy 0.18",
    "speculators": "speculators",
    "tensorrt-llm": "TensorRT-LLM",
    "zlab-mlx": "z-lab MLX",
    "mlx-vlm": "mlx-vlm 0.7.10",
    "exllamav3-legacy": "exllamav3 (before #276)",
    "exllamav3": "exllamav3",
}


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


class Reading:
    """Collects what one reader sees, its blocking problems and its caveats."""

    def __init__(self, spec: DraftSpec) -> None:
        self.spec = spec
        self.problems: list[str] = []
        self.notes: list[str] = []

    def read(self, key: str, order: Order, *, required: bool = True, kind: str = "int") -> Any:
        rk = self.spec.keys.get(key) or self.spec.extra_keys.get(key) or resolve_key(self.spec.config, key)
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
