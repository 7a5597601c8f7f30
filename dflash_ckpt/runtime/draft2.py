"""The DFlash2 draft (``DFlash2DraftModel``), written from its published semantics.

DFlash2 keeps DFlash v1's draft (``draft.py``: fused context, block queries, context K/V cache,
mask filling through the target's ``lm_head``) and adds two things (docs/DESIGN.md section 9,
checked against z-lab's ``model.py`` on newer main and vLLM's ``qwen3_dflash2.py``):

- a grouped dynamic causal convolution around each sublayer. Per layer, ``attention_conv``
  and ``mlp_conv`` each hold ``base_kernel [2, ks, H]`` and ``kernel_projection [2*ks*G, H]``
  (``ks = conv_kernel_size``, ``G = H / conv_group_size``). The sublayer's normalised input
  ``x`` gives per-position, per-group coefficients ``d = kernel_projection(x)``, viewed as
  ``[2, ks, G]``: side 0 filters the sublayer's input, side 1 its output, both with the
  coefficients computed from ``x``:  ``out_t = sum_j (base[side, j] + d_t[side, j]) * in_{t-j}``
  (one ``d`` per group of ``conv_group_size`` channels, broadcast over them). The shift is
  causal and stays inside the block: ``in_{t-j}`` is zero when ``t - j`` lies before the block's
  start (the anchor's position), so the context features are never convolved and a block never
  reads its neighbour in a multi-anchor training batch. The convolved attention input is both
  the queries and the block's own keys/values;
- a candidate selector that re-ranks the ``selector_top_k`` best draft logits of each block
  position: ``score(c) = logit(c) + <pred_codebook[prev] * hidden_projection(h_t),
  succ_codebook[c]>`` at rank ``selector_rank``; greedy left to right, ``prev`` is the anchor
  for the first draft position and the token just picked after that. The codebooks are stored
  as ``candidate_selector.predecessor_codebook`` / ``successor_codebook`` with no ``.weight``
  suffix, which is how the parameters here are named.

Numerics: the conv runs in the draft dtype, as the sublayers do; the selector scores in float32
(logits, projection and codebook rows cast up), as engines accumulate it. Ties between equal
scores go to the candidate with the higher logit (``topk`` order).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from dflash_ckpt.draftspec.draft_settings import DraftSettings
from dflash_ckpt.runtime.draft import DFlashDraft, DraftLayer


def block_offsets(n: int, block_len: int | None, device: torch.device) -> torch.Tensor:
    """Each position's offset from the start of its block, ``[n]``: blocks of ``block_len``
    positions laid end to end (one block of ``n`` when ``None``)."""
    idx = torch.arange(n, device=device)
    return idx if block_len is None else idx % block_len


def grouped_causal_conv(x: torch.Tensor, coeff: torch.Tensor, base: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """``out_t = sum_j (base[j] + coeff_t[j]) * x_{t-j}`` with ``x_{t-j} = 0`` across a block start.

    ``x [b, n, H]``; ``coeff [b, n, ks, G]`` (one coefficient per group of ``H/G`` channels);
    ``base [ks, H]``; ``offsets [n]``: each position's offset inside its block.
    """
    b, n, h = x.shape
    ks, groups = coeff.shape[-2], coeff.shape[-1]
    xg = x.view(b, n, groups, h // groups)
    base_g = base.to(x.dtype).view(ks, groups, h // groups)
    out = (base_g[0] + coeff[:, :, 0, :, None]) * xg
    for j in range(1, ks):
        if j >= n:
            break
        shifted = torch.zeros_like(xg)
        shifted[:, j:] = xg[:, :-j]
        keep = (offsets >= j).to(x.dtype).view(1, n, 1, 1)
        out = out + (base_g[j] + coeff[:, :, j, :, None]) * (shifted * keep)
    return out.reshape(b, n, h)


class GroupedDynamicConv(nn.Module):
    """One sublayer's conv pair (``attention_conv`` / ``mlp_conv``): side 0 before, side 1 after."""

    def __init__(self, hidden: int, kernel_size: int, group_size: int) -> None:
        super().__init__()
        self.kernel_size = kernel_size
        self.groups = hidden // group_size
        self.base_kernel = nn.Parameter(torch.empty(2, kernel_size, hidden))
        self.kernel_projection = nn.Linear(hidden, 2 * kernel_size * self.groups, bias=False)

    def prepare(self, x: torch.Tensor, offsets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The sublayer's filtered input, and the side-1 coefficients for ``finish``."""
        coeff = self.kernel_projection(x).view(*x.shape[:-1], 2, self.kernel_size, self.groups)
        return grouped_causal_conv(x, coeff[..., 0, :, :], self.base_kernel[0], offsets), coeff[..., 1, :, :]

    def finish(self, y: torch.Tensor, coeff: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        return grouped_causal_conv(y, coeff, self.base_kernel[1], offsets)


class DFlash2Layer(DraftLayer):
    """A v1 draft layer (same tensor names) with a conv pair around attention and around the MLP."""

    def __init__(self, args: DraftSettings, index: int) -> None:
        super().__init__(args, index)
        d, v2 = args.dims, args.dflash2
        assert v2 is not None
        self.attention_conv = GroupedDynamicConv(d.hidden_size, v2.conv_kernel_size, v2.conv_group_size)
        self.mlp_conv = GroupedDynamicConv(d.hidden_size, v2.conv_kernel_size, v2.conv_group_size)

    def forward(self, x: torch.Tensor, context: torch.Tensor, rope_q: tuple[torch.Tensor, torch.Tensor],
                rope_k: tuple[torch.Tensor, torch.Tensor], kv: tuple[torch.Tensor, torch.Tensor] | None,
                cache_start: int, mask: torch.Tensor | None, offsets: torch.Tensor) -> torch.Tensor:
        a_in, a_coeff = self.attention_conv.prepare(self.input_layernorm(x), offsets)
        a_out = self.self_attn(a_in, context, rope_q, rope_k, kv, cache_start, mask)
        h = x + self.attention_conv.finish(a_out, a_coeff, offsets)
        m_in, m_coeff = self.mlp_conv.prepare(self.post_attention_layernorm(h), offsets)
        return h + self.mlp_conv.finish(self.mlp(m_in), m_coeff, offsets)


class CandidateSelector(nn.Module):
    """``candidate_selector.*``: the low-rank predecessor/successor re-ranker."""

    def __init__(self, hidden: int, vocab: int, rank: int, top_k: int) -> None:
        super().__init__()
        self.top_k = min(top_k, vocab)
        self.hidden_projection = nn.Linear(hidden, rank, bias=False)
        self.predecessor_codebook = nn.Parameter(torch.empty(vocab, rank))
        self.successor_codebook = nn.Parameter(torch.empty(vocab, rank))

    def candidates(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The top-k logits (float32, descending) and their token ids, ``[b, n, k]`` each."""
        values, ids = logits.float().topk(self.top_k, dim=-1)
        return values, ids

    def project(self, hidden: torch.Tensor) -> torch.Tensor:
        """``hidden_projection(hidden)`` in float32, ``[b, n, r]``."""
        return nn.functional.linear(hidden.float(), self.hidden_projection.weight.float())

    def scores(self, hidden: torch.Tensor, unary: torch.Tensor, cand: torch.Tensor, prev: torch.Tensor) -> torch.Tensor:
        """Scores ``[b, n, k]`` of the candidates given each position's predecessor ``prev [b, n]``
        (teacher forcing in training; ``select`` scores every possible predecessor at once)."""
        ctx = self.predecessor_codebook[prev].float() * self.project(hidden)
        succ = self.successor_codebook[cand].float()  # [b, n, k, r]
        return unary + torch.einsum("bnr,bnkr->bnk", ctx, succ)

    def select(self, hidden: torch.Tensor, logits: torch.Tensor, anchor: torch.Tensor) -> torch.Tensor:
        """Greedy left-to-right path ``[b, n]`` from the anchor ids ``[b]``."""
        unary, cand = self.candidates(logits)
        proj = self.project(hidden)
        succ = self.successor_codebook[cand].float()  # [b, n, k, r]
        # Score every (predecessor, candidate) pair at once: the predecessor of position t is the
        # anchor (t = 0) or one of position t-1's candidates, so the greedy walk below is only
        # indexing and the whole selection needs no host round trip.
        b, n, k = cand.shape
        if n == 0:
            return cand[..., 0]
        prev_ids = torch.cat([anchor.view(b, 1, 1).expand(b, 1, k), cand[:, :-1]], dim=1)  # [b, n, k]
        pred = self.predecessor_codebook[prev_ids].float() * proj[:, :, None, :]  # [b, n, k, r]
        edges = unary[:, :, None, :] + torch.einsum("bnpr,bncr->bnpc", pred, succ)  # [b, n, k_prev, k]
        rows = torch.arange(b, device=cand.device)
        at = torch.zeros(b, dtype=torch.long, device=cand.device)  # the anchor sits in every slot of t = 0
        picks = []
        for t in range(n):
            at = edges[rows, t, at].argmax(dim=-1)
            picks.append(cand[rows, t, at])
        return torch.stack(picks, dim=1)


class DFlash2Draft(DFlashDraft):
    """A DFlash2 draft: the v1 protocol (``fuse``, ``embed``, ``forward_fused``, ``logits``,
    ``new_cache``) with conv layers, and ``pick_tokens`` through the candidate selector."""

    def __init__(self, args: DraftSettings) -> None:
        if args.dflash2 is None:
            raise ValueError("DFlash2Draft needs DraftSettings of a DFlash2 config (args.dflash2 is None)")
        super().__init__(args)
        d, v2 = args.dims, args.dflash2
        self.layers = nn.ModuleList(DFlash2Layer(args, i) for i in range(d.num_hidden_layers))
        self.candidate_selector = CandidateSelector(d.hidden_size, d.vocab_size, v2.selector_rank, v2.selector_top_k)

    def pick_tokens(self, hidden: torch.Tensor, head_w: torch.Tensor, anchor: torch.Tensor) -> torch.Tensor:
        """Draft token ids [1, n] for block positions 1..n from the draft's final hidden states
        `hidden` [1, n, H] at those positions; `anchor` [1] or [1,1] is the block's first token.
        DFlash2: the candidate selector's greedy path over the top-k logits."""
        return self.candidate_selector.select(hidden, self.logits(hidden, head_w), anchor.reshape(-1))

    def forward_fused(self, context: torch.Tensor, block: torch.Tensor, *, block_len: int | None = None,
                      **kw: Any) -> torch.Tensor:
        """As ``DFlashDraft.forward_fused``. ``block_len``: the ``n`` block positions are blocks of
        this many positions laid end to end (training with several anchors; the conv's shift
        restarts at each); ``None`` (decoding): one block."""
        return super().forward_fused(context, block, extra=(block_offsets(block.shape[1], block_len, block.device),),
                                     **kw)


def make_draft(args: DraftSettings) -> DFlashDraft:
    """The draft module a config asks for: ``DFlash2Draft`` or the v1 ``DFlashDraft``."""
    return DFlash2Draft(args) if args.dflash2 is not None else DFlashDraft(args)
