"""The load phase of a serve run: C requests at once, in waves, against one server.

One untimed wave first (a server's first batch of a size pays one-time costs: 2.3 s against 0.2 s
for the tiny pair's plain server).
Why waves: acceptance and speed change with batching, and one wave of C concurrent requests is
one sample of both; ``WAVES`` waves give a mean and a Student-t interval (``confidence.t975``)
over waves, for tau (from the /metrics counters' difference over each wave), output tokens/s
(tokens the wave returned / its wall time), and, paired wave by wave against the server without
the draft, the speedup. Bounded: C threads, ``WAVES`` waves, each request has a deadline.
"""

from __future__ import annotations

import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Mapping, Sequence

from dflash_ckpt.engine_runners.vllm_serve import SERVED_NAME, Server, complete, difference, metrics, tau
from dflash_ckpt.stats.confidence import t975

#: Waves per server: a mean and an interval need at least two; five of the tiny pair take seconds.
WAVES = 5
DEFAULT_CONCURRENCY = 4
MAX_CONCURRENCY = 256


def mean_interval(xs: Sequence[float]) -> dict[str, Any]:
    """``{"mean", "ci95": [low, high] | None, "n"}``: Student's t over the values (None below 2)."""
    xs = [x for x in xs if x is not None]
    if not xs:
        return {"mean": None, "ci95": None, "n": 0}
    m = statistics.fmean(xs)
    if len(xs) < 2:
        return {"mean": m, "ci95": None, "n": len(xs)}
    half = t975(len(xs) - 1) * statistics.stdev(xs) / len(xs) ** 0.5
    return {"mean": m, "ci95": [m - half, m + half], "n": len(xs)}


def wave_requests(encoded: Sequence[list[int]], concurrency: int) -> list[list[int]]:
    """C prompts for one wave: the suite's prompts in turn, repeated as needed."""
    return [list(encoded[i % len(encoded)]) for i in range(concurrency)]


def load(server: Server, encoded: Sequence[list[int]], *, concurrency: int, max_tokens: int,
         stop_token_ids: Sequence[int] = (), waves: int = WAVES) -> dict[str, Any]:
    """``waves`` waves of ``concurrency`` concurrent requests: per wave its tokens, seconds,
    tokens/s and counters; over waves tau and tokens/s with intervals; every request's tokens
    (for the lossless check against the one-at-a-time run)."""
    batch = wave_requests(encoded, concurrency)
    rows, outputs = [], []
    def send(ids: list[int]) -> list[int]:
        return complete(server.base, SERVED_NAME, ids, max_tokens=max_tokens, stop_token_ids=stop_token_ids)

    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        list(pool.map(send, batch))  # untimed: a server's first batch at this size pays one-time costs
        for _ in range(waves):
            before = metrics(server.base)
            t0 = time.perf_counter()
            got = list(pool.map(send, batch))
            seconds = time.perf_counter() - t0
            counted = difference(metrics(server.base), before)
            tokens = sum(len(t) for t in got)
            rows.append({"seconds": seconds, "tokens": tokens, "tok_s": tokens / seconds if seconds > 0 else None,
                         "metrics": counted, "tau": tau(counted)})
            outputs.append(got)
    return {"concurrency": concurrency, "waves": rows, "outputs": outputs,
            "tau": mean_interval([r["tau"] for r in rows if r["tau"] is not None]),
            "tok_s": mean_interval([r["tok_s"] for r in rows if r["tok_s"] is not None])}


def compare_load(with_draft: Mapping[str, Any], without: Mapping[str, Any],
                 batch: Sequence[list[int]] | None = None) -> dict[str, Any]:
    """The speedup at this concurrency, wave by wave (paired), with its interval; and whether
    every output under load equals the plain server's output for the same request."""
    speedups = [a["tok_s"] / b["tok_s"] for a, b in zip(with_draft["waves"], without["waves"])
                if a["tok_s"] and b["tok_s"]]
    equal = [x == y for wa, wb in zip(with_draft["outputs"], without["outputs"]) for x, y in zip(wa, wb)]
    return {"speedup": mean_interval(speedups), "outputs_equal": sum(equal), "outputs": len(equal)}


__all__ = ["DEFAULT_CONCURRENCY", "MAX_CONCURRENCY", "WAVES", "compare_load", "load", "mean_interval",
           "wave_requests"]
