"""The runtime's protocols, written down: what a target, a draft, a cache and a decoding loop
must offer. The decoding loops (``generate``, ``dflash_loop``'s executors) use nothing else.

Targets: the native ``target.TargetModel`` (dense Qwen3, Llama 3.x) and the transformers
wrapper ``hf_target.HFTarget`` (every other family) implement ``Target``; only the native one
also has ``forward_static``, which is what the static path needs (``static.supports_static``).
Drafts: the DFlash v1 ``draft.DFlashDraft`` and the ``draft2.DFlash2Draft`` (conv layers and a
candidate selector) implement ``Draft``; DFlash2 differs in ``forward_fused`` and
``pick_tokens`` only. Loops: ``loops.EagerLoop`` (any pair) and ``loops.StaticLoop`` (native
pairs, CUDA graphs on GPU) implement ``Loop``; ``loops.make_loop`` picks one per pair, once.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol, Sequence

import torch

from dflash_ckpt.runtime.generate import Generation


class Cache(Protocol):
    """A batch-1 KV (or recurrent) cache: emptied by ``reset``, cut back to ``length`` positions by ``crop``."""

    def reset(self) -> None: ...

    def crop(self, length: int) -> None: ...


class TargetOutput(Protocol):
    #: ``[1, n, V]`` (``logits="all"``) or ``[1, 1, V]`` (``"last"``).
    logits: torch.Tensor
    #: The tapped layers' outputs concatenated in the order asked, ``[1, n, len(taps) * H]``; None without taps.
    features: torch.Tensor | None


class Target(Protocol):
    """A target model behind one interface, whichever backend runs it."""

    embed_tokens: Any  # ``.weight [V, H]``: the draft embeds its block with it
    lm_head: Any  # ``.weight [V, H]``: the draft's logits go through it

    @property
    def device(self) -> torch.device: ...

    @property
    def dtype(self) -> torch.dtype: ...

    def new_cache(self, capacity: int) -> Any: ...

    def __call__(self, ids: torch.Tensor, *, cache: Any, taps: Sequence[int] = (), logits: str = "all") -> TargetOutput: ...


class Draft(Protocol):
    """A DFlash draft (v1 or DFlash2) on its decoding path."""

    #: ``DraftSettings``: block_size, mask_token_id, target_layer_ids, dims, ...
    args: Any

    @property
    def device(self) -> torch.device: ...

    @property
    def dtype(self) -> torch.dtype: ...

    def new_cache(self, capacity: int) -> Any: ...

    def fuse(self, features: torch.Tensor) -> torch.Tensor:
        """The fused context ``[1, c, H]`` from tapped target features ``[1, c, k*H]``."""
        ...

    def embed(self, ids: torch.Tensor, embed_weight: torch.Tensor) -> torch.Tensor: ...

    def forward_fused(self, context: torch.Tensor, block: torch.Tensor, **kwargs: Any) -> torch.Tensor: ...

    def pick_tokens(self, hidden: torch.Tensor, head_w: torch.Tensor, anchor: torch.Tensor) -> torch.Tensor: ...


class Loop(Protocol):
    """Greedy decoding of one pair with caches sized once: target-only, DFlash, and the
    teacher-forced logits of the lossless judge, on one path (eager or static)."""

    def decode(self, prompt_ids: Sequence[int], *, max_new_tokens: int, stop_ids: Sequence[int] = (),
               on_tokens: Callable[[int], None] | None = None) -> Generation: ...

    def dflash(self, prompt_ids: Sequence[int], *, max_new_tokens: int, stop_ids: Sequence[int] = (),
               on_tokens: Callable[[int], None] | None = None) -> Generation: ...

    def teacher_forced_logits(self, prompt_ids: Sequence[int], tokens: Sequence[int]) -> Any: ...
