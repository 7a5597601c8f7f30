"""The engines' own config parsers, as judges of the reader rows (tests/test_engine_parser_judges.py).

SGLang, lmdeploy and exllamav3 are not installed here (SGLang and lmdeploy need CUDA, exllamav3
compiles its kernels); their parse functions are plain Python, so the wheel of the release each
reader row was read against is fetched once with ``pip download --no-deps`` into a cache folder
(``DFLASH_CKPT_ENGINE_WHEELS``, default ``~/.cache/dflash-ckpt/engine-wheels``: outside the
repository, so nothing of theirs is vendored and a second run is offline), its ``.py`` files
unpacked beside it, and tests/engine_parser_child.py runs the parser from them in a child
process with a deadline. vLLM's parser is the installed one (``DFLASH_CKPT_VLLM_PYTHON``, the
env the ``vllm`` tests use). Why a download and not a vendored copy: their code may be run but
not copied into ours, and the registry is what CI reaches anyway (.ci/run installs from it);
offline with an empty cache the judges skip, saying so.

Every judgment names its judge: the wheel's file name and sha256 and the file:function run.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any, NamedTuple

HERE = Path(__file__).resolve().parent
CHILD = HERE / "engine_parser_child.py"
CACHE_ENV = "DFLASH_CKPT_ENGINE_WHEELS"
DOWNLOAD_TIMEOUT_S = 600
PARSE_TIMEOUT_S = 300


class Wheel(NamedTuple):
    """One engine release whose parser judges its reader row."""

    dist: str
    version: str
    #: The file and function run (what a judgment cites).
    parser: str


WHEELS: dict[str, Wheel] = {
    "sglang": Wheel("sglang", "0.5.23", "sglang/srt/speculative/dflash_utils.py:parse_dflash_draft_config"),
    "lmdeploy": Wheel("lmdeploy", "0.18.0", "lmdeploy/pytorch/spec_decode/dflash_utils.py:parse_dflash_config"),
    "exllamav3": Wheel("exllamav3", "1.6.5", "exllamav3/architecture/dflash.py:DFlashConfig (dflash2.py, dflash_laguna.py)"),
}
VLLM_PARSER = ("vllm/transformers_utils/config.py:get_config (speculators adapter), v1/worker/gpu/spec_decode/eagle/"
               "eagle3_utils.py:get_eagle3_aux_layers_from_config, v1/spec_decode/llm_base_proposer.py:"
               "_init_parallel_drafting_params, model_executor/models/qwen3_dflash.py:_dflash_layer_causal")


class Judge(NamedTuple):
    """Where a judge's code came from: ``src`` for the child (``-``: the installed vLLM)."""

    engine: str
    python: str
    src: str
    name: str

    def run(self, drafts: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """The parser's resolution of every draft (``{"config": ..., "target_layers": ...}``)."""
        with tempfile.TemporaryDirectory(prefix="dflash-ckpt-judge-") as tmp:
            job, out = Path(tmp) / "job.json", Path(tmp) / "out.json"
            job.write_text(json.dumps(drafts), encoding="utf-8")
            proc = subprocess.run([self.python, str(CHILD), self.engine, self.src, str(job), str(out)],
                                  capture_output=True, text=True, timeout=PARSE_TIMEOUT_S, cwd=tmp)
            if proc.returncode != 0 or not out.exists():
                raise AssertionError(f"{self.name}: the parser child failed ({proc.returncode}): {proc.stderr[-2000:]}")
            return json.loads(out.read_text(encoding="utf-8"))


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "dflash-ckpt" / "engine-wheels")


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fetch(engine: str) -> tuple[Judge | None, str]:
    """The judge of ``engine`` from its wheel (downloaded once), or ``None`` and why not."""
    w = WHEELS[engine]
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    found = sorted(cache.glob(f"{w.dist}-{w.version}-*.whl"))
    if not found:
        # into a folder of its own, then renamed: a concurrent run never sees half a wheel
        with tempfile.TemporaryDirectory(dir=cache, prefix=".download-") as tmp:
            try:
                proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
                                       "-q", f"{w.dist}=={w.version}", "-d", tmp],
                                      capture_output=True, text=True, timeout=DOWNLOAD_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                return None, f"pip download {w.dist}=={w.version} took over {DOWNLOAD_TIMEOUT_S} s"
            got = sorted(Path(tmp).glob(f"{w.dist}-{w.version}-*.whl"))
            if proc.returncode != 0 or not got:
                last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
                return None, f"pip download {w.dist}=={w.version} into {cache} failed (offline?): {last}"
            os.replace(got[0], cache / got[0].name)
        found = sorted(cache.glob(f"{w.dist}-{w.version}-*.whl"))
    wheel = found[0]
    src = cache / "src" / wheel.stem
    done = src / ".unpacked"
    if not done.exists():
        with zipfile.ZipFile(wheel) as z:
            z.extractall(src, [n for n in z.namelist() if n.startswith(f"{w.dist}/") and n.endswith(".py")])
        done.write_text(sha256(wheel), encoding="utf-8")  # last: a folder without it is unpacked again
    return (Judge(engine, sys.executable, str(src),
                  f"{wheel.name} (sha256 {done.read_text(encoding='utf-8')[:16]}) {w.parser}"), "")


SPECULATORS_ENV = "DFLASH_CKPT_SPECULATORS_PYTHON"
SPECULATORS_PARSER = ("speculators/convert/dflash/converter.py:DFlashConverter._build_config (z-lab drafts), "
                      "speculators/models:SpeculatorModelConfig.from_pretrained (its own format)")


def speculators_judge() -> tuple[Judge | None, str]:
    """speculators as installed in ``DFLASH_CKPT_SPECULATORS_PYTHON`` (else this python), or
    ``None`` and why not: it needs pydantic and its own pins, so it lives in an env of its own,
    as vLLM does (its wheel alone cannot run: its config classes are pydantic models)."""
    python = os.environ.get(SPECULATORS_ENV) or sys.executable
    try:
        proc = subprocess.run([python, "-c", "import importlib.metadata as m; print(m.version('speculators'))"],
                              capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"{python} cannot be asked for speculators: {exc}"
    if proc.returncode != 0:
        return None, f"{python} has no speculators (set {SPECULATORS_ENV} to a python with speculators 0.9.0)"
    return Judge("speculators", python, "-", f"speculators {proc.stdout.strip()} at {python}: {SPECULATORS_PARSER}"), ""


def vllm_judge() -> tuple[Judge | None, str]:
    """The installed vLLM's parser (the ``vllm`` tests' python), or ``None`` and why not."""
    from dflash_ckpt.engine_runners.vllm_facts import engine_python, read_facts

    python = engine_python()
    facts = read_facts(python)
    if not facts.installed:
        return None, f"{python} imports no vLLM ({facts.error or 'not installed'})"
    return Judge("vllm", python, "-", f"vLLM {facts.version} at {python}: {VLLM_PARSER}"), ""
