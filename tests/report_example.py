"""The example report in docs/ (docs/example-report.md and its chart), as the real command writes it.

``python tests/report_example.py`` (in the repo root, with the report extra) rewrites both from
``EXAMPLE``; ``tests/test_report.py`` reruns the command and compares, with what differs from one
machine to the next masked: every figure (tau, intervals, speeds, shares, counts), the
histogram's bars, the commit, the rows of "Where it ran", and the speed line (withheld, DF406, on
a loaded machine).
"""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REPORT = ROOT / "docs" / "example-report.md"
#: The command that wrote the example, run in the repo root (its line is part of the report).
EXAMPLE = f"smoke-run fixtures/tiny-pair/draft --target fixtures/tiny-pair/target --device cpu --report {REPORT.relative_to(ROOT)}"
#: The rows of "Where it ran" that are the machine's, not the command's.
MACHINE_ROWS = ("CPU", "numeric path", "torch", "GPU", "Python", "threads")


def masked(report: str) -> str:
    """``report`` with what varies by machine masked (``readme_examples.shape`` for the figures)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from readme_examples import shape

    text = re.sub(r"commit `[0-9a-f]{40}( \+ changes)?`", "commit `COMMIT`", report)
    text = re.sub(rf"^\| ({'|'.join(map(re.escape, MACHINE_ROWS))}) \| .* \|$", r"| \1 | MACHINE |", text, flags=re.M)
    # a loaded machine withholds a speedup above tau (DF406): the speed line and that finding are
    # the machine's too
    text = re.sub(r"^(\*\*Speedup .*|Speedup withheld: .*)$", "SPEED", text, flags=re.M)
    text = re.sub(r"^\| `DF406` \|.*\n", "", text, flags=re.M)
    # the acceptance tables' bars are the counts drawn, which move with the CPU's numeric path
    text = re.sub(r"█+", "█", text)
    return shape(text)


def argv() -> list[str]:
    return shlex.split(EXAMPLE)


if __name__ == "__main__":
    import os

    os.chdir(ROOT)
    sys.path.insert(0, str(ROOT))
    from dflash_ckpt.cli import run

    code = run(argv())
    print(f"exit {code}; wrote {REPORT.relative_to(ROOT)} and its chart", file=sys.stderr)
