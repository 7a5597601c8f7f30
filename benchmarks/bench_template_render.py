#!/usr/bin/env python3
"""Chat templates rendered in a child process (issue 18): what it costs, and what it bounds.

    python benchmarks/bench_template_render.py

1. Cost: smoke-run renders every prompt in one forked child under RLIMIT_AS / RLIMIT_CPU. This
   times N renderings of the tiny pair's template in this process (``render_here``) against the
   same N in one child (``render_all``), side by side, in a process that imported torch (as
   smoke-run has by then: the fork copies its page tables).
2. Bound: each hostile template of issue 18 is rendered in a fresh process; its peak RSS (the
   process and its child) is printed above a benign template's, with the one line it ends in.
   Claim (README, Limits): under 300 MiB above the benign rendering, exit by one DF002 line.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
TARGET = ROOT / "fixtures" / "tiny-pair" / "target"

HOSTILE = {
    "format-filter-width": '{{ "%999999999d"|format(1) }}',
    "str-format-nested-width": '{{ ("{0:>{1}}"*200).format("a", 4000000) }}',
    "replace-doubling": '{% set ns = namespace(s="ab") %}{% for i in range(40) %}{% set ns.s = ns.s|replace("a", "aa") %}{% endfor %}{{ ns.s }}',
    "join": '{% set s = "ab"*1000 %}{{ (s*2000)|join(s) }}',
    "tilde-doubling": '{% set ns = namespace(s="x") %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}',
    "indent": '{{ ("a\\n"*1000)|indent(4000000) }}',
    "percent-star": '{{ "%*d" % (999999999, 1) }}',
}
ONE = """
import resource, sys
from pathlib import Path
from dflash_ckpt.errors import InputError
from dflash_ckpt.sources.prompts import Prompt, PromptEncoder
try:
    PromptEncoder(Path(sys.argv[1])).encode(Prompt("p", "hello"))
    line = "rendered"
except InputError as err:
    line = err.line()
peak = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
print(peak)
print(line)
"""


def cost(n: int, rounds: int = 5) -> tuple[float, float]:
    import torch  # noqa: F401 - smoke-run has it loaded when it renders

    from dflash_ckpt.sources.chat_template import compile_template, render_all, render_here

    tpl = compile_template(json.loads((TARGET / "tokenizer_config.json").read_text())["chat_template"])
    ctx = [{"messages": [{"role": "user", "content": f"prompt {i}"}], "add_generation_prompt": True,
            "tools": None, "documents": None, "enable_thinking": False} for i in range(n)]
    here, child = [], []
    for _ in range(rounds):  # interleaved
        t = time.perf_counter()
        [render_here(tpl, c, "x") for c in ctx]
        here.append(time.perf_counter() - t)
        t = time.perf_counter()
        render_all(tpl, ctx, ["x"] * n)
        child.append(time.perf_counter() - t)
    return statistics.median(here), statistics.median(child)


def peak(template: str, tmp: Path) -> tuple[int, str]:
    folder = tmp / f"tok{abs(hash(template))}"
    folder.mkdir()
    shutil.copy(TARGET / "tokenizer.json", folder)
    cfg = json.loads((TARGET / "tokenizer_config.json").read_text())
    cfg["chat_template"] = template
    (folder / "tokenizer_config.json").write_text(json.dumps(cfg))
    out = subprocess.run([sys.executable, "-c", ONE, str(folder)], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300).stdout.split("\n", 1)
    return int(out[0]) * 1024, out[1].strip()


def main() -> None:
    print(f"{'prompts':>8} {'in-process ms':>14} {'one child ms':>13}")
    for n in (1, 3, 100):
        a, b = cost(n)
        print(f"{n:>8} {a * 1000:>14.1f} {b * 1000:>13.1f}")
    with tempfile.TemporaryDirectory() as tmp:
        base, _ = peak(json.loads((TARGET / "tokenizer_config.json").read_text())["chat_template"], Path(tmp))
        print(f"\nbenign template: peak {base / 2**20:.0f} MiB")
        print(f"{'template':<24} {'above benign MiB':>16}  line")
        for name, tpl in HOSTILE.items():
            p, line = peak(tpl, Path(tmp))
            print(f"{name:<24} {(p - base) / 2**20:>16.0f}  {line[:110]}")


if __name__ == "__main__":
    main()
