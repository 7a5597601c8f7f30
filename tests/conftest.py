"""Shared test helpers: the fixture tree (built once per session) and two ways to run the CLI."""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Iterator
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "fixtures"))

import make_fixtures  # noqa: E402


def cpu_numeric_path() -> str:
    """Which way this machine's bf16 products run (``prepack.cpu_linear_path``'s names), asked as
    smoke-run asks: oneDNN's packed path where it packs bf16, else the AVX2 kernel where it builds
    and checks, else torch's own path. Figures that move with it (near ties, tau on the tiny pair)
    are judged per path; the CI log names the one it ran on."""
    try:
        from dflash_ckpt.runtime import cpu_kernel
        from dflash_ckpt.runtime.prepack import onednn_packs_bf16
    except ImportError:  # no torch: only the torch-free tests can run
        return "none (torch is not installed)"
    import torch

    if torch.backends.mkldnn.is_available() and torch.backends.mkldnn.enabled and onednn_packs_bf16():
        return "onednn-packed"
    return "avx2-kernel" if cpu_kernel.kernel() is not None else f"torch ({cpu_kernel.why_not()})"


def pytest_report_header(config: pytest.Config) -> list[str]:
    """The CPU path in the run's header, so a log says which path its figures came from."""
    flags = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                flags = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return [f"dflash-ckpt bf16 CPU path: {cpu_numeric_path()}  (CPU: {flags or 'unknown'}; "
            f"ONEDNN_MAX_CPU_ISA={os.environ.get('ONEDNN_MAX_CPU_ISA', '')!r}, "
            f"DFLASH_CKPT_NO_KERNEL={os.environ.get('DFLASH_CKPT_NO_KERNEL', '')!r})"]


@dataclass
class CliResult:
    code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)

    def result(self) -> Any:
        """``--json`` of one draft or pair: its result (every command prints the same envelope)."""
        doc = self.json()
        assert doc["schema_version"] == 2 and len(doc["results"]) == 1, doc
        return doc["results"][0]

    def merged(self) -> Any:
        """The envelope's fields and its one result's in one dict, for tests that read both
        (``ok`` beside a normalize result's ``changes``); the shape itself is pinned by
        tests/test_json_schema.py."""
        doc = self.json()
        assert doc["schema_version"] == 2 and len(doc["results"]) <= 1, doc
        return {**{k: v for k, v in doc.items() if k != "results"}, **(doc["results"][0] if doc["results"] else {})}


@pytest.fixture(scope="session")
def fixtures_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every fixture of fixtures/make_fixtures.py, built into a temporary folder."""
    return make_fixtures.build_all(tmp_path_factory.mktemp("fixtures") / "build")


@pytest.fixture(scope="session")
def published() -> dict[str, Any]:
    """fixtures/published/index.json: published draft name -> its target and dimensions."""
    return make_fixtures.published_index()


def run_cli(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None, timeout: float = 600) -> CliResult:
    """Run ``python -m dflash_ckpt ARGS`` in a fresh process, as a user would."""
    full_env = {**os.environ, "COLUMNS": "200", **(env or {})}
    proc = subprocess.run(
        [sys.executable, "-m", "dflash_ckpt", *args],
        capture_output=True, text=True, env=full_env, cwd=cwd, timeout=timeout,
    )
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch):
    """Run the CLI in this process (fast; lets a test monkeypatch the file system)."""
    from dflash_ckpt.cli import run

    monkeypatch.setenv("COLUMNS", "200")

    def invoke(*args: str) -> CliResult:
        capsys.readouterr()
        code = run(list(args))
        out = capsys.readouterr()
        return CliResult(code, out.out, out.err)

    return invoke


@pytest.fixture(scope="module")
def one_thread() -> Iterator[None]:
    """Tiny matrices run fastest single-threaded (and the CI machine has two shared cores)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def hub_server(fixtures_root: Path) -> Iterator[Any]:
    """A loopback Hub serving the fixture repos (tests/hub_server.py), for one test module."""
    from hub_server import HubServer, populate

    srv = HubServer()
    populate(srv, fixtures_root)
    yield srv
    srv.close()


@pytest.fixture
def hub(hub_server: Any) -> Iterator[Any]:
    """The loopback Hub with its request log and scripted failures cleared around each test."""
    hub_server.reset()
    yield hub_server
    hub_server.reset()


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A private HF_HOME for one test."""
    return tmp_path / "hf"


#: The one shape of every error line (ruff's): ``PATH: CODE severity: message``.
ERROR_LINE = re.compile(r"^(?P<path>\S.*?): (?P<code>DF\d{3}) (?P<severity>error|warning|info): (?P<message>.*)$")


def error_line(res: CliResult) -> str:
    """The command's own error, the last line on stderr (failed checks and retry notes may come
    first); returned with its old ``path: message`` form after it, so a needle may name either."""
    lines = res.stderr.strip().splitlines()
    assert lines, (res.code, res.stdout)
    m = ERROR_LINE.match(lines[-1])
    assert m is not None, lines[-1]
    return f"{lines[-1]}\n{m['path']}: {m['message']}"


def error_lines(res: CliResult) -> list[str]:
    """Every ``PATH: CODE severity: message`` line on stderr."""
    return [line for line in res.stderr.splitlines() if ERROR_LINE.match(line)]


def one_error_line(res: CliResult | subprocess.CompletedProcess[str], *needles: str, exit_code: int = 2,
                   code: str | None = None, path: str | None = None, alone: bool = True) -> str:
    """The one ``PATH: DFxxx error: message`` line a refused command prints, holding every needle.

    One helper for every "one coded error line" test, so the bar is the same everywhere: no
    traceback, the exit code (2, a refusal, unless given), exactly one coded line on stderr and
    that one last, its DF code and path where given. With ``alone`` (the default) stderr holds
    nothing else; ``alone=False`` lets notes come first (the Hub's retry lines). A needle may name
    the line or its old ``path: message`` form. Takes a ``CliResult`` or a finished subprocess;
    returns the line."""
    rc = res.returncode if isinstance(res, subprocess.CompletedProcess) else res.code
    lines = res.stderr.strip().splitlines()
    assert "Traceback" not in res.stderr and "Traceback" not in (res.stdout or ""), res.stderr[-3000:]
    assert rc == exit_code, (rc, (res.stdout or "")[-3000:], res.stderr[-3000:])
    coded = [line for line in lines if ERROR_LINE.match(line)]
    assert len(coded) == 1 and lines[-1] == coded[0], res.stderr[-3000:]
    assert not alone or len(lines) == 1, res.stderr[-3000:]
    line = coded[0]
    m = ERROR_LINE.match(line)
    assert m is not None and m["severity"] == "error", line
    assert code is None or m["code"] == code, (code, line)
    assert path is None or m["path"] == path, (path, line)
    text = f"{line}\n{m['path']}: {m['message']}"
    for needle in needles:
        assert needle in text, (needle, line)
    return line


def config(folder: Path) -> dict[str, Any]:
    """A checkpoint folder's config.json, parsed."""
    return json.loads((folder / "config.json").read_text())


def header(path: Path) -> dict[str, Any]:
    """The safetensors header (8-byte little-endian length, then JSON), read by hand."""
    with open(path, "rb") as fh:
        n = int.from_bytes(fh.read(8), "little")
        head = json.loads(fh.read(n))
    head.pop("__metadata__", None)
    return head


def no_traceback(res: CliResult) -> None:
    """Errors are one line, never a Python traceback."""
    assert "Traceback" not in res.stderr and "Traceback" not in res.stdout, res.stderr


def smoke(cli: Any, pair: tuple[str, str], *args: str) -> CliResult:
    """``smoke-run DRAFT --target TARGET ARGS`` in process (the ``cli`` fixture), no traceback."""
    res = cli("smoke-run", pair[0], "--target", pair[1], *args)
    no_traceback(res)
    return res


@functools.lru_cache(maxsize=None)
def cached_cli(*args: str) -> CliResult:
    """One CLI run per distinct command line for the whole session (smoke-runs take seconds);
    never a traceback."""
    res = run_cli(*args)
    no_traceback(res)
    return res


def smoke_json(draft: Path, target: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    """``smoke-run DRAFT --target TARGET --json``: its exit code (a verdict: 0 or 1) and result."""
    pytest.importorskip("torch")
    pytest.importorskip("tokenizers")
    res = cached_cli("smoke-run", str(draft), "--target", str(target), "--json", *extra)
    assert res.code in (0, 1), res.stderr
    return res.code, res.merged()


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A tiny random fp32 target and draft written to disk (tests/tiny_models.py)."""
    import tiny_models as tm

    return tm.make_pair(tmp_path_factory.mktemp("pair"))


@pytest.fixture(scope="module")
def fp32(pair: tuple[Path, Path]):
    """``pair`` loaded into the native runtime, with a 512-position cache each."""
    import tiny_models as tm

    target, draft = tm.load_runtime_pair(*pair)
    return target, draft, target.new_cache(512), draft.new_cache(512)
