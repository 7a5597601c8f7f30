"""Building blocks shared by the target and the draft: RMSNorm, the SwiGLU MLP, attention, the KV cache."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable

import torch
import torch.nn.functional as F
from torch import nn

from dflash_ckpt.runtime.prepack import linear, released

if TYPE_CHECKING:
    from dflash_ckpt.draftspec.specs import Dims

#: ``enable_gqa`` lets SDPA read grouped K/V without copying them per query head (torch >= 2.5).
_SDPA_GQA = torch.__version__ >= "2.5"


def head(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``x @ weight.T`` over the last dim, as a 2-D matmul.

    Used for the vocabulary projections, whose inputs are slices (``out[:, -1:]``, block
    positions ``1..``). torch's CPU bf16 ``linear`` takes a path about 30x slower for a 3-D view
    with a storage offset than for the same data flattened to 2-D. A prepacked head
    (``prepack``) streams at the memory's speed.
    """
    return linear(x.reshape(-1, x.shape[-1]), weight).view(*x.shape[:-1], weight.shape[0])


class RMSNorm(nn.Module):
    """Qwen3/Llama RMSNorm: normalise in float32, cast back, then scale (HF's order of casts).

    ``F.rms_norm`` without a weight is the normalisation alone (one fused kernel on CUDA); the
    scale is applied after the cast back, as HF does, so bf16 results keep HF's rounding.
    """

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, self.eps)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm over the last dim with HF's casts; ``weight`` broadcasts (``[d]``, or one row
    per head for norms applied to several heads' groups at once)."""
    h = F.rms_norm(x.to(torch.float32), (x.shape[-1],), eps=eps)
    return weight * h.to(x.dtype)


def materialize(model: nn.Module, *, dtype: torch.dtype, device: torch.device | str) -> nn.Module:
    """Give a meta-device ``model`` uninitialised storage: the linears each module names in its
    ``FUSED`` table (``(buffer, (linear, ...))``) get one fused weight (and bias) whose row
    blocks are their parameters, every other parameter its own tensor. One matmul then
    replaces several (fewer kernels per layer), and loading reads the checkpoint straight into
    the fused buffers: no second copy of q/k/v or gate/up is made and nothing keeps the file
    mapped; checkpoint names, ``state_dict`` and training (which runs the separate
    projections, see ``use_fused``) are unchanged. Tied parameters stay one tensor."""
    done: dict[int, nn.Parameter] = {}
    for mod in model.modules():
        for name, attrs in getattr(mod, "FUSED", ()):
            linears = [getattr(mod, a) for a in attrs]
            if any(not lin.weight.is_meta for lin in linears):
                continue
            rows = sum(lin.weight.shape[0] for lin in linears)
            weight = torch.empty(rows, linears[0].weight.shape[1], dtype=dtype, device=device)
            with_bias = all(lin.bias is not None for lin in linears)
            bias = torch.empty(rows, dtype=dtype, device=device) if with_bias else None
            start = 0
            for lin in linears:
                n, grad = lin.weight.shape[0], lin.weight.requires_grad
                for attr, whole in (("weight", weight), ("bias", bias)):
                    old = getattr(lin, attr)
                    if old is None or whole is None:
                        continue
                    new = nn.Parameter(whole[start:start + n], requires_grad=grad)
                    done[id(old)] = new
                    setattr(lin, attr, new)
                start += n
            mod.register_buffer(name, weight, persistent=False)
            mod.register_buffer(name + "_bias", bias, persistent=False)
    for mod in model.modules():
        for attr, p in list(mod._parameters.items()):
            if p is None or not p.is_meta:
                continue
            if id(p) not in done:
                done[id(p)] = nn.Parameter(torch.empty(p.shape, dtype=dtype, device=device), requires_grad=p.requires_grad)
            mod._parameters[attr] = done[id(p)]
    return model


def use_fused(fused: torch.Tensor | None, param: torch.Tensor) -> bool:
    """Whether a forward may use a fused weight: it exists and no gradient is wanted (training
    runs the separate parameters, which are what an optimiser holds; prepacked weights whose
    plain copy was freed have only the fused path, which refuses gradients)."""
    if released(fused):
        return True
    return fused is not None and not (torch.is_grad_enabled() and param.requires_grad)


class MLP(nn.Module):
    """``down(silu(gate(x)) * up(x))``; ``materialize`` gives gate and up one fused weight."""

    FUSED = (("gate_up", ("gate_proj", "up_proj")),)
    #: Linears whose forward runs through ``prepack.linear`` (a prepacked weight is used there).
    LINEARS = ("down_proj",)

    def __init__(self, hidden: int, intermediate: int, bias: bool = False) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=bias)
        self.up_proj = nn.Linear(hidden, intermediate, bias=bias)
        self.down_proj = nn.Linear(intermediate, hidden, bias=bias)
        self.register_buffer("gate_up", None, persistent=False)
        self.register_buffer("gate_up_bias", None, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if use_fused(self.gate_up, self.gate_proj.weight):
            gate, up = linear(x, self.gate_up, self.gate_up_bias).chunk(2, dim=-1)
            return linear(F.silu(gate) * up, self.down_proj.weight, self.down_proj.bias)
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Attention(nn.Module):
    """The q/k/v/o projections (HF names) and head sizes the target's and the draft's attention share."""

    def __init__(self, dims: Dims) -> None:
        super().__init__()
        d = dims
        self.heads, self.kv_heads, self.head_dim = d.num_attention_heads, d.num_key_value_heads, d.head_dim
        self.scale = d.head_dim ** -0.5
        bias = d.attention_bias
        self.q_proj = nn.Linear(d.hidden_size, d.num_attention_heads * d.head_dim, bias=bias)
        self.k_proj = nn.Linear(d.hidden_size, d.num_key_value_heads * d.head_dim, bias=bias)
        self.v_proj = nn.Linear(d.hidden_size, d.num_key_value_heads * d.head_dim, bias=bias)
        self.o_proj = nn.Linear(d.num_attention_heads * d.head_dim, d.hidden_size, bias=bias)

    def output(self, out: torch.Tensor) -> torch.Tensor:
        """``o_proj`` of the attention output ``[b, heads, n, d]``, back to ``[b, n, hidden]``."""
        b, _, n, _ = out.shape
        return linear(out.transpose(1, 2).reshape(b, n, self.heads * self.head_dim), self.o_proj.weight, self.o_proj.bias)


def write_kv(kv: tuple[torch.Tensor, torch.Tensor], k: torch.Tensor, v: torch.Tensor,
             at: int | tuple[torch.Tensor, ...], mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Write a layer's new keys and values ``[b, kv, m, d]`` into its cache ``kv``; returns what
    attention reads. ``at``: the first slot as an int (written contiguously, the valid prefix
    read) or, on the static path, device slot tensors that take consecutive parts of the new
    keys in order (a later part overwrites an earlier one's slots: the draft's block over the
    context's padding), with the mask's width of slots read (the slots in use)."""
    k_buf, v_buf = kv
    if isinstance(at, int):
        end = at + k.shape[2]
        k_buf[:, :, at:end] = k
        v_buf[:, :, at:end] = v
        return k_buf[:, :, :end], v_buf[:, :, :end]
    first = 0
    for slots in at:
        part = slice(first, first + slots.shape[0])
        k_buf.index_copy_(2, slots, k[:, :, part])
        v_buf.index_copy_(2, slots, v[:, :, part])
        first = part.stop
    span = mask.shape[-1] if mask is not None else k_buf.shape[2]
    return k_buf[:, :, :span], v_buf[:, :, :span]


class DecoderLayer(nn.Module):
    """A pre-norm residual layer, the target's and the draft's: ``h = x + self_attn(norm(x), ...)``,
    then ``h + mlp(norm(h))``; what the attention takes after its input is its own."""

    def __init__(self, dims: Dims, self_attn: nn.Module, *, mlp_bias: bool = False) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(dims.hidden_size, dims.rms_norm_eps)
        self.self_attn = self_attn
        self.post_attention_layernorm = RMSNorm(dims.hidden_size, dims.rms_norm_eps)
        self.mlp = MLP(dims.hidden_size, dims.intermediate_size, bias=mlp_bias)

    def forward(self, x: torch.Tensor, *attn_args: Any) -> torch.Tensor:
        h = x + self.self_attn(self.input_layernorm(x), *attn_args)
        return h + self.mlp(self.post_attention_layernorm(h))


class DecoderStack(nn.Module):
    """What the native target and the draft share as whole models: a dtype and device read from
    one weight (``PLACED_BY``: the target's embedding table, the draft's ``fc``)."""

    PLACED_BY = ""

    @property
    def dtype(self) -> torch.dtype:
        return getattr(self, self.PLACED_BY).weight.dtype

    @property
    def device(self) -> torch.device:
        return getattr(self, self.PLACED_BY).weight.device


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    mask: torch.Tensor | None = None,
    causal: bool = False,
    scale: float,
) -> torch.Tensor:
    """SDPA over ``q [b, h, n, d]`` and grouped ``k, v [b, kv, m, d]``; ``mask`` True = attend.

    On CUDA with a mask (the static path), the queries of each KV group are folded into one
    ``groups * n`` query axis instead of expanding keys and values: no copy of the cache, and
    only plain SDPA, which CUDA graphs capture (query head ``j`` reads KV head ``j // groups``).
    """
    groups = q.shape[1] // k.shape[1]
    if groups > 1 and q.is_cuda and mask is not None and not causal:
        return folded_gqa_attention(q, k, v, mask, scale)
    if groups > 1 and _SDPA_GQA:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, scale=scale, enable_gqa=True)
    if groups > 1:
        k = k.repeat_interleave(groups, dim=1)
        v = v.repeat_interleave(groups, dim=1)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, scale=scale)


def folded_gqa_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, scale: float) -> torch.Tensor:
    """Grouped-query attention as plain SDPA: ``q [b, h, n, d]`` becomes ``[b, kv, groups * n, d]``
    (HF's head order: query head ``j`` reads KV head ``j // groups``) and the mask's rows are
    tiled to match; keys and values are read in place."""
    b, h, n, d = q.shape
    kv = k.shape[1]
    groups = h // kv
    rows = mask.expand(*mask.shape[:-2], n, mask.shape[-1])
    rows = rows.unsqueeze(-3).expand(*rows.shape[:-2], groups, n, rows.shape[-1])
    rows = rows.reshape(*rows.shape[:-3], groups * n, rows.shape[-1])
    out = F.scaled_dot_product_attention(q.reshape(b, kv, groups * n, d), k, v, attn_mask=rows, scale=scale)
    return out.view(b, h, n, d)


class KVCache:
    """Keys and values of every layer, preallocated once; ``length`` positions are valid.

    Cropping only moves ``length``: entries past it are overwritten by the next write, so a
    decoding loop never allocates cache memory after setup.
    """

    def __init__(self, num_layers: int, kv_heads: int, capacity: int, head_dim: int, *,
                 dtype: torch.dtype, device: torch.device | str, batch: int = 1) -> None:
        shape = (num_layers, batch, kv_heads, capacity, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.capacity = capacity
        self.length = 0
        #: Slot indices ``0..capacity-1`` on the device: the static path's key positions.
        self.slots = torch.arange(capacity, device=device)

    def reset(self) -> None:
        self.length = 0

    def crop(self, length: int) -> None:
        """Keep the first ``length`` positions (``length`` may not exceed what was written)."""
        if not 0 <= length <= self.length:
            raise ValueError(f"cannot crop a cache of length {self.length} to {length}")
        self.length = length

    def reserve(self, n: int) -> None:
        if self.length + n > self.capacity:
            raise ValueError(f"KV cache full: {self.length} + {n} positions exceed its capacity {self.capacity}")


def new_kv_cache(dims: Dims, capacity: int, weight: torch.Tensor, tables: Iterable[Any] = ()) -> KVCache:
    """A batch-1 cache of ``capacity`` positions for a model of ``dims`` (a run's, so every size is set) in ``weight``'s dtype and device, with its rotary ``tables``
    grown as far: the one place the native target and the draft size their caches."""
    for table in tables:
        table.to(weight.device).grow(capacity)
    return KVCache(dims.num_hidden_layers, dims.num_key_value_heads, capacity, dims.head_dim, dtype=weight.dtype, device=weight.device)
