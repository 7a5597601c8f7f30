"""The checks behind the failures users file: drafts that load and then accept almost nothing.

Each rule here catches something an engine accepts silently (shared/DESIGN.md section 10, "pain
points"): a DFlash2 draft labelled as v1 (DF152), a reduced draft vocabulary (DF153, DF225), a
quantized draft (DF154), pickled side files (DF226), a mask id that is a special token of the
target (DF310) or an ordinary token of its tokenizer (DF320), a quantized target ``lm_head`` under a DFlash2 draft (DF312) and a target family
no engine serves (DF313). Nothing here opens a file: the inventory lists names, the configs (and
the target's tokenizer_config.json) are already parsed.
"""

from __future__ import annotations

from typing import Any

from dflash_ckpt.checks.config import show_value
from dflash_ckpt.limits import MAX_VOCAB
from dflash_ckpt.rules import Finding, finding
from dflash_ckpt.draftspec.specs import DFLASH2_KEYS, DraftSpec, TargetSpec, as_int, bounded_int

#: Pickled side files engines load next to the safetensors, and who loads them.
SIDE_FILES = {"mask_embedding.pt": "vLLM (models/qwen3_dflash.py) loads it with torch.load"}
PICKLE_SIDE_SUFFIXES = (".pt", ".pth", ".pkl", ".pickle")

#: Target decoder ``model_type``s some engine's DFlash path serves (the published drafts' targets,
#: shared/DESIGN.md sections 8-10), on top of the reference runtime's tables (``draftspec/families``).
ENGINE_TARGET_TYPES = frozenset({
    "llama", "qwen2", "qwen3", "qwen3_moe", "qwen3_next", "qwen3_5", "qwen3_5_text", "qwen3_5_moe",
    "qwen3_5_moe_text", "gpt_oss", "deepseek_v3", "kimi_k2", "kimi_k25", "gemma4", "gemma4_text",
    "mimo_v2", "glm4_moe", "minimax_m2",
})

#: The dedicated mask id of each target family's published drafts (fixtures/published: z-lab's
#: Qwen3 drafts, Qwen3.5/3.6 and gpt-oss), by the target decoder's ``model_type``.
FAMILY_MASK_IDS: dict[str, str] = {
    "qwen3": "151669", "qwen3_moe": "151669",
    "qwen3_5": "248070 (Qwen3.6) or 248077 (Qwen3.5)", "qwen3_5_text": "248070 (Qwen3.6) or 248077 (Qwen3.5)",
    "qwen3_5_moe": "248070 (Qwen3.6) or 248077 (Qwen3.5)", "qwen3_5_moe_text": "248070 (Qwen3.6) or 248077 (Qwen3.5)",
    "gpt_oss": "200000",
}


def family_mask_advice(target: TargetSpec) -> str:
    """``use the family's dedicated mask id`` with that id where the family is known."""
    known = FAMILY_MASK_IDS.get(target.model_type or "")
    return (f"use the family's dedicated mask id ({known} for {target.model_type})" if known
            else "use the family's dedicated mask id (the one its published drafts use)")


#: Keys of ``quantization_config`` that list the modules left unquantized, by quantizer.
_EXCLUDE_KEYS = ("modules_to_not_convert", "ignore", "exclude_modules", "ignored_layers", "skip_modules")


def target_lm_head_quantized(target: TargetSpec) -> bool:
    """Whether the target's ``quantization_config`` quantizes ``lm_head``: said outright
    (``lm_head: true``, GPTQ/AWQ style), or an exclusion list exists and does not name it."""
    for q in target.quantization_blocks:
        if q.get("lm_head") is True:
            return True
        lists = [q[k] for k in _EXCLUDE_KEYS if isinstance(q.get(k), list)]
        if lists and not any(isinstance(m, str) and "lm_head" in m for lst in lists for m in lst):
            return True
    return False


def dflash2_content(spec: DraftSpec) -> bool:
    """DFlash2 keys in the config, whatever ``architectures`` says (DFlash2 tensors alone, without
    the keys, are DF222's: the keys are what a rewritten config keeps)."""
    return any(spec.extra_keys[k].present for k in DFLASH2_KEYS)


def runs_as_v1(spec: DraftSpec) -> bool:
    """DFlash2 content under ``architectures: [DFlashDraftModel]`` (as vLLM 0.23's speculators
    update rewrote it): engines build the v1 model and drop the conv and selector."""
    return "DFlashDraftModel" in spec.architectures and "DFlash2DraftModel" not in spec.architectures and dflash2_content(spec)


def check_draft_pitfalls(spec: DraftSpec) -> list[Finding]:
    """DF152, DF153, DF154 (config) and DF225, DF226 (files)."""
    w = spec.where
    out: list[Finding] = []
    if runs_as_v1(spec):
        out.append(finding(
            "DF152",
            f"key 'architectures' is {show_value(spec.architectures)} but the config holds the DFlash2 keys; "
            "every engine builds the DFlash v1 model from it, drops the conv layers and selector and accepts "
            "almost nothing; set architectures to [\"DFlash2DraftModel\"]", path=w, key="architectures",
        ))
    dvs = spec.top("draft_vocab_size")
    if dvs is not None:
        vocab = spec.dims.vocab_size
        n = bounded_int(dvs, MAX_VOCAB)
        if n is None or n < 1:
            out.append(finding("DF153", f"key 'draft_vocab_size' must be a positive integer, found {show_value(dvs)}; "
                                        "restore it from the published config", path=w, key="draft_vocab_size"))
        elif vocab is not None and n != vocab:
            out.append(finding(
                "DF153",
                f"key 'draft_vocab_size' is {n} of vocab_size {vocab}: a reduced draft vocabulary whose "
                "ids map to the target's through the d2t tensor; only vLLM maps them, other engines read draft "
                "ids as target ids, and smoke-run refuses it", path=w, key="draft_vocab_size",
            ))
            out += _check_vocab_maps(spec, n, vocab)
    q = spec.quantization_config
    if q is not None:
        method = show_value(q.get("quant_method", "unknown"))
        out.append(finding(
            "DF154",
            f"key 'quantization_config' (quant_method {method}) quantizes the draft: vLLM and SGLang "
            "load it through the quantizer it names, z-lab, lmdeploy and the MLX ports expect bf16 tensors; "
            "quantized DFlash2 drafts are reported at ~0% acceptance or crashing (sglang#39087), keep the draft in bf16",
            path=w, key="quantization_config",
        ))
    out += _side_files(spec)
    return out


def _check_vocab_maps(spec: DraftSpec, draft_vocab: int, vocab: int) -> list[Finding]:
    """DF225: ``d2t`` is ``[draft_vocab_size]`` (offsets to target ids), ``t2d`` ``[vocab_size]``."""
    if spec.weights is None or not spec.weights.readable:
        return []
    tensors = spec.weights.tensors
    wrong = []
    for name, want in zip(VOCAB_MAPS, ((draft_vocab,), (vocab,))):
        info = tensors.get(name)
        if info is None:
            wrong.append(f"'{name}' is missing (expected {list(want)})")
        elif tuple(info.shape) != want:
            wrong.append(f"'{name}' is {list(info.shape)}, expected {list(want)}")
    if not wrong:
        return []
    return [finding(
        "DF225",
        f"tensor {'; tensor '.join(wrong)}: draft_vocab_size {draft_vocab} needs both maps to "
        "turn draft ids into target ids; re-download the weights with the config they were published with",
        path=spec.label,
    )]


#: The reduced-vocabulary maps (speculators format) a draft with ``draft_vocab_size`` carries.
VOCAB_MAPS = ("d2t", "t2d")


def side_file_owner(name: str) -> str | None:
    """Who loads the pickled side file ``name`` (``None``: a weight file, DF202's business)."""
    base = name.rsplit("/", 1)[-1]
    if base in SIDE_FILES:
        return SIDE_FILES[base]
    if base.endswith(PICKLE_SIDE_SUFFIXES) and not base.startswith(("pytorch_model", "model", "consolidated")):
        return "an engine that loads it unpickles it"
    return None


def _side_files(spec: DraftSpec) -> list[Finding]:
    """DF226: pickled files an engine loads next to the weights; listed, never opened."""
    if spec.weights is None:
        return []
    out = []
    for name in spec.weights.pickle_files:
        who = side_file_owner(name)
        if who is None:
            continue
        out.append(finding(
            "DF226",
            f"{name} is a pickled side file ({who}); unpickling can run code and it was not "
            "opened: read what produced it, or drop it if the engine you use does not need it", path=spec.label,
        ))
    return out


def special_ids(target: TargetSpec) -> dict[str, tuple[int, str]]:
    """Target eos/bos/pad ids from config.json (text_config first) and generation_config.json:
    id -> (name, file) for a message; lists (several eos) give every id."""
    out: dict[str, tuple[int, str]] = {}
    for place in range(3):  # every key of the decoder, then of the wrapper, then of generation_config.json
        for key in ("eos_token_id", "bos_token_id", "pad_token_id"):
            value, file = target.stated(key)[place]
            for i in token_ids(value):
                if str(i) not in out:
                    out[str(i)] = (i, f"{key} in {file}")
    return out


def _ordinary_token(mask: int, target: TargetSpec) -> str | None:
    """Why ``mask`` is an ordinary token of the target's tokenizer: below its first special or
    added token (``tokenizer_config.json``) and not one of them; None when it is not, or the
    target ships no tokenizer config that lists them."""
    added = target.tokenizer_added_ids
    if not added or mask < 0 or mask in added or mask >= added[0]:
        return None
    return f"tokenizer_config.json numbers its first added token {added[0]}"


def token_ids(raw: Any, depth: int = 0) -> list[int]:
    """The token ids a special-id value names, as loaders read it: an integer, an integral float
    (``725.0``: Python and JavaScript readers use it as 725), or lists of them, nested too
    (``[[725]]``), at most a few levels and ``MAX_VOCAB`` in size."""
    if isinstance(raw, list):
        if depth >= 4:
            return []
        return [i for v in raw[:4096] for i in token_ids(v, depth + 1)]
    if isinstance(raw, float) and raw.is_integer() and abs(raw) <= MAX_VOCAB:
        return [int(raw)]
    i = as_int(raw)
    return [i] if i is not None else []


def check_target_pitfalls(spec: DraftSpec, target: TargetSpec) -> list[Finding]:
    """DF310, DF320, DF312, DF313."""
    w = spec.where
    out: list[Finding] = []
    mask = spec.mask_token_id
    pad = bounded_int(target.pad_token_id, MAX_VOCAB)
    if mask is not None:
        hit = special_ids(target).get(str(mask))
        if hit is not None and not (mask == pad and hit[1].startswith("pad_token_id in config.json")):  # DF305's
            out.append(finding(
                "DF310",
                f"mask_token_id {mask} is the target's {hit[1]}; masked positions would be filled "
                f"with that token's embedding, not the mask the draft was trained on: {family_mask_advice(target)}",
                path=w, key="mask_token_id",
            ))
        elif hit is None and (ordinary := _ordinary_token(mask, target)) is not None:
            out.append(finding(
                "DF320",
                f"mask_token_id {mask} is an ordinary token of the target's tokenizer ({ordinary}), not one "
                "of its special or added tokens; masked positions would take that word's embedding, not "
                f"a mask: {family_mask_advice(target)}",
                path=w, key="mask_token_id",
            ))
    if spec.generation == "DFlash2" and target_lm_head_quantized(target):
        out.append(finding(
            "DF312",
            "key 'quantization_config' quantizes the target's lm_head, which a DFlash2 "
            "draft's selector reads: vLLM refuses the pair and SGLang accepts ~0% (sglang#35534); use a target "
            "whose lm_head is left unquantized (list it in the quantizer's ignore list)",
            path=target.where, key="quantization_config",
        ))
    out += _unknown_family(target)
    return out


def _unknown_family(target: TargetSpec) -> list[Finding]:
    """DF313: a target ``model_type`` neither any engine's DFlash path nor our runtime knows."""
    from dflash_ckpt.draftspec.families import FAMILIES, HF_FAMILIES  # no torch: plain tables

    mt = target.model_type
    known = ENGINE_TARGET_TYPES | set(FAMILIES) | set(HF_FAMILIES) | {w for f in HF_FAMILIES.values() for w in f.wrappers}
    if mt is None or mt in known:
        return []
    return [finding(
        "DF313",
        f"key 'model_type' is {show_value(mt)}, a target family no engine modelled here serves DFlash "
        "drafts for and the reference runtime does not run; check that --target names the target model, "
        "then check the engine's supported models before planning on it", path=target.where, key="model_type",
    )]
