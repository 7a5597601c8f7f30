"""The static decoding path for native targets: gpt-fast's shape, and CUDA graphs on top of it.

What makes it static (docs/DESIGN.md section 6 is the algorithm; this is its layout):
- KV caches are preallocated and written at positions held in device tensors; every query
  attends over the whole cache under a mask row, so no shape depends on how far decoding got;
- every verification is the layout's verify width (``block_size`` for 1+N, one more for
  anchor-first; the last block is padded, acceptance limited to what the token budget needs);
  every draft call after the first reads a context of that width: the previous verify's tapped
  features, of which only the accepted rows are valid;
- the decoding state (anchor position, draft cache end, next anchor token) lives on the device
  and each step updates it there: acceptance is computed on the device, and the one host sync
  per step only reads the tokens for the output and the stop check.

Attention is bounded by the used length, not the capacity: each step attends over the first
``span`` cache slots, ``span`` the smallest of a few buckets (``span_buckets``: powers of two
from 64 up to the capacity) that covers every position the step touches; the host knows that
bound without a device read (it tracks the anchor's position). So a step at 64 used tokens
costs the same in a cache of 128 or 4096 positions.

With ``graphs=True`` (CUDA only) the draft call, the verify-and-accept and the one-token decode
step are captured as CUDA graphs, one per step and span bucket, all in one memory pool, and
replayed: a step is then a few launches, not thousands. Capture needs exactly the above: fixed
shapes, static buffers, no host reads inside. On the CPU these functions run eagerly, the same
code; ``graphs`` is refused there.
"""

from __future__ import annotations

import time
from typing import Callable, Sequence

import torch

from dflash_ckpt.runtime.draft import DFlashDraft, DraftLayer
from dflash_ckpt.runtime.dflash_loop import Verified, first_token, run_dflash
from dflash_ckpt.runtime.generate import Generation, StepRecorder, now
from dflash_ckpt.runtime.target import TargetModel


#: The smallest span bucket: below it, attention is a small part of a step anyway.
MIN_SPAN = 64


def span_buckets(capacity: int, smallest: int = MIN_SPAN) -> list[int]:
    """Powers of two from ``smallest`` below ``capacity``, then ``capacity`` itself."""
    out, span = [], smallest
    while span < capacity:
        out.append(span)
        span *= 2
    return out + [capacity]


def supports_static(target: object, draft: object | None = None) -> bool:
    """Whether the static path runs this pair as the generic path would: a native target (it has
    ``forward_static``) and, when given, a draft whose forward is v1's own (a subclass that
    changes its layers or ``forward_fused`` without its own ``forward_static`` runs generically;
    one that only overrides ``pick_tokens`` is fine)."""
    if not isinstance(target, TargetModel):
        return False
    if draft is None:
        return True
    if not isinstance(draft, DFlashDraft):
        return False
    cls = type(draft)
    own_static = cls.forward_static is not DFlashDraft.forward_static
    v1_forward = cls.forward_fused is DFlashDraft.forward_fused and all(type(layer) is DraftLayer for layer in draft.layers)
    return own_static or v1_forward


class StaticRunner:
    """Caches, device state and (optionally) CUDA graphs for one target/draft pair.

    ``capacity`` and ``block_size`` come from the plan (``plan.RunPlan``); ``capacity`` must hold the longest prompt, the token budget and one block: verify writes
    the verify width (``block_size``, or one more anchor-first) past the last anchor.
    """

    def __init__(self, target: TargetModel, draft: DFlashDraft, capacity: int, *, block_size: int,
                 graphs: bool = False) -> None:
        dev = target.device
        if graphs and dev.type != "cuda":
            raise ValueError("CUDA graphs need a CUDA device")
        self.target, self.draft, self.capacity = target, draft, capacity
        self.block = b = block_size
        # The layout's one switch: drafts from slot 1 (1+N, verify B wide) or 0 (anchor-first, B+1).
        self.first_slot = draft.args.block_layout.first_draft_slot
        self.width = w = draft.args.block_layout.verify_width(b)
        self.taps = list(draft.args.target_layer_ids)
        self.mask_id = draft.args.mask_token_id
        self.tcache = target.new_cache(capacity)
        self.dcache = draft.new_cache(capacity)
        width = len(self.taps) * target.args.dims.hidden_size
        with torch.inference_mode():
            long = {"dtype": torch.long, "device": dev}
            self.ar = torch.arange(b, **long)  # the draft block's slots
            self.var = torch.arange(w, **long)  # the verify block's slots
            self.ids = torch.full((1, w), self.mask_id, **long)  # the verify block: anchor, then drafts
            self.t_pos = torch.zeros(1, **long)  # the anchor's position
            self.d_len = torch.zeros(1, **long)  # the draft cache holds context before this position
            self.limit = torch.zeros(1, **long)  # drafts the budget lets this step accept
            self.fok = torch.ones(1, **long)  # the last draft call's fused context was finite
            self.ctx = torch.zeros(1, w, width, dtype=target.dtype, device=dev)  # the next draft context
            self.packed = torch.zeros(2 * w + 2, **long)  # drafts, argmax, accepted, ok flags
            self.vtop = torch.zeros(w, dtype=torch.float32, device=dev)  # each verify row's top logit (self-check)
            self.tok = torch.zeros(1, 1, **long)  # target-only: the last token and its position
            self.pos = torch.zeros(1, **long)
            self.dpack = torch.zeros(6, dtype=torch.float64, device=dev)  # token, finite, top-2 values, ids
        self.spans = span_buckets(capacity)
        self.steps: dict[str, Callable[[int], None]] = {
            "draft": lambda span: self._draft_step(self.ctx, span),
            "verify": self._verify_step,
            "decode": self._decode_step,
        }
        self.graphs: dict[tuple[str, int], torch.cuda.CUDAGraph] = {}
        #: Seconds spent capturing the CUDA graphs (warm-up included); 0 without graphs.
        self.capture_s = 0.0
        if graphs:
            self.capture()

    # -- the steps (device only: no host reads, fixed shapes) ---------------------------------

    def span_for(self, used: int) -> int:
        """The smallest span bucket holding positions ``0..used-1``."""
        return next((s for s in self.spans if s >= used), self.capacity)

    def _draft_step(self, context: torch.Tensor, span: int) -> None:
        """Draft the block ``[ids[0,0], mask...]`` (``block`` slots) into ``ids[0,1:]`` from
        ``context``: the outputs at slots ``first_slot..block-1``."""
        d, t = self.draft, self.target
        c = context.shape[1]
        ctx_pos = self.d_len + (self.var if c == self.width else torch.arange(c, device=self.ar.device))
        blk_pos = self.t_pos + self.ar
        fused = d.fuse(context)
        valid = ctx_pos < self.t_pos  # rows past the accepted tokens are padding
        fused_ok = (torch.isfinite(fused[0]).all(-1) | ~valid).all()
        block = torch.where(self.ar == 0, self.ids[0, :1], self.mask_id)[None]
        hidden = d.forward_static(fused, d.embed(block, t.embed_tokens.weight), ctx_pos, blk_pos, self.dcache, span)
        self.ids[:, 1:].copy_(d.pick_tokens(hidden[:, self.first_slot:], t.lm_head.weight, self.ids[:, :1]))
        self.d_len.copy_(self.t_pos)
        self.fok.copy_(fused_ok)

    def _verify_step(self, span: int) -> None:
        """Verify ``ids`` at the anchor's position, accept, and move the state to the next step.

        Per row one max over the logits in their own dtype gives the argmax and the finite
        check (a NaN or +inf anywhere makes the row's max non-finite; the argmax of bf16 values
        is that of their exact float32 upcast), and one sum per feature row the features'
        check: no float32 copy of the logits, no elementwise pass over them."""
        out = self.target.forward_static(self.ids, self.t_pos + self.var, self.tcache, taps=self.taps, logits="all",
                                         span=span)
        top, post = out.logits[0].max(dim=-1)
        drafts = self.ids[0, 1:]
        match = (drafts == post[:-1]) & (self.var[:-1] < self.limit)
        accepted = match.long().cumprod(0).sum()
        rows = self.var <= self.limit  # rows the budget uses; the rest is padding
        ok = ((torch.isfinite(out.features[0].sum(-1)) & torch.isfinite(top)) | ~rows).all()
        self.packed.copy_(torch.cat([drafts, post, accepted[None], ok.long()[None], self.fok]))
        self.vtop.copy_(top)  # read only by the self-check (runtime/self_check.py): no host sync here
        self.ctx.copy_(out.features)
        self.ids[0, :1].copy_(post.gather(0, accepted[None]))  # the bonus token: the next anchor
        self.t_pos.add_(accepted + 1)

    def _decode_step(self, span: int) -> None:
        """One target-only token at ``pos``: argmax, finiteness and top-2 into ``dpack``, read
        from one top-2 over the logits in their own dtype (no float32 or masked copy of the
        vocabulary; the top value is non-finite when any logit is NaN or +inf)."""
        out = self.target.forward_static(self.tok, self.pos, self.tcache, logits="all", span=span)
        logits = out.logits[0, -1]
        top = logits.topk(2)
        nxt = logits.argmax()[None]  # the first index among equal maxima, as the generic path picks
        second = torch.where(top.indices[:1] == nxt, top.indices[1:], top.indices[:1])
        values = top.values.double()
        self.dpack.copy_(torch.cat([nxt.double(), torch.isfinite(values[:1]).double(), values, nxt.double(),
                                    second.double()]))
        self.tok.copy_(nxt.view(1, 1))
        self.pos.add_(1)

    def _run(self, name: str, used: int) -> None:
        """Run step ``name`` for a step touching positions below ``used``."""
        span = self.span_for(used)
        graph = self.graphs.get((name, span))
        if graph is not None:
            graph.replay()
        else:
            self.steps[name](span)

    def _reset_state(self) -> None:
        self.ids.fill_(self.mask_id)
        for buf in (self.t_pos, self.d_len, self.limit, self.pos, self.tok):
            buf.zero_()
        self.fok.fill_(1)

    @torch.inference_mode()
    def capture(self) -> None:
        """Capture each step for each span bucket as a CUDA graph, all in one memory pool (the
        graphs never run concurrently, so their temporaries can share it), after a warm-up on
        a side stream (what capture needs: lazily made tensors such as the rope casts exist
        before it starts). Warm-up writes land in cache slots every run overwrites before
        reading."""
        dev = self.target.device
        t0 = time.perf_counter()
        side = torch.cuda.Stream(dev)
        side.wait_stream(torch.cuda.current_stream(dev))
        with torch.cuda.stream(side):
            for _ in range(2):
                for step in self.steps.values():
                    for span in (self.spans[0], self.spans[-1]):
                        self._reset_state()
                        step(span)
        torch.cuda.current_stream(dev).wait_stream(side)
        pool = torch.cuda.graph_pool_handle()
        for name, step in self.steps.items():
            for span in self.spans:
                self._reset_state()
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=pool):
                    step(span)
                self.graphs[(name, span)] = graph
        self._reset_state()
        torch.cuda.synchronize(dev)
        self.capture_s = time.perf_counter() - t0

    # -- eager pieces with a prompt-dependent shape ---------------------------------------------

    def _prefill(self, prompt_ids: Sequence[int], taps: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor | None]:
        dev = self.target.device
        ids = torch.tensor([list(prompt_ids)], dtype=torch.long, device=dev)
        out = self.target.forward_static(ids, torch.arange(ids.shape[1], device=dev), self.tcache, taps=taps,
                                         logits="last", span=ids.shape[1])
        return out.logits[:, -1], out.features

    @torch.inference_mode()
    def forward_all(self, ids: Sequence[int]) -> torch.Tensor:
        """Logits ``[1, n, V]`` of one forward over ``ids`` (the lossless check), on the same
        attention path as decode and verify."""
        dev = self.target.device
        x = torch.tensor([list(ids)], dtype=torch.long, device=dev)
        return self.target.forward_static(x, torch.arange(x.shape[1], device=dev), self.tcache, logits="all",
                                          span=x.shape[1]).logits

    def _require_room(self, prompt_ids: Sequence[int], max_new_tokens: int) -> None:
        need = len(prompt_ids) + max_new_tokens + self.width
        if need > self.capacity:
            raise ValueError(f"static caches hold {self.capacity} positions; this run needs {need}")

    # -- the loops ---------------------------------------------------------------------------------

    @torch.inference_mode()
    def decode(self, prompt_ids: Sequence[int], *, max_new_tokens: int, stop_ids: Sequence[int] = (),
               on_tokens: Callable[[int], None] | None = None, top2: bool = False) -> Generation:
        """Target-only greedy decoding on the static path; the same tokens as ``generate.decode``
        (and, with ``top2``, the same top-2 logits: they come in the step's one host read anyway)."""
        self._require_room(prompt_ids, max_new_tokens)
        dev = self.target.device
        gen = Generation()
        t0 = now(dev)
        logits, _ = self._prefill(prompt_ids, ())
        gen.target_forwards = 1
        scores = logits[0].float()
        top = scores.topk(2)
        host = torch.cat([scores.argmax()[None].double(), torch.isfinite(scores).all()[None].double(),
                          top.values.double(), top.indices.double()]).tolist()
        t_decode = time.perf_counter()
        gen.prefill_s = t_decode - t0
        rec = StepRecorder(gen, stop_ids, on_tokens, t_decode)
        first = True
        while True:
            tok, finite, v0, v1, i0, i1 = host
            if not finite:
                gen.overflow = "logits"
                break
            if top2:
                gen.top2_values.append([v0, v1])
                gen.top2_ids.append([int(i0), int(i1)])
            rec.add([int(tok)], step=False)
            if first:
                gen.step_s.clear()
                self.tok.fill_(int(tok))
                self.pos.fill_(len(prompt_ids))
                first = False
            if gen.stopped or len(gen.tokens) >= max_new_tokens:
                break
            self._run("decode", len(prompt_ids) + len(gen.tokens))  # the token fed sits one below
            gen.target_forwards += 1
            host = self.dpack.tolist()
        gen.decode_s = now(dev) - t_decode
        return gen

    @torch.inference_mode()
    def dflash(self, prompt_ids: Sequence[int], *, max_new_tokens: int, stop_ids: Sequence[int] = (),
               on_tokens: Callable[[int], None] | None = None) -> Generation:
        """Greedy DFlash decoding on the static path (``run_dflash`` with a ``StaticExecutor``);
        the same tokens as ``eager_dflash.dflash_decode``."""
        self._require_room(prompt_ids, max_new_tokens)
        return run_dflash(StaticExecutor(self), prompt_ids, max_new_tokens=max_new_tokens, stop_ids=stop_ids,
                          on_tokens=on_tokens)


class StaticExecutor:
    """The DFlash steps of a ``StaticRunner``: acceptance and the next step's state are computed
    on the device (``_verify_step``); the host reads one packed tensor per step."""

    def __init__(self, runner: StaticRunner) -> None:
        self.r = runner
        self.device, self.width = runner.target.device, runner.width
        #: The first draft call reads the prompt's features (eager: the prompt's width).
        self.context: torch.Tensor | None = None

    def prefill(self, prompt_ids: Sequence[int]) -> tuple[int, bool]:
        r = self.r
        logits, self.context = r._prefill(prompt_ids, r.taps)
        first, finite = first_token(logits, self.context)
        r._reset_state()
        r.ids[0, 0] = first
        r.t_pos.fill_(len(prompt_ids))
        return first, finite

    def draft(self, start: int, last: int, size: int) -> None:
        r = self.r
        if self.context is not None:
            r._draft_step(self.context, r.span_for(start + self.width))
            self.context = None
        else:
            r._run("draft", start + self.width)

    def verify(self, start: int, last: int, size: int) -> Verified:
        r, w = self.r, self.width
        r.limit.fill_(size - 1)
        r._run("verify", start + w)
        host = r.packed.tolist()
        overflow = None if host[2 * w] else "tapped features"
        if overflow is None and not host[2 * w + 1]:
            overflow = "fused features"
        return Verified(host[: w - 1], host[w - 1: 2 * w - 1], host[2 * w - 1], overflow)

    def commit(self, start: int, accepted: int) -> None:
        """Nothing on the host: ``_verify_step`` moved the anchor and the context on the device."""
