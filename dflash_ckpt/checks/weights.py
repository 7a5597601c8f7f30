"""Weight checks (DF2xx), from safetensors headers only: presence, shapes, names, dtypes."""

from __future__ import annotations

import re
import shlex
from collections import Counter

from dflash_ckpt.draftspec.architectures import XPRESS_ARCHITECTURES, XPRESS_PREFIX
from dflash_ckpt.checks.pitfalls import VOCAB_MAPS, side_file_owner
from dflash_ckpt.checks.pairing import short_list
from dflash_ckpt.rules import Finding, finding
from dflash_ckpt.draftspec.specs import DraftSpec
from dflash_ckpt.draftspec.siblings import DSPARK, LAGUNA, LILICORR, MUSE_GLIMMER_NAMES
from dflash_ckpt.draftspec.tensor_layout import DFLASH2_MARKERS, expected_tensors, own_embeddings
from dflash_ckpt.sources.weights import UNREADABLE, WeightInventory

#: How many names a grouped finding spells out before it says "and N more".
SHOW = 4
PREFIXES = ("model.", "draft_model.", "module.", "dflash.")
LAYER_RE = re.compile(r"^layers\.(\d+)\.")


def check_weights(spec: DraftSpec) -> list[Finding]:
    inv = spec.weights
    assert inv is not None
    label = spec.label
    out: list[Finding] = list(inv.problems)
    weight_pickles = [f for f in inv.pickle_files if side_file_owner(f) is None]  # side files: DF226
    if weight_pickles:
        out.append(finding(
            "DF202",
            f"{', '.join(weight_pickles)} not opened (pickle can run code); only "
            "safetensors are read", path=label,
        ))
    if not inv.safetensors_files and not inv.index_file:
        out.append(finding(
            "DF201",
            "no *.safetensors file; download the safetensors weights (pickle files are never loaded)", path=label,
        ))
        return out
    if not inv.tensors:
        if not any(p.code in UNREADABLE or p.code == "DF223" for p in inv.problems):
            files = ", ".join(inv.where.get(f, f) for f in inv.headers) or label
            out.append(finding(
                "DF223", "the safetensors header lists no tensors; there is no draft in it, re-download the weights",
                path=str(files),
            ))
        return out

    names, prefix = _strip_prefix(list(inv.tensors))
    if spec.muse_glimmer:  # vLLM renames them (qwen3_dflash.py hf_to_vllm_mapper)
        names = {MUSE_GLIMMER_NAMES.get(n, n): orig for n, orig in names.items()}
    fc_file = inv.where_of(names.get("fc.weight", "fc.weight"))
    if prefix:
        out.append(finding(
            "DF216",
            f"tensor names carry the prefix '{prefix}' (e.g. {names.get('fc.weight') or min(names.values())}); "
            "vLLM and lmdeploy expect unprefixed names, re-save without it", path=label,
        ))
    shapes = {name: inv.tensors[orig].shape for name, orig in names.items()}

    borrowed = sorted(n for n in shapes if "embed_tokens" in n or "lm_head" in n)
    # DSpark and speculators drafts may ship their own (a reduced vocabulary's lm_head with d2t/t2d)
    own = own_embeddings(spec, shapes) if spec.family == DSPARK or spec.native is not None or borrowed == ["embed_tokens.weight"] else {}
    if own and spec.family != DSPARK and spec.native is None:
        out.append(finding(
            "DF164",
            f"ships its own embed_tokens.weight {list(shapes['embed_tokens.weight'])} (as Nemotron's "
            "NVFP4-DFlash drafts do): vLLM uses it, the MLX ports stop on it, the other engines take the target's",
            path=label,
        ))
    if borrowed and not own:
        out.append(finding(
            "DF215",
            f"holds {_list(borrowed)}; a DFlash draft borrows embeddings and lm_head "
            "from the target, drop them", path=label,
        ))

    has_v2 = any(n.startswith(DFLASH2_MARKERS) or ".attention_conv." in n or ".mlp_conv." in n for n in shapes)
    v2_config = spec.generation == "DFlash2"
    if has_v2 and not v2_config:
        out.append(finding(
            "DF222",
            "weights hold DFlash2 tensors (conv kernels / candidate selector) but "
            f"architectures is {spec.architectures}; set it to [\"DFlash2DraftModel\"]", path=label,
        ))
    elif v2_config and not has_v2:
        out.append(finding(
            "DF222",
            "config declares DFlash2 but the weights have no DFlash2 tensors; they look "
            "like DFlash v1, set architectures to [\"DFlashDraftModel\"]", path=label,
        ))
    expected = expected_tensors(spec, dflash2=v2_config and has_v2, names=shapes)
    if spec.native is not None:  # a speculators draft's own lm_head [draft_vocab_size, H] (and embed_tokens)
        expected.update(own)

    out += _check_fc(spec, shapes, fc_file or label)
    missing = [n for n in expected if n not in shapes and n != "fc.weight"]
    if missing and inv.readable:
        out.append(finding("DF212", f"missing {len(missing)} tensor(s): {_list(missing)}", path=label))
    wrong = [
        f"{n} is {list(shapes[n])}, expected {list(s)}"
        for n, s in expected.items()
        if n != "fc.weight" and s is not None and n in shapes and tuple(shapes[n]) != s
    ]
    if wrong:
        out.append(finding("DF213", f"{len(wrong)} tensor(s) do not match the config: {_list(wrong, sep='; ')}",
                           path=label))
    # DFlash2 tensors in a v1 config are DF222's finding; in a DFlash2 config they are expected by name.
    v2_extra = has_v2 and not v2_config
    tolerated = set(borrowed) | (set(VOCAB_MAPS) if spec.states("draft_vocab_size") else set()) | ({n for n in shapes if "_conv." in n or n.startswith("candidate_selector.")} if v2_extra else set())
    out += _check_mask_embedding(spec, shapes, label)
    tolerated.add(MASK_EMBEDDING)
    unexpected = [n for n in shapes if n not in expected and n not in tolerated and not _family_owned(spec, n)]
    if unexpected:
        layers = spec.dims.num_hidden_layers
        beyond = sorted({int(m.group(1)) for n in unexpected if (m := LAYER_RE.match(n))
                         and layers is not None and int(m.group(1)) >= layers})
        hint = f" (layers {short_list(beyond)} are beyond num_hidden_layers {layers})" if beyond else ""
        out.append(finding("DF214", f"{len(unexpected)} unexpected tensor(s){hint}: {_list(unexpected)}", path=label))
    out += _check_dtypes(label, inv)
    return out


#: exllamav3's learned mask embedding (a tensor in the draft's safetensors).
MASK_EMBEDDING = "mask_embedding"


def _family_owned(spec: DraftSpec, name: str) -> bool:
    """Tensors of a sibling family's parts that are not modelled name by name: a Laguna draft's
    layers (the target's own layer kind), LiLiCorr's candidate-lattice head."""
    if name.startswith(XPRESS_PREFIX) and set(spec.architectures) & XPRESS_ARCHITECTURES:
        return True  # XPress's refiner head (vLLM qwen3_xpress.py)
    if spec.family == LAGUNA:
        return name.startswith("layers.")
    if spec.family == LILICORR:
        return name.startswith("lilicorr.") or "_conv." in name
    return False


def _check_mask_embedding(spec: DraftSpec, shapes: dict[str, tuple[int, ...]], label: str) -> list[Finding]:
    """A learned ``mask_embedding`` tensor (exllamav3 1.6.5 ``architecture/dflash.py:97-99`` uses it
    in place of the target's embedding row for ``mask_token_id``) is expected, one row of
    ``hidden_size``; any other shape is DF213."""
    shape = shapes.get(MASK_EMBEDDING)
    h = spec.dims.hidden_size
    if shape is None or h is None or tuple(shape) in ((h,), (1, h)):
        return []
    return [finding("DF213", f"1 tensor(s) do not match the config: {MASK_EMBEDDING} is {list(shape)}, expected "
                             f"[{h}] (one embedding row of hidden_size)", path=label)]


def _strip_prefix(names: list[str]) -> tuple[dict[str, str], str]:
    """Map unprefixed name -> stored name; the prefix shared by every tensor, if any."""
    for prefix in PREFIXES:
        if names and all(n.startswith(prefix) for n in names):
            return {n[len(prefix):]: n for n in names}, prefix
    return {n: n for n in names}, ""


def _check_fc(spec: DraftSpec, shapes: dict[str, tuple[int, ...]], where: str) -> list[Finding]:
    label = spec.label
    fc = shapes.get("fc.weight")
    if fc is None:
        if spec.weights is not None and spec.weights.readable:
            return [finding("DF210", "no tensor fc.weight; every DFlash draft has one", path=label)]
        return []
    h = spec.dims.hidden_size
    ids = spec.target_layer_ids
    if h is None or not ids:
        return []  # DF101/DF110/DF111 already say what is wrong with target_layer_ids
    implied = fc[1] // h if len(fc) == 2 and fc[0] == h and fc[1] % h == 0 else None
    if tuple(fc) == (h, len(ids) * h):
        return []
    if implied is not None:
        return [finding(
            "DF211",
            f"fc.weight is {list(fc)}, which implies {implied} tap layers, but "
            f"target_layer_ids has {len(ids)}; restore the {implied} trained tap layers (from the model card, "
            f"or measure them: `dflash-ckpt probe-taps {shlex.quote(spec.label)} --target TARGET --write OUT`)",
            path=where,
        )]
    return [finding("DF211", f"fc.weight is {list(fc)}; expected [{h}, k*{h}] (hidden_size {h})", path=where)]


def _check_dtypes(label: str, inv: WeightInventory) -> list[Finding]:
    params: Counter[str] = Counter()
    counts: Counter[str] = Counter()
    for t in inv.tensors.values():
        params[t.dtype] += t.numel
        counts[t.dtype] += 1
    summary = ", ".join(f"{d} {_human(params[d])} params in {counts[d]} tensors" for d in sorted(params))
    out = [finding("DF220", f"{summary}", path=label)]
    floats = {d for d in params if d.startswith(("F", "BF")) and d != "BF16"}
    if "F16" in floats:
        out.append(finding(
            "DF221",
            f"{counts['F16']} tensor(s) stored in float16; Qwen3 hidden-state outliers "
            "overflow fp16 in fc and acceptance collapses, keep the draft in bfloat16", path=label,
        ))
    elif floats:
        out.append(finding(
            "DF221",
            f"tensors stored in {', '.join(sorted(floats))}; published drafts are bfloat16 "
            "(engines cast anyway, at the cost of memory)", path=label,
        ))
    return out


def _human(n: int) -> str:
    for unit, div in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= div:
            return f"{n / div:.2f}{unit}"
    return str(n)


def _list(items: list[str], sep: str = ", ") -> str:
    shown = sep.join(items[:SHOW])
    return shown + (f" and {len(items) - SHOW} more" if len(items) > SHOW else "")
