"""What every reader verdict must agree with beyond where it reads the keys: weights that no
engine loads, and the DSpark path of the engines that serve DSpark drafts.

A verdict of "loads as is" beside a DF211 error (an fc width that contradicts target_layer_ids)
told the user the opposite of the findings (issue 31): every engine loads the draft's tensors into
modules sized by the config, strictly, so the header findings that say a tensor is missing or
mis-shaped stop each of them, and each verdict says so.
"""

from __future__ import annotations

from dflash_ckpt.checks.layout import DSPARK_PATHS
from dflash_ckpt.checks.reading import TOP_THEN_NESTED, Reading, Verdict
from dflash_ckpt.draftspec.siblings import dspark_value
from dflash_ckpt.draftspec.specs import DraftSpec

#: Header findings that stop every engine's weight load (shape or presence of a tensor the model
#: is built with, or a file that cannot be read).
LOAD_STOPPERS = ("DF203", "DF204", "DF205", "DF206", "DF210", "DF211", "DF212", "DF213", "DF223", "DF224")


def weight_load_problems(spec: DraftSpec) -> list[str]:
    """One clause per finding in ``LOAD_STOPPERS``, for every reader's verdict."""
    if spec.weights is None:
        return []
    from dflash_ckpt.checks.weights import check_weights  # noqa: PLC0415 - header checks, only with weights

    return [f"its weights do not load ({f.code}: {f.message})" for f in check_weights(spec) if f.code in LOAD_STOPPERS]


#: DSpark's spelling of a DFlash key where DeepSpec or speculators use their own.
DSPARK_ALIASES = {"block_size": "dspark_block_size", "target_layer_ids": "dspark_target_layer_ids",
                  "mask_token_id": "dspark_noise_token_id"}


def dspark_verdict(reader: str, spec: DraftSpec) -> Verdict:
    """The verdict of an engine's DSpark path: the keys at the top level (DeepSpec) or nested, or
    under their ``dspark_`` names."""
    r = Reading(spec)
    for key, alias in DSPARK_ALIASES.items():
        if spec.keys[key].present or dspark_value(spec.config, alias) is None:
            r.read(key, TOP_THEN_NESTED, kind="list" if key == "target_layer_ids" else "int")
    note = "; the V1 runner (the CPU build) refuses dspark: V2 runner with Triton" if reader == "vllm" else ""
    return r.verdict(f"loads as DSpark through {DSPARK_PATHS[reader]}{note}")
