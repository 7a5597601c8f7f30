"""The DFlash v1 draft, as published (z-lab ``DFlashDraftModel``), written from its semantics.

Per call (docs/DESIGN.md section 6, checked against the z-lab reference):
- context: the target's tapped features of the tokens accepted since the last call, concatenated
  in ``target_layer_ids`` order, go through ``fc`` and then ``hidden_norm``. The same fused context
  enters every layer as extra keys/values; it is not normalised again by ``input_layernorm`` and
  is not updated from layer to layer;
- block: the target's embeddings of ``[anchor, mask, ..., mask]`` (times ``input_embedding_scale``)
  are the draft's hidden states; each layer normalises them (``input_layernorm``) and takes its
  queries from them only;
- keys and values of a layer come from ``[fused context ; normalised block]`` through the same
  ``k_proj``/``v_proj``; ``k_norm`` applies to both parts, ``q_norm`` to the queries; RoPE uses
  absolute positions (context tokens at theirs, the block at ``start..start+B-1``);
- full-attention layers see every key (bidirectional within the block); sliding layers are
  causal with their window; ``is_causal`` in the config overrides both;
- the final ``norm`` output at block position ``i`` predicts the token at position ``i`` itself
  (mask filling), through the target's ``lm_head``, times ``output_multiplier``, soft-capped by
  ``final_logit_softcapping``.

The draft's cache keeps context keys/values only: each call writes the block's too (into the
preallocated buffer) and leaves the cache's length at the end of the context, which is the crop
the reference makes after every call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from dflash_ckpt.draftspec.draft_settings import DraftSettings
from dflash_ckpt.runtime.layers import (Attention, DecoderLayer, DecoderStack, KVCache, RMSNorm, attention, head,
                                        new_kv_cache, use_fused, write_kv)
from dflash_ckpt.runtime.prepack import linear
from dflash_ckpt.runtime.rope import RotaryTable, apply_rope

RopePair = tuple[tuple[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]
"""``(cos, sin)`` for the queries, then for the keys."""


class DraftAttention(Attention):
    FUSED = (("kv", ("k_proj", "v_proj")),)  # one matmul for keys and values (queries read the block only)
    LINEARS = ("q_proj", "o_proj")  # run through ``prepack.linear``

    def __init__(self, args: DraftSettings, index: int) -> None:
        super().__init__(args.dims)
        d = args.dims
        self.q_norm = RMSNorm(d.head_dim, d.rms_norm_eps)
        self.k_norm = RMSNorm(d.head_dim, d.rms_norm_eps)
        self.causal = args.layer_causal(index)
        self.window = args.layer_window(index)
        self.register_buffer("kv", None, persistent=False)
        self.register_buffer("kv_bias", None, persistent=False)

    def forward(
        self,
        x: torch.Tensor,
        context: torch.Tensor,
        rope_q: tuple[torch.Tensor, torch.Tensor],
        rope_k: tuple[torch.Tensor, torch.Tensor],
        kv: tuple[torch.Tensor, torch.Tensor] | None,
        at: int | tuple[torch.Tensor, torch.Tensor],
        mask: torch.Tensor | None,
    ) -> torch.Tensor:
        """``at``: where the cache receives the new keys (``layers.write_kv``), as the first slot
        (context then block appended contiguously, the valid prefix attended) or, on the static
        path, as device slot tensors ``(context slots, block slots)`` written in that order (the
        block overwrites context padding) with the whole cache attended under ``mask``."""
        b, n, _ = x.shape
        both = torch.cat([context, x], dim=1)
        m = both.shape[1]
        q = linear(x, self.q_proj.weight, self.q_proj.bias)
        q = self.q_norm(q.view(b, n, self.heads, self.head_dim)).transpose(1, 2)
        if use_fused(self.kv, self.k_proj.weight):
            k, v = linear(both, self.kv, self.kv_bias).chunk(2, dim=-1)
        else:
            k, v = self.k_proj(both), self.v_proj(both)
        k = self.k_norm(k.reshape(b, m, self.kv_heads, self.head_dim)).transpose(1, 2)
        v = v.reshape(b, m, self.kv_heads, self.head_dim).transpose(1, 2)
        q = apply_rope(q, *rope_q)
        k = apply_rope(k, *rope_k)
        if kv is not None:
            k, v = write_kv(kv, k, v, at, mask)
        return self.output(attention(q, k, v, mask=mask, scale=self.scale))


class DraftLayer(DecoderLayer):
    """A v1 draft layer; its attention takes ``(context, rope_q, rope_k, kv, at, mask)``."""

    def __init__(self, args: DraftSettings, index: int) -> None:
        super().__init__(args.dims, DraftAttention(args, index))


def layer_mask(
    q_pos: torch.Tensor,
    k_pos: torch.Tensor,
    *,
    causal: bool,
    window: int | None,
    extra: torch.Tensor | None = None,
) -> torch.Tensor | None:
    """Which keys each query sees (True = attend), or ``None`` when it sees all of them.

    ``q_pos [..., n]`` and ``k_pos [..., m]`` are absolute positions. Causal: key <= query.
    Window ``w``: query - key < w, and, when not causal, key - query < w as well (the rule of the
    z-lab reference). ``extra`` (``[n, m]`` or broadcastable ``[b, 1, n, m]``) is and-ed in.
    """
    if not causal and window is None:
        return extra
    q = q_pos[..., :, None]
    k = k_pos[..., None, :]
    vis = torch.ones(q.shape[:-1] + k.shape[-1:], dtype=torch.bool, device=q_pos.device)
    if causal:
        vis &= k <= q
    if window is not None:
        vis &= (q - k) < window
        if not causal:
            vis &= (k - q) < window
    if vis.dim() == 3:
        vis = vis[:, None]  # per-batch positions: [b, 1, n, m]
    return vis if extra is None else vis & extra


class DFlashDraft(DecoderStack):
    """A DFlash v1 draft. ``forward`` is differentiable and needs no cache (training);
    ``forward_fused`` with a ``KVCache`` is the decoding path."""

    LINEARS = ("fc",)  # ``fuse`` runs it through ``prepack.linear``
    PLACED_BY = "fc"

    def __init__(self, args: DraftSettings) -> None:
        super().__init__()
        d = args.dims
        self.args = args
        k = len(args.target_layer_ids)
        self.fc = nn.Linear(k * d.hidden_size, d.hidden_size, bias=False)
        self.hidden_norm = RMSNorm(d.hidden_size, d.rms_norm_eps)
        self.layers = nn.ModuleList(DraftLayer(args, i) for i in range(d.num_hidden_layers))
        self.norm = RMSNorm(d.hidden_size, d.rms_norm_eps)
        tables: dict[object, RotaryTable] = {}
        self.rotary: list[RotaryTable] = []
        for layer_type in args.layer_types:
            spec = args.ropes[layer_type]
            if spec not in tables:
                tables[spec] = RotaryTable(spec, d.head_dim)
            self.rotary.append(tables[spec])

    def new_cache(self, capacity: int) -> KVCache:
        return new_kv_cache(self.args.dims, capacity, self.fc.weight, self.rotary)

    # -- the pieces -------------------------------------------------------------------------

    def fuse(self, features: torch.Tensor) -> torch.Tensor:
        """``hidden_norm(fc(features))``; target features are cast to the draft dtype first."""
        return self.hidden_norm(linear(features.to(self.dtype), self.fc.weight, self.fc.bias))

    def embed(self, ids: torch.Tensor, embed_weight: torch.Tensor) -> torch.Tensor:
        """The block's input: the target's embeddings of ``ids``, scaled, in the draft dtype."""
        emb = F.embedding(ids, embed_weight)
        if self.args.input_embedding_scale != 1.0:
            emb = emb * self.args.input_embedding_scale
        return emb.to(self.dtype)

    def logits(self, hidden: torch.Tensor, lm_head_weight: torch.Tensor) -> torch.Tensor:
        """Draft logits through the target's ``lm_head`` (in the head's dtype)."""
        out = head(hidden.to(lm_head_weight.dtype), lm_head_weight)
        if self.args.output_multiplier != 1.0:
            out = out * self.args.output_multiplier
        cap = self.args.final_logit_softcapping
        if cap:
            out = torch.tanh(out / cap) * cap
        return out

    def pick_tokens(self, hidden: torch.Tensor, head_w: torch.Tensor, anchor: torch.Tensor) -> torch.Tensor:
        """Draft token ids [1, n] for block positions 1..n from the draft's final hidden states
        `hidden` [1, n, H] at those positions; `anchor` [1] or [1,1] is the block's first token.
        v1: argmax of `self.logits(hidden, head_w)`; DFlash2 overrides it (candidate selector)."""
        return self.logits(hidden, head_w).argmax(dim=-1)

    # -- forward ----------------------------------------------------------------------------

    def forward(self, features: torch.Tensor, block: torch.Tensor, **kw: Any) -> torch.Tensor:
        """Final-norm hidden states ``[b, n, H]`` of the block from raw tapped features.

        ``features [b, c, k*H]`` are the context's tapped target features; ``block [b, n, H]``
        the block's input embeddings (see ``embed``). ``kw``: ``forward_fused``'s.
        """
        return self.forward_fused(self.fuse(features), block, **kw)

    def forward_fused(
        self,
        context: torch.Tensor,
        block: torch.Tensor,
        *,
        context_positions: torch.Tensor | None = None,
        block_positions: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        cache: KVCache | None = None,
        extra: tuple[torch.Tensor, ...] = (),
    ) -> torch.Tensor:
        """Hidden states of the block given the fused context ``[b, c, H]``.

        Without a cache, positions default to ``0..c-1`` for the context and ``c..c+n-1`` for
        the block, and may be given (``[c]``/``[n]`` or per batch ``[b, c]``/``[b, n]``) for
        training layouts with several anchors; ``attention_mask`` (True = attend, ``[n, c+n]``
        or ``[b, 1, n, c+n]``) is and-ed with each layer's own causal/window rule.
        With a cache, the context continues the cached one: it sits at ``L..L+c-1`` and the
        block at ``L+c..L+c+n-1`` (``L`` = cache length), and the cache ends at ``L+c``.
        ``extra`` is passed to every layer after the mask (DFlash2's conv offsets).
        """
        c, n = context.shape[1], block.shape[1]
        start, q_pos, new_pos, k_pos = self._positions(c, n, block.device, context_positions, block_positions, cache)
        dtype = block.dtype
        if cache is not None:  # contiguous positions: rope as a slice, no gather and no host read
            def rope(table: RotaryTable) -> RopePair:
                cos, sin = table.span(start, c + n, dtype)
                return (cos[c:], sin[c:]), (cos, sin)
        else:
            def rope(table: RotaryTable) -> RopePair:
                return table.lookup(q_pos, dtype), table.lookup(new_pos, dtype)

        def mask(causal: bool, window: int | None) -> torch.Tensor | None:
            return layer_mask(q_pos, k_pos, causal=causal, window=window, extra=attention_mask)

        out = self._run_layers(block, context, rope, mask, cache, start, extra)
        if cache is not None:
            cache.length = start + c
        return out

    @staticmethod
    def _positions(
        c: int,
        n: int,
        dev: torch.device,
        context_positions: torch.Tensor | None,
        block_positions: torch.Tensor | None,
        cache: KVCache | None,
    ) -> tuple[int, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(start, query, new key, all key positions)`` of a ``forward_fused`` call: after the
        cache's length (reserving room for ``c + n`` keys), or the given/default positions with
        ``[c]``/``[n]`` broadcast against a per-batch ``[b, n]``/``[b, c]``."""
        if cache is not None:
            if context_positions is not None or block_positions is not None:
                raise ValueError("positions are implied by the cache; pass neither")
            cache.reserve(c + n)
            start = cache.length
            k_pos = torch.arange(start + c + n, device=dev)
            return start, k_pos[start + c:], k_pos[start:], k_pos
        ctx_pos = torch.arange(c, device=dev) if context_positions is None else context_positions.to(dev)
        q_pos = torch.arange(c, c + n, device=dev) if block_positions is None else block_positions.to(dev)
        if ctx_pos.dim() == 1 and q_pos.dim() == 2:
            ctx_pos = ctx_pos.expand(q_pos.shape[0], -1)
        elif ctx_pos.dim() == 2 and q_pos.dim() == 1:
            q_pos = q_pos.expand(ctx_pos.shape[0], -1)
        new_pos = torch.cat([ctx_pos, q_pos], dim=-1)
        return 0, q_pos, new_pos, new_pos

    def _run_layers(
        self,
        block: torch.Tensor,
        context: torch.Tensor,
        rope: Callable[[RotaryTable], RopePair],
        mask: Callable[[bool, int | None], torch.Tensor | None],
        cache: KVCache | None,
        at: int | tuple[torch.Tensor, torch.Tensor],
        extra: tuple[torch.Tensor, ...] = (),
    ) -> torch.Tensor:
        """The final-norm output of the layers over ``block``. Each layer's cos/sin and mask are
        computed once: layers sharing a rotary table share its ``rope(table)``, layers sharing a
        ``(causal, window)`` rule share its ``mask(causal, window)``."""
        ropes: dict[int, RopePair] = {}
        masks: dict[tuple[bool, int | None], torch.Tensor | None] = {}
        h = block
        for i, layer in enumerate(self.layers):
            table = self.rotary[i]
            if id(table) not in ropes:
                ropes[id(table)] = rope(table.to(block.device))
            key = (layer.self_attn.causal, layer.self_attn.window)
            if key not in masks:
                masks[key] = mask(*key)
            kv = (cache.k[i], cache.v[i]) if cache is not None else None
            h = layer(h, context, *ropes[id(table)], kv, at, masks[key], *extra)
        return self.norm(h)

    def forward_static(
        self,
        context: torch.Tensor,
        block: torch.Tensor,
        context_positions: torch.Tensor,
        block_positions: torch.Tensor,
        cache: KVCache,
        span: int | None = None,
    ) -> torch.Tensor:
        """Hidden states of the block on the static path (fixed shapes, no host reads).

        ``context [1, c, H]`` (fused) sits at ``context_positions [c]``, of which only the
        rows before ``block_positions[0]`` are valid: the rest is padding (a verify's rejected
        rows), written to the cache and then overwritten by the block, which sits at
        ``block_positions [n]`` with ``n + valid rows >= c``. Cache slot = position; every
        query attends over the whole cache up to the block's last position under its layer's
        causal/window rule. The cache keeps the valid context: the next call's context
        starts at ``block_positions[0]``. ``span``: only the first ``span`` slots are
        attended (as ``TargetModel.forward_static``); every position must lie below it.
        """
        slots = cache.slots[:span]
        new_pos = torch.cat([context_positions, block_positions])
        written = (slots <= block_positions[-1])[None, :]
        dtype = block.dtype

        def rope(table: RotaryTable) -> RopePair:
            return table.gather(block_positions, dtype), table.gather(new_pos, dtype)

        def mask(causal: bool, window: int | None) -> torch.Tensor | None:
            return layer_mask(block_positions, slots, causal=causal, window=window, extra=written)

        return self._run_layers(block, context, rope, mask, cache, (context_positions, block_positions))
