"""The target: a dense Qwen3 or Llama 3.x decoder with a preallocated KV cache and tapped features.

Parameter names are those of Hugging Face checkpoints without the ``model.`` prefix
(``embed_tokens``, ``layers.N.self_attn.q_proj``, ``norm``, ``lm_head``), so loading is a rename.

Tapped features follow the z-lab reference exactly: the feature of tap layer ``i`` is HF's
``hidden_states[i + 1]``, the residual stream after decoder layer ``i``. For every layer but the
last this is the raw layer output. For the last layer it is *not*: HF replaces the last entry of
``hidden_states`` by the output of the final ``norm``, so a draft tapping layer ``L - 1`` reads the
normalised stream (inspect warns about such drafts, DF307, because engines differ there).
Tap ``-1`` (DeepSpec drafts) is ``hidden_states[0]``, the embedding output.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
from torch import nn

from dflash_ckpt.draftspec.target_settings import TargetSettings
from dflash_ckpt.runtime.layers import (Attention, DecoderLayer, DecoderStack, KVCache, RMSNorm, attention,
                                        head, new_kv_cache, rms_norm, use_fused, write_kv)
from dflash_ckpt.runtime.prepack import linear
from dflash_ckpt.runtime.rope import RotaryTable, rope_rows


@dataclass
class TargetOutput:
    #: ``[batch, n, vocab]`` (``n`` = 1 with ``logits="last"``), ``None`` with ``logits="none"``.
    logits: torch.Tensor | None
    #: ``[batch, n, len(taps) * hidden]``, the tapped features concatenated in tap order.
    features: torch.Tensor | None


class TargetAttention(Attention):
    FUSED = (("qkv", ("q_proj", "k_proj", "v_proj")),)  # one qkv matmul instead of three (``layers.materialize``)
    LINEARS = ("o_proj",)  # run through ``prepack.linear``

    def __init__(self, args: TargetSettings) -> None:
        super().__init__(args.dims)
        d = args.dims
        if args.qk_norm:
            self.q_norm = RMSNorm(d.head_dim, d.rms_norm_eps)
            self.k_norm = RMSNorm(d.head_dim, d.rms_norm_eps)
        else:
            self.q_norm = self.k_norm = None
        self.register_buffer("qkv", None, persistent=False)
        self.register_buffer("qkv_bias", None, persistent=False)
        self.register_buffer("qk_norm_w", None, persistent=False)

    def norm_table(self) -> None:
        """The q/k norm weights as one ``[heads + kv_heads, head_dim]`` table (call it on final
        weights: the table is a copy)."""
        if self.q_norm is not None:
            self.qk_norm_w = self._qk_norm_weight().detach()

    def _qk_norm_weight(self) -> torch.Tensor:
        assert self.q_norm is not None and self.k_norm is not None
        d = self.head_dim
        return torch.cat([self.q_norm.weight.expand(self.heads, d), self.k_norm.weight.expand(self.kv_heads, d)])

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        kv: tuple[torch.Tensor, torch.Tensor] | None,
        at: int | tuple[torch.Tensor],
        mask: torch.Tensor | None,
        causal: bool,
    ) -> torch.Tensor:
        """``at``: the first position as an int (keys appended at ``at..``, the valid prefix of
        the cache attended), or the positions ``[n]`` as a device tensor in a tuple (the static
        path: keys written there, the whole preallocated cache attended under ``mask``; see
        ``layers.write_kv``). ``sin`` is a signed table (``rope.apply_rope``).

        Queries and keys are normalised and rotated together, as one ``[b, n, h + kv, d]``
        slice of the qkv output (per-head operations, so the values are those of separate
        calls, with half the kernels).
        """
        b, n, _ = x.shape
        h, g, d = self.heads, self.kv_heads, self.head_dim
        fused = use_fused(self.qkv, self.q_proj.weight)
        if fused:
            qkv = linear(x, self.qkv, self.qkv_bias)
        else:
            qkv = torch.cat([self.q_proj(x), self.k_proj(x), self.v_proj(x)], dim=-1)
        qkv = qkv.view(b, n, h + 2 * g, d)
        qk, v = qkv[:, :, : h + g], qkv[:, :, h + g:].transpose(1, 2)
        if self.q_norm is not None:
            w = self.qk_norm_w if fused and self.qk_norm_w is not None else self._qk_norm_weight()
            qk = rms_norm(qk, w, self.q_norm.eps)
        qk = rope_rows(qk, cos[:, None], sin[:, None], signed=True)
        q, k = qk[:, :, :h].transpose(1, 2), qk[:, :, h:].transpose(1, 2)
        if kv is not None:
            k, v = write_kv(kv, k, v, at, mask)
        return self.output(attention(q, k, v, mask=mask, causal=causal, scale=self.scale))


class TargetLayer(DecoderLayer):
    """A target layer; its attention takes ``(cos, sin, kv, at, mask, causal)``."""

    def __init__(self, args: TargetSettings) -> None:
        super().__init__(args.dims, TargetAttention(args), mlp_bias=args.mlp_bias)


class TargetModel(DecoderStack):
    """Qwen3 (with ``q_norm``/``k_norm``) or Llama 3.x; batch 1 with a cache, any batch without."""

    LINEARS = ("lm_head",)  # ``layers.head`` runs it through ``prepack.linear``
    PLACED_BY = "embed_tokens"

    def __init__(self, args: TargetSettings) -> None:
        super().__init__()
        d = args.dims
        self.args = args
        # ``_weight`` skips the random init: on the meta device, ``normal_`` would import
        # torch._dynamo (about a second) on every load.
        self.embed_tokens = nn.Embedding(d.vocab_size, d.hidden_size, _weight=torch.empty(d.vocab_size, d.hidden_size))
        self.layers = nn.ModuleList(TargetLayer(args) for _ in range(d.num_hidden_layers))
        self.norm = RMSNorm(d.hidden_size, d.rms_norm_eps)
        self.lm_head = nn.Linear(d.hidden_size, d.vocab_size, bias=False)
        self.rotary = RotaryTable(args.rope, d.head_dim)
        if args.tie_word_embeddings:
            self.tie_weights()

    def derive_tables(self) -> TargetModel:
        """Once the weights are final: each layer's q/k norm table (``TargetAttention.norm_table``)."""
        for layer in self.layers:
            layer.self_attn.norm_table()
        return self

    def tie_weights(self) -> None:
        """Share the embedding table with ``lm_head`` (``tie_word_embeddings``)."""
        self.lm_head.weight = self.embed_tokens.weight

    def new_cache(self, capacity: int) -> KVCache:
        """A batch-1 cache of ``capacity`` positions in the model's dtype and device."""
        return new_kv_cache(self.args.dims, capacity, self.embed_tokens.weight, [self.rotary])

    def forward(
        self,
        ids: torch.Tensor,
        *,
        cache: KVCache | None = None,
        start: int = 0,
        taps: Sequence[int] = (),
        logits: str = "all",
    ) -> TargetOutput:
        """Run ``ids [batch, n]`` at positions ``start..start+n-1``.

        With ``cache``, ``start`` is the cache's length and the new keys/values are appended (the
        caller crops the cache after verification). Without, this is a plain causal forward of a
        whole sequence, differentiable, as training a draft needs. ``logits`` is ``all``,
        ``last`` or ``none``.
        """
        b, n = ids.shape
        if cache is not None:
            cache.reserve(n)
            start = cache.length
        h = self.embed_tokens(ids)
        cos, sin = self.rotary.to(ids.device).span(start, n, h.dtype, signed=True)
        mask, causal = None, False
        if n > 1 and start == 0:
            causal = True
        elif n > 1:
            # Query i sits at position start+i and sees keys 0..start+i.
            keys = torch.arange(start + n, device=ids.device)
            mask = keys[None, :] <= (start + torch.arange(n, device=ids.device))[:, None]
        out = self._layers(h, cos, sin, cache, start, mask, causal, taps, logits)
        if cache is not None:
            cache.length = start + n
        return out

    def forward_static(
        self,
        ids: torch.Tensor,
        positions: torch.Tensor,
        cache: KVCache,
        *,
        taps: Sequence[int] = (),
        logits: str = "all",
        span: int | None = None,
    ) -> TargetOutput:
        """Run ``ids [1, n]`` at ``positions [n]`` (a device tensor): the static, gpt-fast shape.

        Keys and values are written into the cache at ``positions``; every query attends over
        the whole preallocated cache under a mask row (key position <= query position), so
        decode, verify and prefill take one attention path, and no shape or host value depends
        on the decoding state: what CUDA graphs need. Stale entries past a query's position
        (rejected drafts) are masked, so the caller never crops; ``cache.length`` is not used.

        ``span``: attend over the first ``span`` slots only (every position must lie below it):
        the caller picks it from a few fixed buckets (``static.span_buckets``), so attention
        costs what the context uses, not the capacity, and each bucket keeps fixed shapes.
        """
        h = self.embed_tokens(ids)
        cos, sin = self.rotary.gather(positions, h.dtype, signed=True)
        mask = cache.slots[None, :span] <= positions[:, None]
        return self._layers(h, cos, sin, cache, (positions,), mask, False, taps, logits)

    def _layers(self, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache: KVCache | None,
                at: int | tuple[torch.Tensor], mask: torch.Tensor | None, causal: bool, taps: Sequence[int],
                logits: str) -> TargetOutput:
        last = len(self.layers) - 1
        wanted = set(taps)
        feats: dict[int, torch.Tensor] = {}
        if -1 in wanted:
            feats[-1] = h  # tap -1: the embedding output, HF's hidden_states[0] (DeepSpec drafts)
        for i, layer in enumerate(self.layers):
            kv = (cache.k[i], cache.v[i]) if cache is not None else None
            h = layer(h, cos, sin, kv, at, mask, causal)
            if i in wanted and i != last:
                feats[i] = h
        out = self.norm(h)
        if last in wanted:
            feats[last] = out  # HF's hidden_states[-1] is taken after the final norm
        features = torch.cat([feats[i] for i in taps], dim=-1) if taps else None
        if logits == "none":
            return TargetOutput(None, features)
        head_in = out[:, -1:] if logits == "last" else out
        return TargetOutput(head(head_in, self.lm_head.weight), features)
