"""tests/script_imports.py, which tests/test_house.py imports every fixtures/ and benchmarks/
script with: a script whose optional extra is missing is skipped naming the extra; any other
missing module is still a failure. A missing ``transformers`` is played by a meta-path blocker in
a child process, so the installed one stays untouched here."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from script_imports import ROOT, import_script, optional_packages

#: Runs in a child: transformers cannot be imported, then one script is imported as the house
#: test does; prints SKIPPED and the reason, or OK.
BLOCKED = """
import sys
from pathlib import Path

class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "transformers":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Blocker())
root = Path(sys.argv[1])
sys.path[:0] = [str(root / "tests"), str(root / "fixtures"), str(Path(sys.argv[2]).parent)]
import pytest
from script_imports import import_script
try:
    import_script(Path(sys.argv[2]))
except pytest.skip.Exception as skip:
    print("SKIPPED", skip.msg)
else:
    print("OK")
"""


def _blocked(script: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", BLOCKED, str(ROOT), str(script)], capture_output=True, text=True,
                          timeout=300)


def test_extras_are_read_from_pyproject() -> None:
    extras = optional_packages()
    assert extras["transformers"] == "hf" and extras["torch"] == "run" and extras["vllm"] == "vllm"
    assert "dflash_ckpt" not in extras


def test_a_script_needing_transformers_is_skipped_naming_the_hf_extra(tmp_path: Path) -> None:
    script = tmp_path / "needs_hf.py"
    script.write_text("import json\nimport transformers\n")
    proc = _blocked(script)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("SKIPPED") and "'hf' extra" in proc.stdout and "transformers" in proc.stdout, proc.stdout


@pytest.mark.slow
def test_bench_backends_without_transformers_is_skipped_not_failed() -> None:
    """The case of issue 25: the transformers backend's module imports transformers at the top."""
    pytest.importorskip("torch")
    proc = _blocked(ROOT / "benchmarks" / "bench_backends.py")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("SKIPPED benchmarks/bench_backends.py needs the 'hf' extra"), proc.stdout


@pytest.mark.parametrize("line, missing", [
    ("import dflash_ckpt.no_such_module_i25", "dflash_ckpt.no_such_module_i25"),  # the project's own
    ("import no_such_package_i25", "no_such_package_i25"),  # no extra installs it
    ("import jinja2.no_such_module_i25", "jinja2.no_such_module_i25"),  # an installed extra's package
])
def test_any_other_missing_module_still_fails(tmp_path: Path, line: str, missing: str) -> None:
    pytest.importorskip("jinja2")
    script = tmp_path / "broken.py"
    script.write_text(line + "\n")
    with pytest.raises(ModuleNotFoundError) as err:
        import_script(script)
    assert err.value.name == missing

