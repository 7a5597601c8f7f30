"""The weight inventory of a checkpoint: which files, which tensors, with which dtypes and shapes.

Built from safetensors headers alone. Reading problems (a corrupt header, a truncated shard, an
index naming a missing file) become findings here, because they are discovered while reading;
what the tensors *mean* is judged later in ``checks.weights``.
"""

from __future__ import annotations

from collections import Counter

from dflash_ckpt.errors import InputError
from dflash_ckpt.limits import MAX_TENSORS
from dflash_ckpt.sources.jsonfile import decode_json_bytes
from dflash_ckpt.rules import Finding, finding
from dflash_ckpt.sources.safetensors_header import HeaderError, SafetensorsHeader, TensorInfo, read_header
from dflash_ckpt.sources.base import Source

#: Problems after which absent tensors may just be unread ones.
UNREADABLE = frozenset({"DF203", "DF204", "DF205", "DF207", "DF230", "DF231"})
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
INDEX_SUFFIX = ".safetensors.index.json"


class WeightInventory:
    """What the safetensors headers say, and what went wrong reading them."""

    def __init__(self) -> None:
        self.safetensors_files: list[str] = []
        self.pickle_files: list[str] = []
        self.index_file: str | None = None
        self.headers: dict[str, SafetensorsHeader] = {}
        self.tensors: dict[str, TensorInfo] = {}
        self.problems: list[Finding] = []
        #: file name -> how to name it in a message (its path, or ``repo:file``)
        self.where: dict[str, str] = {}

    def where_of(self, tensor: str) -> str | None:
        """The file holding ``tensor``, as messages name it."""
        info = self.tensors.get(tensor)
        return self.where.get(info.file) if info else None

    @property
    def readable(self) -> bool:
        """Whether every header was read, so that absent tensors are really absent."""
        return not any(p.code in UNREADABLE for p in self.problems)


def load_inventory(source: Source) -> WeightInventory:
    """Read the index (if any) and every safetensors header of ``source``."""
    inv = WeightInventory()
    files = source.list_files()
    inv.safetensors_files = [f for f in files if f.endswith(".safetensors")]
    inv.pickle_files = [f for f in files if f.endswith(PICKLE_SUFFIXES)]
    inv.where = {f: source.where(f) for f in inv.safetensors_files}
    indexes = [f for f in files if f.endswith(INDEX_SUFFIX)]
    weight_map: dict[str, str] | None = None
    if indexes:
        inv.index_file = "model.safetensors.index.json" if "model.safetensors.index.json" in indexes else indexes[0]
        weight_map = _read_weight_map(source, inv.index_file, inv.problems)

    if weight_map is not None:
        per_shard = Counter(weight_map.values())
        shard_names = list(per_shard)
        present = set(inv.safetensors_files)
        missing = [s for s in shard_names if s not in present]
        if not weight_map:
            inv.problems.append(finding(
                "DF223",
                "'weight_map' is empty, so no tensor is loaded; "
                "re-download the index", path=str(source.where(inv.index_file)),
            ))
        for shard in missing:
            count = per_shard[shard]
            inv.problems.append(finding(
                "DF205",
                f"names shard {shard} ({count} tensors), which is "
                "not in the checkpoint; download it", path=str(source.where(inv.index_file)),
            ))
        to_read = [s for s in shard_names if s in present]
    else:
        to_read = inv.safetensors_files

    budget = MAX_TENSORS
    for name in to_read:
        if budget <= 0:
            inv.problems.append(finding(
                "DF203",
                f"not read; the shards before it already hold {MAX_TENSORS:,} "
                "tensors, more than any DFlash draft", path=str(source.where(name)),
            ))
            continue
        try:
            header = read_header(source, name, max_tensors=budget)
        except HeaderError as err:
            inv.problems.append(finding(err.code, err.text, path=err.path))
            continue
        except InputError as err:
            inv.problems.append(finding("DF203", err.text, path=err.path, key=err.key))
            continue
        inv.headers[name] = header
        budget -= len(header.tensors)
        for tname, info in header.tensors.items():
            inv.tensors.setdefault(tname, info)

    if weight_map is not None:
        for tname, shard in weight_map.items():
            header = inv.headers.get(shard)
            if header is not None and tname not in header.tensors:
                inv.problems.append(finding(
                    "DF206",
                    f"maps {tname} to {shard}, whose header has "
                    "no such tensor; re-download index and shards together", path=str(source.where(inv.index_file)),
                ))
    return inv


def _read_weight_map(source: Source, index_file: str, problems: list[Finding]) -> dict[str, str] | None:
    where = source.where(index_file)
    try:
        data = decode_json_bytes(source.read_json_bytes(index_file), where)
    except InputError as err:
        problems.append(finding("DF207", err.text, path=err.path, key=err.key))
        return None
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in weight_map.items()
    ):
        problems.append(finding(
            "DF207", "key 'weight_map' must be an object of tensor name -> shard file", path=where, key="weight_map"
        ))
        return None
    if len(weight_map) > MAX_TENSORS:
        problems.append(finding(
            "DF207", f"'weight_map' maps {len(weight_map):,} tensors, more than the "
            f"{MAX_TENSORS:,} any DFlash draft could hold; not a draft's index", path=where,
        ))
        return None
    return weight_map
