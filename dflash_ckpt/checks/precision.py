"""DF318: a run in float16, or on a GPU without bfloat16 (compute capability below 8.0), named.

DFlash drafts are trained in bfloat16; fp16 activations give ~0% acceptance (dflash-mlx#60,
lmdeploy #4991, fp16 DFlash2 on vLLM: vllm#55250), and a GPU before Ampere (SM < 80, e.g. V100)
has no bf16, so engines there run fp16 (1Cat-vLLM#478). Pure: the device, its capability and the
dtypes come from the run's plan (shared/DESIGN.md section 12).
"""

from __future__ import annotations

from dflash_ckpt.rules import Finding, finding


def precision_findings(where: str, device: str, capability: tuple[int, int] | None, draft_dtype: str,
                       target_dtype: str) -> list[Finding]:
    """DF318 for an fp16 draft, and for a CUDA device of capability below 8.0. A target in its own
    fp16 is not named: the draft casts the features it receives to its dtype."""
    out: list[Finding] = []
    if draft_dtype == "float16":
        fp16_target = " (and so is the target)" if target_dtype == "float16" else ""
        out.append(finding("DF318", f"the draft runs in float16{fp16_target}; DFlash drafts are trained in "
                                    "bfloat16 and fp16 activations overflow in fc (acceptance ~0, dflash-mlx#60, "
                                    "vllm#55250): run --draft-dtype bfloat16", path=where))
    if device.startswith("cuda") and capability is not None and capability < (8, 0):
        out.append(finding("DF318", f"GPU compute capability {capability[0]}.{capability[1]} (below 8.0) has no "
                                    "native bfloat16; engines there serve DFlash in fp16 and accept ~0 (1Cat-vLLM#478): "
                                    "this run's figures are not what such a GPU serves", path=where))
    return out
