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
3. Compile (issue 32): templates of 1, 2 and 4 MiB of ``{{x}}``, which jinja2 needs 2.0, 3.9 and
   7.3 GiB to compile, are compiled in the limited child too: the peak of this process and of the
   child apart, and the wall time to the one line. Claim: this process stays at its benign peak,
   the child under its 256 MiB margin plus what it shares with this process.
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
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
print(line)
"""


def cost(n: int, rounds: int = 5) -> tuple[float, float]:
    import torch  # noqa: F401 - smoke-run has it loaded when it renders

    from dflash_ckpt.sources.chat_template import compile_template, render_here
    from dflash_ckpt.sources.template_process import render_all

    source = json.loads((TARGET / "tokenizer_config.json").read_text())["chat_template"]
    tpl = compile_template(source)
    ctx = [{"messages": [{"role": "user", "content": f"prompt {i}"}], "add_generation_prompt": True,
            "tools": None, "documents": None, "enable_thinking": False} for i in range(n)]
    here, child = [], []
    for _ in range(rounds):  # interleaved
        t = time.perf_counter()
        [render_here(tpl, c, "x") for c in ctx]
        here.append(time.perf_counter() - t)
        t = time.perf_counter()
        render_all(source, ctx, ["x"] * n)  # compiled in the child too
        child.append(time.perf_counter() - t)
    return statistics.median(here), statistics.median(child)


def peak(template: str, tmp: Path) -> tuple[int, int, float, str]:
    """``(this process's peak, the child's peak, wall seconds, the line)`` of one rendering."""
    folder = tmp / f"tok{abs(hash(template))}"
    folder.mkdir()
    shutil.copy(TARGET / "tokenizer.json", folder)
    cfg = json.loads((TARGET / "tokenizer_config.json").read_text())
    cfg["chat_template"] = template
    (folder / "tokenizer_config.json").write_text(json.dumps(cfg))
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", ONE, str(folder)], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300).stdout.split("\n", 1)
    wall = time.perf_counter() - start
    own, child = (int(v) * 1024 for v in out[0].split())
    return own, child, wall, out[1].strip()


def main() -> None:
    print(f"{'prompts':>8} {'in-process ms':>14} {'one child ms':>13}")
    for n in (1, 3, 100):
        a, b = cost(n)
        print(f"{n:>8} {a * 1000:>14.1f} {b * 1000:>13.1f}")
    with tempfile.TemporaryDirectory() as tmp:
        own, child, _, _ = peak(json.loads((TARGET / "tokenizer_config.json").read_text())["chat_template"], Path(tmp))
        base = max(own, child)
        print(f"\nbenign template: peak {base / 2**20:.0f} MiB (this process {own / 2**20:.0f}, child {child / 2**20:.0f})")
        print(f"{'template':<24} {'above benign MiB':>16}  line")
        for name, tpl in HOSTILE.items():
            own, child, _, line = peak(tpl, Path(tmp))
            print(f"{name:<24} {(max(own, child) - base) / 2**20:>16.0f}  {line[:110]}")
        print(f"\n{'compile':<12} {'this process MiB':>16} {'child MiB':>10} {'wall s':>7}  line")
        for mib in (1, 2, 4):
            own, child, wall, line = peak("{{x}}" * (mib * 2**20 // 5), Path(tmp))
            print(f"{mib} MiB{'':<7} {own / 2**20:>16.0f} {child / 2**20:>10.0f} {wall:>7.1f}  {line[:100]}")


if __name__ == "__main__":
    main()
