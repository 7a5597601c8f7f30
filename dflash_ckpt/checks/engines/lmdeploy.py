"""lmdeploy 0.18.0 (its wheel), PyTorch engine (TurboMind has no speculative decoding): ``block_size``
and the mask id nested, ``num_target_layers`` at the top level; no ``dflash2`` algorithm; 1+N
only. Launch (section 10, corrected from the wheel): ``lmdeploy serve api_server T --backend
pytorch --speculative-algorithm dflash``, the block as ``--speculative-dflash-block-size``."""

from __future__ import annotations

from dflash_ckpt.checks.engines.launch import ServeFacts
from dflash_ckpt.checks.engines.reading import NESTED_ONLY, TOP_ONLY, Reading, Verdict, one_plus_n_path
from dflash_ckpt.checks.engines.record import Engine
from dflash_ckpt.checks.engines.versions import Versions
from dflash_ckpt.draftspec.specs import DraftSpec, TargetSpec, as_int


def judge(spec: DraftSpec, target: TargetSpec | None) -> Verdict:
    """Nested block and mask, strictly increasing taps, ``num_target_layers`` equal to the target's
    depth, and an explicit ``layer_types`` list of one entry per layer."""
    r = Reading(spec)
    if spec.generation == "DFlash2":
        r.problems.append("0.18 has no dflash2 algorithm (only dflash)")
    r.read("block_size", NESTED_ONLY)
    r.read("mask_token_id", NESTED_ONLY)
    ids = r.read("target_layer_ids", NESTED_ONLY, kind="list")
    if ids is not None and any(b <= a for a, b in zip(ids, ids[1:])):
        r.problems.append("target_layer_ids must be strictly increasing")
    ntl = r.read("num_target_layers", TOP_ONLY)
    depth = as_int(target.num_hidden_layers) if target else None
    if ntl is not None and depth is not None and ntl != depth:
        r.problems.append(f"num_target_layers {ntl} differs from the target's depth {depth}")
    lt = spec.layer_type_list
    if not isinstance(lt, list):
        r.problems.append("needs an explicit layer_types list")
    elif spec.dims.num_hidden_layers is not None and len(lt) != spec.dims.num_hidden_layers:
        r.problems.append(f"layer_types has {len(lt)} entries for {spec.dims.num_hidden_layers} layers")
    return r.verdict()


def serve(f: ServeFacts) -> list[str]:
    """Its PyTorch engine's API server with the trained block."""
    return ["lmdeploy", "serve", "api_server", f.target, "--backend", "pytorch",
            "--speculative-algorithm", "dflash", "--speculative-draft-model", f.draft,
            "--speculative-dflash-block-size", str(f.block)]


ENGINE = Engine("lmdeploy", "lmdeploy 0.18", judge, one_plus_n_path("--speculative-algorithm dflash"),
                serve=serve, serve_rank=3,
    versions=Versions("0.18.0", "0.18.0", "read in its wheel"),
)
