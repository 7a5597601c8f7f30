"""Rotary position embeddings: inverse frequencies for each rope type, and a cos/sin table.

The formulas follow Hugging Face's ``modeling_rope_utils`` (read for the facts, written here):
- ``default``: ``theta ** (-2i/d)``;
- ``linear``: default divided by ``factor``;
- ``llama3``: wavelengths longer than ``original_max_position_embeddings / low_freq_factor`` are
  divided by ``factor``, shorter than ``... / high_freq_factor`` kept, and the band between is
  interpolated with ``smooth = (orig / wavelen - low) / (high - low)``;
- ``yarn``: a ramp between interpolated (``/ factor``) and extrapolated frequencies over the
  dimensions whose rotation count at ``original_max_position_embeddings`` lies between
  ``beta_slow`` and ``beta_fast`` (bounds floored/ceiled unless ``truncate`` is false), and cos/sin
  scaled by ``attention_factor`` (default ``0.1 ln(factor) + 1``, or the ``mscale`` ratio).
  ``factor`` is used as the config gives it; some transformers releases instead recomputed it as
  ``max_position_embeddings / original_max_position_embeddings`` when both are set, which vLLM
  and SGLang do not do. We follow the serving engines.

Rotation is the "rotate half" layout of HF Qwen3/Llama (not interleaved pairs). The table is in
float32 and cast to the activation dtype where it is applied, as HF does.
"""

from __future__ import annotations

import math

import torch

from dflash_ckpt.draftspec.rope_spec import RopeSpec


def inv_freq(spec: RopeSpec, dim: int) -> tuple[torch.Tensor, float]:
    """Inverse frequencies (``dim // 2`` float32 values) and the cos/sin scale for ``spec``."""
    exponents = torch.arange(0, dim, 2, dtype=torch.int64, device="cpu").to(torch.float32) / dim
    base = 1.0 / (spec.theta ** exponents)
    if spec.rope_type == "default":
        return base, 1.0
    if spec.rope_type == "linear":
        return base / spec.factor, 1.0
    if spec.rope_type == "llama3":
        return _llama3(base, spec), 1.0
    if spec.rope_type == "yarn":
        return _yarn(spec, dim)
    raise ValueError(f"rope type {spec.rope_type!r}")


def _llama3(freq: torch.Tensor, spec: RopeSpec) -> torch.Tensor:
    orig = float(spec.original_max_position_embeddings or spec.max_position_embeddings)
    low_wavelen = orig / spec.low_freq_factor
    high_wavelen = orig / spec.high_freq_factor
    wavelen = 2 * math.pi / freq
    scaled = torch.where(wavelen > low_wavelen, freq / spec.factor, freq)
    smooth = (orig / wavelen - spec.low_freq_factor) / (spec.high_freq_factor - spec.low_freq_factor)
    smoothed = (1 - smooth) * scaled / spec.factor + smooth * scaled
    medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    return torch.where(medium, smoothed, scaled)


def _yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def _yarn(spec: RopeSpec, dim: int) -> tuple[torch.Tensor, float]:
    factor = spec.factor
    orig = spec.original_max_position_embeddings or spec.max_position_embeddings
    if spec.attention_factor is not None:
        attention = spec.attention_factor
    elif spec.mscale and spec.mscale_all_dim:
        attention = _yarn_mscale(factor, spec.mscale) / _yarn_mscale(factor, spec.mscale_all_dim)
    else:
        attention = _yarn_mscale(factor)

    def correction_dim(rotations: float) -> float:
        """The dimension index whose wavelength fits ``rotations`` times into ``orig`` positions."""
        return dim * math.log(orig / (rotations * 2 * math.pi)) / (2 * math.log(spec.theta))

    low, high = correction_dim(spec.beta_fast), correction_dim(spec.beta_slow)
    if spec.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = ((torch.arange(dim // 2, dtype=torch.float32, device="cpu") - low) / (high - low)).clamp(0, 1)
    pos_freqs = spec.theta ** (torch.arange(0, dim, 2, dtype=torch.float32, device="cpu") / dim)
    extrapolated = 1.0 / pos_freqs
    interpolated = 1.0 / (factor * pos_freqs)
    keep = 1 - ramp  # 1 where the original frequency is kept (high frequencies)
    return interpolated * (1 - keep) + extrapolated * keep, float(attention)


class RotaryTable:
    """cos/sin for positions ``0..capacity-1``; ``grow`` enlarges it (call it before decoding).

    Lookups by position index (``cos[positions]``) keep RoPE at absolute positions for any
    layout of the keys, which the draft needs: its context and block keys are not contiguous
    in a training batch with several anchors.

    Captured CUDA graphs read these tables by address, so a table, once made, is never freed
    or rewritten while the object lives: ``grow`` within the capacity and ``to`` the device it
    is on change nothing (same ``data_ptr``), and a real growth or move makes new tables and
    keeps the old ones alive (``_retired``), valid for the positions an older graph reads.
    """

    def __init__(self, spec: RopeSpec, head_dim: int, device: torch.device | str = "cpu", capacity: int = 0) -> None:
        self.spec = spec
        self.head_dim = head_dim
        freq, self.attention_factor = inv_freq(spec, head_dim)
        self.inv_freq = freq.to(device)
        self.cos = torch.empty(0, head_dim, device=device)
        self.sin = torch.empty(0, head_dim, device=device)
        self._cast: dict[torch.dtype, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}
        self._retired: list[object] = []
        self.grow(capacity)

    @property
    def capacity(self) -> int:
        return self.cos.shape[0]

    def grow(self, capacity: int) -> None:
        if capacity <= self.capacity:
            return
        pos = torch.arange(capacity, dtype=torch.float32, device=self.inv_freq.device)
        freqs = torch.outer(pos, self.inv_freq)
        emb = torch.cat([freqs, freqs], dim=-1)
        self._retire()
        self.cos = emb.cos() * self.attention_factor
        self.sin = emb.sin() * self.attention_factor

    def _retire(self) -> None:
        """Keep the current tables alive (graphs may hold their addresses) before replacing them."""
        if self.cos.numel() or self._cast:
            self._retired.append((self.cos, self.sin, dict(self._cast)))
        self._cast = {}

    def to(self, device: torch.device | str) -> RotaryTable:
        want, here = torch.device(device), self.cos.device
        if want.type == here.type and want.index in (None, here.index) and self.inv_freq.device == here:
            return self
        cos, sin = self.cos, self.sin
        self._retire()
        self.inv_freq = self.inv_freq.to(device)
        self.cos, self.sin = cos.to(device), sin.to(device)
        return self

    def _tables(self, dtype: torch.dtype, signed: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin (``signed``: sin with its first half negated, see ``apply_rope``) in ``dtype``."""
        if dtype not in self._cast:
            self._cast_tables(dtype)
        cos, sin, signed_sin = self._cast[dtype]
        return cos, signed_sin if signed else sin

    @torch.inference_mode(False)
    def _cast_tables(self, dtype: torch.dtype) -> None:
        """Made outside inference mode, so that a table first used while decoding also serves
        a later differentiable forward (inference tensors cannot be saved for backward)."""
        with torch.no_grad():
            half = self.head_dim // 2
            cos, sin = self.cos.clone(), self.sin.clone()  # normal tensors even if the table was made in inference mode
            signed_sin = torch.cat([-sin[:, :half], sin[:, half:]], dim=-1)
            self._cast[dtype] = (cos.to(dtype), sin.to(dtype), signed_sin.to(dtype))

    def _cover(self, end: int) -> None:
        """Grow (at least doubling) to hold positions below ``end``."""
        if end > self.capacity:
            self.grow(max(end, 2 * self.capacity))

    def lookup(self, positions: torch.Tensor, dtype: torch.dtype, signed: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin of shape ``positions.shape + (head_dim,)`` in ``dtype``."""
        self._cover(int(positions.max()) + 1 if positions.numel() else 0)
        return self.gather(positions, dtype, signed)

    def gather(self, positions: torch.Tensor, dtype: torch.dtype, signed: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """Like ``lookup`` but without reading ``positions`` on the host (no device sync, as the
        static decoding path and CUDA graphs need): the caller has grown the table to cover
        them (``new_cache`` does, for the cache's capacity)."""
        cos, sin = self._tables(dtype, signed)
        return cos[positions], sin[positions]

    def span(self, start: int, length: int, dtype: torch.dtype, signed: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin for the contiguous positions ``start..start+length-1`` (a view, no gather)."""
        self._cover(start + length)
        cos, sin = self._tables(dtype, signed)
        return cos[start:start + length], sin[start:start + length]


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *, signed: bool = False) -> torch.Tensor:
    """Rotate ``x`` ``[batch, heads, n, head_dim]`` by ``cos``/``sin`` ``[n, d]`` or ``[batch, n, d]``.

    ``signed``: ``sin`` comes from a ``signed=True`` table; ``rotate_half(x) * sin`` is then
    ``roll(x) * signed_sin``, bit for bit (a sign moves between factors exactly), in one kernel
    instead of four (two slices, a negation, a concatenation).
    """
    if cos.dim() == 3:
        cos, sin = cos[:, None], sin[:, None]
    return rope_rows(x, cos, sin, signed=signed)


def rope_rows(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *, signed: bool = False) -> torch.Tensor:
    """``x * cos + rotate_half(x) * sin`` with ``cos``/``sin`` already broadcastable to ``x``."""
    if signed:
        return x * cos + x.roll(x.shape[-1] // 2, dims=-1) * sin
    return x * cos + rotate_half(x) * sin
