"""The Python API does what the README's examples do, using only ``dflash_ckpt.<name>``: inspect a
fixture draft, normalize into a temporary folder, smoke-run the tiny pair, probe its taps; each
``.to_dict()`` is the CLI's ``--json`` result for the same arguments (timing figures aside), each
``.envelope()`` its whole document; nothing is printed; errors raise ``DFlashCkptError``."""

from __future__ import annotations

import inspect
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import dflash_ckpt
from conftest import ROOT

TINY = ROOT / "fixtures" / "tiny-pair"
RUN = dict(prompt=["hi"], max_new_tokens=8, device="cpu", draft_dtype="float32", target_dtype="float32")
RUN_ARGS = ["-p", "hi", "-n", "8", "--device", "cpu", "--draft-dtype", "float32", "--target-dtype", "float32"]


def untimed(value: Any) -> Any:
    """``value`` without wall-clock figures (seconds, tokens per second, speedups, timing windows)."""
    if isinstance(value, dict):
        return {k: untimed(v) for k, v in value.items()
                if not (k.endswith("_s") or "speedup" in k or k in ("timing", "seconds"))}
    if isinstance(value, list):
        return [untimed(v) for v in value]
    return value


def cli_doc(cli: Any, *args: str) -> dict[str, Any]:
    res = cli(*args, "--json")
    return json.loads(res.stdout)


def test_import_is_light_and_public() -> None:
    code = ("import sys, dflash_ckpt; names = dflash_ckpt.__all__; "
            "heavy = [m for m in ('torch', 'typer', 'rich', 'transformers') if m in sys.modules]; "
            "assert not heavy, heavy; "
            "assert all(callable(getattr(dflash_ckpt, n)) for n in names if n != '__version__'); "
            "heavy = [m for m in ('torch', 'typer', 'rich') if m in sys.modules]; assert not heavy, heavy; "
            "print(sorted(names))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(sorted(["DFlashCkptError", "__version__", "inspect", "normalize", "probe_taps", "smoke_run"]))
    for name in ("inspect", "normalize", "smoke_run", "probe_taps"):
        assert getattr(dflash_ckpt, name).__doc__, name
    with pytest.raises(AttributeError):
        dflash_ckpt.no_such_function  # noqa: B018


def test_normalize_is_the_api_function_and_help_shows_it() -> None:
    """``dflash_ckpt.normalize`` is ``api.normalize`` itself, whatever else is imported (the
    package that plans and writes is ``dflash_ckpt.canonical``, so no subpackage takes the name),
    and ``help()`` shows its signature and docstring."""
    import pydoc

    import dflash_ckpt.api
    import dflash_ckpt.canonical.run
    import dflash_ckpt.run.normalize  # noqa: F401 - imports every canonical module it needs

    assert dflash_ckpt.normalize is dflash_ckpt.api.normalize
    assert inspect.isfunction(dflash_ckpt.normalize)
    text = pydoc.render_doc(dflash_ckpt.normalize, renderer=pydoc.plaintext)
    assert "Rewrite a draft's config.json into the canonical nested form" in text
    assert "function normalize in module dflash_ckpt.api" in text and "in_place" in text and "dry_run" in text


def test_inspect_is_the_cli_document(cli, capsys: pytest.CaptureFixture[str]) -> None:
    res = dflash_ckpt.inspect(TINY / "draft", target=TINY / "target")
    assert capsys.readouterr().out == ""
    doc = cli_doc(cli, "inspect", str(TINY / "draft"), "--target", str(TINY / "target"))
    assert res.ok and res.exit_code == 0 and res.to_dict() == doc["results"][0] and res.envelope() == doc
    strict = dflash_ckpt.inspect(str(TINY / "draft-top-level"), strict=True, select=["DF1"])
    sdoc = cli_doc(cli, "inspect", str(TINY / "draft-top-level"), "--strict", "--select", "DF1")
    assert strict.to_dict() == sdoc["results"][0] and strict.exit_code == sdoc["exit_code"]
    assert [f.code for f in strict.findings] == [f["code"] for f in sdoc["results"][0]["findings"]]


def test_normalize_into_a_folder(cli, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    draft = tmp_path / "draft"
    shutil.copytree(TINY / "draft-top-level", draft)
    checked = dflash_ckpt.normalize(draft, check=True)
    assert not checked.ok and checked.exit_code == 1
    assert checked.to_dict() == cli_doc(cli, "normalize", str(draft), "--check")["results"][0]
    capsys.readouterr()
    done = dflash_ckpt.normalize(str(draft), tmp_path / "api-out")
    assert capsys.readouterr().out == ""
    doc = cli_doc(cli, "normalize", str(draft), str(tmp_path / "cli-out"))
    assert done.ok and done.envelope()["exit_code"] == doc["exit_code"] == 0
    ours = json.loads(json.dumps(done.to_dict()).replace(str(tmp_path / "api-out"), "OUT"))
    theirs = json.loads(json.dumps(doc["results"][0]).replace(str(tmp_path / "cli-out"), "OUT"))
    assert ours == theirs and ours["written"] is True
    assert (tmp_path / "api-out" / "config.json").read_bytes() == (tmp_path / "cli-out" / "config.json").read_bytes()
    assert dflash_ckpt.normalize(tmp_path / "api-out", check=True).ok


def test_errors_raise_one_exception_type(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(dflash_ckpt.DFlashCkptError) as err:
        dflash_ckpt.inspect(TINY / "draft", target=tmp_path / "nowhere")
    assert (err.value.code, err.value.exit_code) == ("DF001", 2) and "no such folder" in err.value.message
    with pytest.raises(dflash_ckpt.DFlashCkptError) as err:
        dflash_ckpt.inspect(TINY / "draft", select=["XX9"])
    assert (err.value.code, err.value.exit_code) == ("DF004", 2)
    with pytest.raises(dflash_ckpt.DFlashCkptError) as err:
        dflash_ckpt.normalize(TINY / "draft")  # neither OUT nor a mode
    assert (err.value.code, err.value.exit_code) == ("DF004", 2) and "give OUT" in err.value.message
    refused = tmp_path / "refused"
    with pytest.raises(dflash_ckpt.DFlashCkptError) as err:
        dflash_ckpt.normalize(ROOT / "fixtures" / "tiny-pair" / "draft", refused, block_size=1)
    assert err.value.exit_code == 2 and err.value.code.startswith("DF") and not refused.exists()
    with pytest.raises(dflash_ckpt.DFlashCkptError) as err:  # an unknown keyword is a usage error too
        dflash_ckpt.inspect(TINY / "draft", no_such_option=True)
    assert (err.value.code, err.value.exit_code) == ("DF010", 2) and "no_such_option" in err.value.message
    unreadable = dflash_ckpt.inspect(tmp_path / "missing")  # a draft that cannot be read is a result
    assert unreadable.exit_code == 2 and unreadable.to_dict()["error"]["code"] == "DF001"
    assert capsys.readouterr().out == ""


def test_smoke_run_is_the_cli_document(cli, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("tokenizers")
    res = dflash_ckpt.smoke_run(TINY / "draft", TINY / "target", min_acceptance=0.0, **RUN)
    assert capsys.readouterr().out == ""
    doc = cli_doc(cli, "smoke-run", str(TINY / "draft"), "--target", str(TINY / "target"), "--min-acceptance", "0", *RUN_ARGS)
    assert res.ok and res.exit_code == doc["exit_code"] == 0 and res.findings == []
    assert untimed(res.to_dict()) == untimed(doc["results"][0])
    assert untimed(res.envelope()) == untimed(doc)
    with pytest.raises(dflash_ckpt.DFlashCkptError) as err:
        dflash_ckpt.smoke_run(TINY / "draft", TINY / "target", backend="tensorrt")
    assert (err.value.code, err.value.exit_code) == ("DF004", 2)


@pytest.mark.slow
def test_probe_taps_is_the_cli_document(cli, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("tokenizers")
    res = dflash_ckpt.probe_taps(TINY / "draft", TINY / "target", budget=4, min_acceptance=0.0, **RUN)
    assert capsys.readouterr().out == ""
    doc = cli_doc(cli, "probe-taps", str(TINY / "draft"), "--target", str(TINY / "target"), "--budget", "4",
                  "--min-acceptance", "0", *RUN_ARGS)
    assert res.exit_code == doc["exit_code"] and res.ok is doc["ok"]
    assert untimed(res.to_dict()) == untimed(doc["results"][0])
    assert res.to_dict()["best"]["target_layer_ids"] == doc["results"][0]["best"]["target_layer_ids"]
    out = tmp_path / "written"
    wrote = dflash_ckpt.probe_taps(TINY / "draft", TINY / "target", budget=4, min_acceptance=99.0, write=out, **RUN)
    assert wrote.exit_code == 1 and wrote.envelope()["error"]["code"] == "DF004" and not out.exists()


def test_a_call_shows_no_download_bars(monkeypatch: pytest.MonkeyPatch) -> None:
    """During a call Hub download bars are off (as with --json); afterwards the environment is as it was."""
    import dflash_ckpt.run.inspect as cmd

    seen: list[str | None] = []
    real = cmd.run_inspect
    monkeypatch.setattr(cmd, "run_inspect", lambda *a, **k: (seen.append(os.environ.get("HF_HUB_DISABLE_PROGRESS_BARS")), real(*a, **k))[1])
    monkeypatch.delenv("HF_HUB_DISABLE_PROGRESS_BARS", raising=False)
    assert dflash_ckpt.inspect(TINY / "draft").ok
    assert seen == ["1"] and "HF_HUB_DISABLE_PROGRESS_BARS" not in os.environ
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "0")  # the caller's choice wins
    dflash_ckpt.inspect(TINY / "draft")
    assert seen[-1] == "0" and os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] == "0"
