"""Plan the canonical form of a draft config (docs/DESIGN.md section 4): parsed config in, edits out.

Pure: no files, no printing. The plan is a list of ``Edit``s (applied to the text by
``config_text``, so that nothing else in the file moves) and the config they produce.

The canonical form written here:
- ``dflash_config`` holds ``block_size``, ``mask_token_id``, ``target_layer_ids`` and
  ``num_target_layers`` (the issue asks for top-level copies that *mirror the nested values*, so
  the nested form carries all four and ``--no-mirrors`` loses nothing);
- top-level ``block_size`` and ``num_target_layers`` mirror them (unless ``mirrors=False``), and a
  top-level ``mask_token_id`` / ``target_layer_ids`` that was already there stays, equal;
- ``output_multiplier``, ``final_logit_softcapping``, ``input_embedding_scale`` set at the top
  level are copied into ``dflash_config`` (the top-level copy stays);
- an explicit ``layer_types`` list, derived only where the config leaves no doubt
  (``draftspec.layer_kinds``, the rule the runtime runs too).

Nothing is guessed: a missing key must come from an override (or, for ``num_target_layers``, the
target's own config), and a key whose two copies disagree needs ``prefer``.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from dflash_ckpt.canonical.config_text import ADD, REMOVE, SET, Edit, apply_edit
from dflash_ckpt.errors import CheckFailed, UsageError
from dflash_ckpt.limits import MAX_LAYERS
from dflash_ckpt.sources.jsonfile import json_type
from dflash_ckpt.draftspec.layer_kinds import LAYER_KINDS, SHORT_NAMES, derive_layer_kinds, explicit_layer_kinds, layer_kind_keys
from dflash_ckpt.draftspec.layout import resolve_layout
from dflash_ckpt.draftspec.speculators_format import is_speculators_native, zlab_steps
from dflash_ckpt.draftspec.specs import ABSENT, DFLASH_KEYS, SCALING_KEYS, as_int, as_int_list, resolve_key, same_json

PREFER_NESTED, PREFER_TOP = "nested", "top-level"
#: Keys the canonical ``dflash_config`` holds, in the order a new ``dflash_config`` lists them.
NESTED_KEYS = ("block_size", "mask_token_id", "num_target_layers", "target_layer_ids")
#: Keys mirrored at the top level for readers that look only there (docs/DESIGN.md section 3).
MIRRORED = ("block_size", "num_target_layers")
FLAG = {k: "--" + k.replace("_", "-") for k in (*DFLASH_KEYS, "layer_types")}


# NamedTuples, not frozen dataclasses: a frozen dataclass costs about 1.5 ms to build at import,
# and inspect imports this module whenever a reader fails (its normalize command).
class Overrides(NamedTuple):
    """Values the user supplies for keys the config lacks (``None``: not supplied)."""

    block_size: int | None = None
    mask_token_id: int | None = None
    target_layer_ids: list[int] | None = None
    num_target_layers: int | None = None
    layer_types: list[str] | None = None
    #: Keys whose supplied value replaces the config's (every copy), with this reason; for
    #: values measured rather than remembered (``probe-taps --write``). Empty: supply only.
    replace: tuple[tuple[str, str], ...] = ()
    #: ``(path, value, reason)`` set as given (probe-taps' measured block layout).
    extra: tuple[tuple[tuple[str, ...], Any, str], ...] = ()

    def get(self, key: str) -> Any:
        return getattr(self, key)

    def replacing(self, key: str) -> str | None:
        return next((why for k, why in self.replace if k == key), None)


class Known(NamedTuple):
    """Facts from outside the config that overrides must agree with."""

    fc_taps: int | None = None  # k that fc.weight [H, k*H] implies
    target_label: str | None = None
    target_depth: int | None = None
    target_vocab: int | None = None
    target_pad: int | None = None


class Change(NamedTuple):
    """One edit, told to a person: what happens at which key, and why."""

    op: str
    path: str
    value: Any
    old: Any
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "path": self.path,
            "value": None if self.value is ABSENT else self.value,
            "old": None if self.old is ABSENT else self.old,
            "reason": self.reason,
        }


@dataclass
class Plan:
    before: dict[str, Any]
    after: dict[str, Any]
    edits: list[Edit] = field(default_factory=list)
    changes: list[Change] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.edits)


def insert_position(keys: list[str], new: str) -> int:
    """Where ``new`` disturbs the existing key order least (its sorted place in a sorted object).

    Counts, for each slot, the keys that would end up on the wrong side of ``new`` and takes the
    last slot with the fewest; unsorted objects thus get the new key near its alphabetical
    neighbours, or at the end.
    """
    best, best_cost = len(keys), None
    for slot in range(len(keys) + 1):
        cost = sum(1 for k in keys[:slot] if k > new) + sum(1 for k in keys[slot:] if k < new)
        if best_cost is None or cost <= best_cost:
            best, best_cost = slot, cost
    return best


class _Builder:
    """Applies edits to a working copy of the config while recording them."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = copy.deepcopy(config)
        self.edits: list[Edit] = []
        self.changes: list[Change] = []

    def _node(self, parents: tuple[str, ...]) -> dict[str, Any]:
        node = self.config
        for p in parents:
            node = node[p]
        return node

    def put(self, path: tuple[str, ...], value: Any, reason: str) -> None:
        """Make ``path`` hold ``value``: add it (at its least disturbing place) or set it."""
        node = self._node(path[:-1])
        key = path[-1]
        if key in node:
            if same_json(node[key], value):
                return
            edit = Edit(SET, path, value)
            self.changes.append(Change("set", ".".join(path), value, node[key], reason))
        else:
            edit = Edit(ADD, path, value, insert_position(list(node), key))
            self.changes.append(Change("add", ".".join(path), value, ABSENT, reason))
        self.edits.append(edit)
        self.config = apply_edit(self.config, edit)

    def remove(self, path: tuple[str, ...], reason: str) -> None:
        node = self._node(path[:-1])
        if path[-1] not in node:
            return
        edit = Edit(REMOVE, path)
        self.changes.append(Change("remove", ".".join(path), ABSENT, node[path[-1]], reason))
        self.edits.append(edit)
        self.config = apply_edit(self.config, edit)


def _show(value: Any) -> str:
    return json.dumps(value)


def plan_normalize(
    config: dict[str, Any],
    *,
    where: str = "config.json",
    prefer: str | None = None,
    mirrors: bool = True,
    overrides: Overrides | None = None,
    known: Known | None = None,
) -> Plan:
    """The edits that bring ``config`` to the canonical form, or a one-line refusal.

    Raises ``UsageError`` (exit 2) for an override that contradicts the config or what is known,
    ``CheckFailed`` (exit 1) for a conflict without ``prefer``, a missing key without an override,
    or a ``layer_types`` list the config does not determine.
    """
    overrides = overrides if overrides is not None else Overrides()
    known = known if known is not None else Known()
    if prefer not in (None, PREFER_NESTED, PREFER_TOP):
        raise UsageError(f"--prefer must be '{PREFER_NESTED}' or '{PREFER_TOP}', not {prefer!r}")
    dc = config.get("dflash_config", ABSENT)
    if dc is not ABSENT and dc is not None and not isinstance(dc, dict):
        raise CheckFailed(
            f"key 'dflash_config' must be an object, found {json_type(dc)} {_show(dc)}; "
            "restore it as {...} holding mask_token_id and target_layer_ids",
            code="DF104", path=where,
        )

    before = config
    b = _Builder(config)
    if is_speculators_native(config):
        config = _from_speculators(b, config, where)
    values, origin = _resolve(config, where, prefer, overrides, known)
    _require_overrides(config, where, overrides, known, values)
    layer_types, lt_reason = _layer_types(config, where, overrides)

    if not isinstance(b.config.get("dflash_config"), dict):
        new_dc = {k: values[k] for k in NESTED_KEYS}
        b.put(("dflash_config",), new_dc, "the canonical place of the DFlash keys (" + "; ".join(
            f"{k}: {origin[k]}" for k in NESTED_KEYS) + ")")
    for key in NESTED_KEYS:
        b.put(("dflash_config", key), values[key], origin[key])
    for key in DFLASH_KEYS:
        if not mirrors:
            b.remove((key,), f"--no-mirrors: dflash_config.{key} holds it")
        elif key in MIRRORED:
            b.put((key,), values[key], _mirror_reason(key, prefer, config))
        elif key in b.config:
            why = overrides.replacing(key) if overrides.get(key) is not None else None
            b.put((key,), values[key], f"{why}: the top-level copy now equals dflash_config.{key}" if why
                  else f"--prefer {prefer}: the top-level copy now equals dflash_config.{key}")
    for key, value in _scaling(config, prefer).items():
        nested = b.config["dflash_config"]
        if key not in nested:
            b.put(("dflash_config", key), value, "copied from the top level: SGLang reads it only from dflash_config")
        else:
            b.put(("dflash_config", key), value, f"--prefer {prefer}")
            if key in b.config:
                b.put((key,), value, f"--prefer {prefer}: the top-level copy now equals dflash_config.{key}")
    if layer_types is not None:
        b.put(("layer_types",), layer_types, lt_reason)
    for path, value, why in overrides.extra:
        b.put(path, value, why)
    params = config.get("rope_parameters")
    if mirrors and "rope_theta" not in config and isinstance(params, dict) and "rope_theta" in params:
        b.put(("rope_theta",), params["rope_theta"], "mirrors rope_parameters.rope_theta: the MLX loaders read cfg['rope_theta']")
    return Plan(before=before, after=b.config, edits=b.edits, changes=b.changes)


def _from_speculators(b: _Builder, config: dict[str, Any], where: str) -> dict[str, Any]:
    """Rewrite a speculators-native config into the z-lab form (``draftspec.speculators_format``)
    through ``b``, and return that form for the rest of the plan. The block layout goes into
    ``dflash_config.sample_from_anchor`` when anchor-first; declarations that contradict each
    other (DF161) are refused rather than one picked."""
    layout = resolve_layout(config)
    if layout.conflict or layout.invalid:
        raise CheckFailed(
            f"the block layout is unclear ({layout.conflict or layout.invalid}); nothing written: measure it "
            "with `dflash-ckpt probe-taps DRAFT --target T` and fix the declaration", code="DF161", path=where)
    for step in zlab_steps(config, anchor_first=layout.anchor_first):
        if step.op == "set":
            b.put(step.path, step.value, step.reason)
        else:
            b.remove(step.path, step.reason)
    return copy.deepcopy(b.config)


def _mirror_reason(key: str, prefer: str | None, config: dict[str, Any]) -> str:
    if key in config and prefer is not None:
        return f"--prefer {prefer}: the top-level mirror now equals dflash_config.{key}"
    readers = "the older z-lab reference and speculators" if key == "block_size" else "the older z-lab reference and lmdeploy"
    return f"top-level mirror of dflash_config.{key}, for {readers}"


def _resolve(
    config: dict[str, Any], where: str, prefer: str | None, overrides: Overrides, known: Known
) -> tuple[dict[str, Any], dict[str, str]]:
    """The value of every DFlash key and where it came from; refuse conflicts and gaps."""
    values: dict[str, Any] = {}
    origin: dict[str, str] = {}
    conflicts: list[str] = []
    contradicted: list[str] = []
    missing: list[str] = []
    for key in DFLASH_KEYS:
        rk = resolve_key(config, key)
        given = overrides.get(key)
        why = overrides.replacing(key) if given is not None else None
        if why is not None and (rk.present or rk.conflict):
            old = f"{_show(rk.nested)} / {_show(rk.top)}" if rk.conflict else _show(rk.value)
            values[key], origin[key] = given, f"{why}, replacing {old}"
            continue
        if rk.conflict:
            if prefer is None:
                conflicts.append(f"'{key}' is {_show(rk.nested)} in dflash_config but {_show(rk.top)} at the top level")
                continue
            values[key] = rk.nested if prefer == PREFER_NESTED else rk.top
            loser = rk.top if prefer == PREFER_NESTED else rk.nested
            origin[key] = f"--prefer {prefer}: chosen over {_show(loser)}"
        elif rk.present:
            values[key] = rk.value
            origin[key] = (
                "already in dflash_config" if rk.source == "dflash_config"
                else "copied from the top level into dflash_config, which engines read first"
            )
        if given is not None and key in values and not same_json(given, values[key]):
            place = "dflash_config." + key if rk.source == "dflash_config" else key
            contradicted.append(
                f"{FLAG[key]} {_show(given)} contradicts {place} {_show(values[key])} in {where}; "
                "overrides only supply missing keys (edit the file to change a trained value)"
            )
        elif given is not None and key not in values and not rk.conflict:
            values[key], origin[key] = given, f"supplied by {FLAG[key]}"
        elif key not in values and not rk.conflict:
            if key == "num_target_layers" and known.target_depth is not None:
                values[key] = known.target_depth
                origin[key] = f"num_hidden_layers of the target {known.target_label}"
            else:
                missing.append(key)
    for key in SCALING_KEYS:
        rk = resolve_key(config, key)
        if rk.conflict and prefer is None:
            conflicts.append(f"'{key}' is {_show(rk.nested)} in dflash_config but {_show(rk.top)} at the top level")
    if contradicted:
        raise UsageError("; ".join(contradicted))
    if conflicts:
        raise CheckFailed(
            "; ".join(conflicts) + "; engines disagree on which wins, so choose with "
            "--prefer nested or --prefer top-level",
            code="DF103", path=where,
        )
    if missing:
        raise CheckFailed(_missing_message(missing, known), code="DF101" if missing != ["num_target_layers"] else "DF102",
                          path=where)
    return values, origin


def _missing_message(missing: list[str], known: Known) -> str:
    hints = []
    for key in missing:
        if key == "target_layer_ids":
            k = f" ({known.fc_taps} of them, as fc.weight implies)" if known.fc_taps else ""
            hints.append(f"{FLAG[key]} with the trained tap layers{k}")
        elif key == "num_target_layers":
            hints.append(f"{FLAG[key]} N (the target's num_hidden_layers) or --target TARGET")
        else:
            hints.append(f"{FLAG[key]} N")
    names = ", ".join(missing)
    return (
        f"{names} {'is' if len(missing) == 1 else 'are'} in neither dflash_config nor the "
        f"top level and never guessed; take {'it' if len(missing) == 1 else 'them'} from the model "
        f"card and pass {', '.join(hints)}"
    )


def _require_overrides(config: dict[str, Any], where: str, o: Overrides, known: Known, values: dict[str, Any]) -> None:
    """Each supplied value must agree with what the weights, the config and the target say."""
    problems: list[str] = []
    depth = as_int(values.get("num_target_layers"))
    ids = as_int_list(values.get("target_layer_ids"))
    if o.target_layer_ids is not None:
        given = o.target_layer_ids
        if not given:
            problems.append(f"{FLAG['target_layer_ids']} is empty; give the trained tap layers")
        elif any(i < 0 for i in given):
            problems.append(f"{FLAG['target_layer_ids']} {given} has negative layers; ids are 0-based layer indices")
        elif any(b <= a for a, b in zip(given, given[1:])):
            problems.append(f"{FLAG['target_layer_ids']} {given} is not strictly increasing (features are concatenated in that order)")
        if known.fc_taps is not None and given and len(given) != known.fc_taps:
            problems.append(f"{FLAG['target_layer_ids']} has {len(given)} layers but fc.weight implies {known.fc_taps}")
        if depth is not None and given and max(given) >= depth:
            problems.append(
                f"{FLAG['target_layer_ids']} {given} reaches layer {max(given)}, beyond the target's "
                f"{depth} layers (0..{depth - 1}); ids are 0-based outputs of target layers"
            )
    if o.block_size is not None and o.block_size < 2:
        problems.append(f"{FLAG['block_size']} {o.block_size} must be at least 2 (the anchor plus one draft)")
    if o.mask_token_id is not None:
        vocab = known.target_vocab if known.target_vocab is not None else as_int(config.get("vocab_size"))
        if o.mask_token_id < 0:
            problems.append(f"{FLAG['mask_token_id']} {o.mask_token_id} must be a non-negative token id")
        elif vocab is not None and o.mask_token_id >= vocab:
            whose = "the target's" if known.target_vocab is not None else "the draft's"
            problems.append(f"{FLAG['mask_token_id']} {o.mask_token_id} is not below {whose} vocab_size {vocab}")
        elif known.target_pad is not None and o.mask_token_id == known.target_pad:
            problems.append(f"{FLAG['mask_token_id']} {o.mask_token_id} is the target's pad_token_id; use the family's mask token")
    if o.num_target_layers is not None:
        n = o.num_target_layers
        if n < 1:
            problems.append(f"{FLAG['num_target_layers']} {n} must be positive")
        elif known.target_depth is not None and n != known.target_depth:
            problems.append(f"{FLAG['num_target_layers']} {n} differs from the depth of the target {known.target_label} ({known.target_depth})")
        elif ids and max(ids) >= n:
            problems.append(f"{FLAG['num_target_layers']} {n} is not above the deepest tap layer {max(ids)} in target_layer_ids")
    if problems:
        raise UsageError("; ".join(problems))


def _scaling(config: dict[str, Any], prefer: str | None) -> dict[str, Any]:
    """The scaling keys that ``dflash_config`` must hold, with their values (conflicts resolved)."""
    out: dict[str, Any] = {}
    for key in SCALING_KEYS:
        rk = resolve_key(config, key)
        if rk.conflict:
            out[key] = rk.nested if prefer == PREFER_NESTED else rk.top
        elif rk.nested is ABSENT and rk.top is not ABSENT and rk.top is not None:
            out[key] = rk.top
    return out


def parse_layer_ids(text: str) -> list[int]:
    """``1,9,17`` (or ``[1, 9, 17]`` or ``1 9 17``) as a list of ints."""
    parts = [p for p in re.split(r"[,\s]+", text.strip().strip("[]")) if p]
    ids: list[int] = []
    for p in parts:
        try:
            ids.append(int(p))
        except ValueError:
            raise UsageError(f"--target-layer-ids: {p!r} is not an integer; write e.g. 1,9,17,25,33") from None
    if not ids:
        raise UsageError("--target-layer-ids is empty; write e.g. 1,9,17,25,33")
    return ids


def parse_layer_types(text: str) -> list[str]:
    """``full,sliding*4`` style: comma-separated kinds, short names allowed, ``KIND*N`` repeats."""
    out: list[str] = []
    for part in (p.strip() for p in text.strip().strip("[]").split(",")):
        if not part:
            continue
        name, _, count = part.partition("*")
        name = name.strip().strip("'\"")
        kind = SHORT_NAMES.get(name, name)
        if kind not in LAYER_KINDS:
            raise UsageError(f"--layer-types: {name!r} is not full_attention or sliding_attention (or full / sliding)")
        try:
            n = int(count) if count else 1
        except ValueError:
            raise UsageError(f"--layer-types: {part!r}: the repeat count after '*' must be an integer") from None
        if n < 1:
            raise UsageError(f"--layer-types: {part!r}: the repeat count must be positive")
        if len(out) + n > MAX_LAYERS:
            raise UsageError(f"--layer-types: more than {MAX_LAYERS} layers; give one kind per draft layer")
        out += [kind] * n
    if not out:
        raise UsageError("--layer-types is empty; give one kind per draft layer, e.g. sliding*4,full")
    return out


def _layer_types(config: dict[str, Any], where: str, o: Overrides) -> tuple[list[str] | None, str]:
    """The list to write (``None``: keep what is there) and the reason."""
    present = explicit_layer_kinds(config)
    n = as_int(config.get("num_hidden_layers"))
    if o.layer_types is not None:
        if present is not ABSENT:
            if same_json(present, o.layer_types):
                return None, ""
            raise UsageError(
                f"--layer-types contradicts layer_types {_show(present)} in {where}; it only "
                "supplies a missing list (edit the file to change it)"
            )
        if n is not None and len(o.layer_types) != n:
            raise UsageError(f"--layer-types has {len(o.layer_types)} entries but num_hidden_layers is {n}; give one per draft layer")
        window = as_int(config.get("sliding_window"))
        if "sliding_attention" in o.layer_types and (window is None or window <= 0):
            raise UsageError(
                f"--layer-types has sliding_attention layers but sliding_window in {where} is "
                f"{_show(config.get('sliding_window')) if 'sliding_window' in config else 'absent'}; "
                "set the trained window first"
            )
        return list(o.layer_types), "supplied by --layer-types"
    if present is not ABSENT:
        return None, ""
    derived, why = derive_layer_kinds(*layer_kind_keys(config))
    if derived is None:
        raise CheckFailed(
            f"layer_types is missing and cannot be derived ({why}); pass --layer-types "
            f"with one kind per draft layer, e.g. --layer-types sliding*{max((n or 2) - 1, 1)},full",
            code="DF133", path=where,
        )
    return derived, why
