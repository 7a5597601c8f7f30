"""Every command's work is a ``run_<command>`` function over its options dataclass, whose fields are
the CLI's long options (``run/options.py``), which prints nothing, never exits, and returns a result with ``ok``, ``exit_code``, ``findings``
and ``to_dict()`` equal to the command's ``--json`` document (the shape issue 20's API builds on)."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import typer

from dflash_ckpt.cli import app
from dflash_ckpt.errors import DFlashCkptError

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "fixtures" / "tiny-pair"
#: Options that choose how a result is shown, not what is run.
RENDERING = {"json", "output_format", "annotations", "quiet", "show_text", "report", "from_file", "version", "help", "install_completion", "show_completion"}


def option_classes() -> dict[str, type]:
    from dflash_ckpt.run.inspect_options import InspectOptions
    from dflash_ckpt.run.options import NormalizeOptions, ProbeOptions, SmokeOptions

    return {"inspect": InspectOptions, "normalize": NormalizeOptions, "smoke-run": SmokeOptions, "probe-taps": ProbeOptions}


def run_inspect(*args: Any, **kw: Any) -> Any:
    from dflash_ckpt.run.inspect import run_inspect
    from dflash_ckpt.run.inspect_options import InspectOptions

    return run_inspect(InspectOptions(*args, **kw))


def run_normalize(*args: Any, **kw: Any) -> Any:
    from dflash_ckpt.run.normalize import run_normalize
    from dflash_ckpt.run.options import NormalizeOptions

    return run_normalize(NormalizeOptions(*args, **kw))


def run_smoke_run(*args: Any, **kw: Any) -> Any:
    from dflash_ckpt.run.options import SmokeOptions
    from dflash_ckpt.run.smoke import run_smoke_run

    return run_smoke_run(SmokeOptions(*args, **kw))


def run_probe_taps(*args: Any, **kw: Any) -> Any:
    from dflash_ckpt.run.options import ProbeOptions
    from dflash_ckpt.run.probe import run_probe_taps

    return run_probe_taps(ProbeOptions(*args, **kw))


@pytest.mark.parametrize("command", ["inspect", "normalize", "smoke-run", "probe-taps"])
def test_keywords_are_the_long_options(command: str) -> None:
    click_cmd = typer.main.get_command(app).commands[command]  # type: ignore[attr-defined]
    longs = {opt[2:].replace("-", "_") for p in click_cmd.params for opt in p.opts if opt.startswith("--")}
    fields = {f.name for f in dataclasses.fields(option_classes()[command])}
    missing = sorted(longs - RENDERING - fields)
    assert missing == [], f"the options of {command} lack fields {missing}"


def test_run_inspect_is_the_json_document(cli) -> None:
    res = run_inspect(str(TINY / "draft"), str(TINY / "target"))
    doc = cli("inspect", str(TINY / "draft"), "--target", str(TINY / "target"), "--json").json()
    assert res.ok and res.exit_code == 0 and res.envelope() == doc and res.to_dict() == doc["results"][0]
    strict = run_inspect([str(TINY / "draft"), str(TINY / "draft-top-level")], strict=True, select=["DF1"])
    assert {f.code[:3] for f in strict.findings} <= {"DF1"} and strict.exit_code == max(
        r.exit_code(True) for r in strict.results)
    with pytest.raises(DFlashCkptError) as err:
        run_inspect(str(TINY / "draft"), select=["XX9"])
    assert err.value.exit_code == 2


def test_run_normalize_writes_and_raises_like_the_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    draft = tmp_path / "draft"
    shutil.copytree(TINY / "draft-top-level", draft)
    checked = run_normalize(str(draft), check=True)
    assert not checked.ok and checked.exit_code == 1 and checked.to_dict()["changed"] is True
    assert checked.envelope()["results"] == [checked.to_dict()] and checked.envelope()["exit_code"] == 1
    done = run_normalize(str(draft), tmp_path / "out")
    assert done.ok and done.to_dict()["written"] and json.loads((tmp_path / "out" / "config.json").read_text())["dflash_config"]
    with pytest.raises(DFlashCkptError) as err:
        run_normalize(str(draft))  # neither OUT nor a mode
    assert err.value.exit_code == 2
    assert capsys.readouterr().out == ""  # nothing printed


def test_run_smoke_run_returns_what_json_prints(cli, capsys: pytest.CaptureFixture[str]) -> None:
    args = dict(prompt=["hi"], max_new_tokens=6, draft_dtype="float32", target_dtype="float32", device="cpu",
                min_acceptance=0.0)
    res = run_smoke_run(str(TINY / "draft"), str(TINY / "target"), **args)
    assert capsys.readouterr().out == ""
    assert res.ok and res.findings == [] and res.to_dict()["settings"]["block_size"] == res.block_size
    doc = res.to_dict()
    assert res.envelope()["command"] == "smoke-run" and res.envelope()["exit_code"] == 0
    assert doc["prompts"][0]["lossless"]["status"] == "identical"
    with pytest.raises(DFlashCkptError) as err:
        run_smoke_run(str(TINY / "draft"), str(TINY / "target"), backend="tensorrt")
    assert err.value.exit_code == 2 and "--backend 'tensorrt'" in err.value.message


@pytest.mark.slow
def test_a_run_reads_each_header_and_config_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The plan reuses what the checks read: the draft's safetensors headers once per smoke-run
    (as one inventory reads them), the target's config.json once per probe-taps."""
    from dflash_ckpt.sources.local import LocalSource
    from dflash_ckpt.sources.weights import load_inventory

    reads: list[tuple[str, str]] = []
    real = LocalSource.read

    def spy(self: LocalSource, name: str, *a: Any, **k: Any) -> bytes:
        reads.append((self.local_dir.name, name))
        return real(self, name, *a, **k)

    monkeypatch.setattr(LocalSource, "read", spy)
    load_inventory(LocalSource(TINY / "draft"))
    one_inventory = sorted(reads)
    assert one_inventory and all(n.endswith(".safetensors") for _, n in one_inventory)
    reads.clear()
    fast = dict(prompt=["hi"], max_new_tokens=4, draft_dtype="float32", target_dtype="float32", device="cpu")
    assert run_smoke_run(str(TINY / "draft"), str(TINY / "target"), min_acceptance=0.0, **fast).ok
    assert sorted(r for r in reads if r[0] == "draft" and r[1].endswith(".safetensors")) == one_inventory
    reads.clear()
    run_probe_taps(str(TINY / "draft"), str(TINY / "target"), budget=2, **fast)
    assert [r for r in reads if r == ("target", "config.json")] == [("target", "config.json")]
    assert sorted(r for r in reads if r[0] == "draft" and r[1].endswith(".safetensors")) == one_inventory


def test_the_command_list_is_one_table() -> None:
    """``cli.COMMANDS`` is every command, in ``--help``'s order, and ``_core`` holds its marked ones."""
    from dflash_ckpt.cli import _CORE_COMMANDS, COMMANDS, _core

    assert list(typer.main.get_command(app).commands) == list(COMMANDS)  # type: ignore[attr-defined]
    assert list(typer.main.get_command(_core).commands) == list(_CORE_COMMANDS)  # type: ignore[attr-defined]
