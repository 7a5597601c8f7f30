"""The Python API as a newcomer calls it (issues 31 and 32): explicit typed signatures, every wrong
type or unknown keyword one ``DFlashCkptError`` (DF010, exit_code 2) naming the function and the
keyword, ``prompt="hello"`` one prompt, and no torch a DF004 naming the install line."""

from __future__ import annotations

import inspect as pyinspect
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest

import dflash_ckpt
from conftest import ROOT

TINY = ROOT / "fixtures" / "tiny-pair"
D, T = TINY / "draft", TINY / "target"

WRONG: list[tuple[str, Callable[[], Any], str]] = [
    ("non-path draft", lambda: dflash_ckpt.inspect(5), "draft=5"),
    ("None in a list", lambda: dflash_ckpt.inspect([D, None]), "draft=["),
    ("no draft at all", lambda: dflash_ckpt.inspect([]), "draft=[]"),
    ("bytes path", lambda: dflash_ckpt.inspect(str(D).encode()), "draft=b'"),
    ("bytes target", lambda: dflash_ckpt.inspect(D, target=str(T).encode()), "target=b'"),
    ("misspelt keyword", lambda: dflash_ckpt.inspect(D, strcit=True), "did you mean strict="),
    ("select of ints", lambda: dflash_ckpt.inspect(D, select=[101]), "select=[101]"),
    ("out=5", lambda: dflash_ckpt.normalize(D, out=5), "out=5"),
    ("block_size as str", lambda: dflash_ckpt.normalize(D, check=True, block_size="8"), "block_size='8'"),
    ("max_new_tokens='4'", lambda: dflash_ckpt.smoke_run(D, T, max_new_tokens="4"), "max_new_tokens='4'"),
    ("max_new_tokens=True", lambda: dflash_ckpt.smoke_run(D, T, max_new_tokens=True), "max_new_tokens=True"),
    ("prompts of texts", lambda: dflash_ckpt.smoke_run(D, T, prompts=["hi"]), "texts themselves go in prompt="),
    ("None in prompts", lambda: dflash_ckpt.smoke_run(D, T, prompt=["hi", None]), "prompt=['hi', None]"),
    ("missing target", lambda: dflash_ckpt.smoke_run(D), "'target'"),
    ("positional option", lambda: dflash_ckpt.smoke_run(D, T, ["hi"]), "positional"),
    ("write=5", lambda: dflash_ckpt.probe_taps(D, T, write=5), "write=5"),
    ("budget as float", lambda: dflash_ckpt.probe_taps(D, T, budget=4.0), "budget=4.0"),
]


@pytest.mark.parametrize("case", WRONG, ids=[c[0] for c in WRONG])
def test_a_wrong_type_is_one_dflash_ckpt_error(case: tuple[str, Callable[[], Any], str]) -> None:
    _, call, named = case
    with pytest.raises(dflash_ckpt.DFlashCkptError) as err:
        call()
    assert (err.value.code, err.value.exit_code) == ("DF010", 2), err.value
    assert err.value.message.startswith("dflash_ckpt.") and named in err.value.message, err.value.message
    assert "\n" not in err.value.message


def test_the_signatures_are_the_options_and_their_defaults() -> None:
    """Each API function spells every field of its command's options dataclass (``run/options.py``)
    with the same default, then the run's own keywords (``progress``, ``log``), and nothing else: so
    ``help(dflash_ckpt.smoke_run)`` is the truth, a typo'd keyword is DF010, and the defaults cannot
    drift from the CLI's."""
    import dataclasses

    from dflash_ckpt.run.inspect import run_inspect
    from dflash_ckpt.run.normalize import run_normalize
    from dflash_ckpt.run.inspect_options import InspectOptions
    from dflash_ckpt.run.options import NormalizeOptions, ProbeOptions, SmokeOptions
    from dflash_ckpt.run.probe import run_probe_taps
    from dflash_ckpt.run.smoke import run_smoke_run

    for api, options, run in ((dflash_ckpt.inspect, InspectOptions, run_inspect),
                              (dflash_ckpt.normalize, NormalizeOptions, run_normalize),
                              (dflash_ckpt.smoke_run, SmokeOptions, run_smoke_run),
                              (dflash_ckpt.probe_taps, ProbeOptions, run_probe_taps)):
        ours = pyinspect.signature(api).parameters
        fields = {f.name: f for f in dataclasses.fields(options)}
        extras = {n: p for n, p in pyinspect.signature(run).parameters.items() if p.kind == p.KEYWORD_ONLY}
        assert set(ours) == set(fields) | set(extras), api.__name__
        assert all(p.kind != p.VAR_KEYWORD for p in ours.values()), api.__name__
        for name, p in ours.items():
            assert p.annotation is not p.empty, (api.__name__, name)
            if name in extras:
                assert p.default == extras[name].default, (api.__name__, name)
                continue
            f = fields[name]
            default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
            if default is dataclasses.MISSING:
                assert p.default is p.empty, (api.__name__, name)
            else:  # the API takes one text or a tuple where the options hold a list
                assert p.default == default or (list(p.default) == list(default) if isinstance(default, (list, tuple)) else False), (api.__name__, name, p.default, default)


def test_a_type_error_reads_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check comes before the run: nothing is opened, torch is not imported for it."""
    code = ("import sys, dflash_ckpt\n"
            "try:\n    dflash_ckpt.smoke_run('d', 't', max_new_tokens='4')\n"
            "except dflash_ckpt.DFlashCkptError as e:\n    print(e.code)\n"
            "print('torch' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.stdout.split() == ["DF010", "False"], proc.stderr


def test_without_torch_the_api_names_the_install_line() -> None:
    code = ("import sys; sys.modules['torch'] = None\n"
            "import dflash_ckpt\n"
            "for f in (dflash_ckpt.smoke_run, dflash_ckpt.probe_taps):\n"
            "    try:\n        f('fixtures/tiny-pair/draft', 'fixtures/tiny-pair/target')\n"
            "    except dflash_ckpt.DFlashCkptError as e:\n        print(e.code, e.exit_code, e.message)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    lines = proc.stdout.strip().splitlines()
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert len(lines) == 2 and all(line.startswith("DF004 2 ") and "pip install torch" in line for line in lines), lines


def test_one_prompt_as_a_string_is_one_prompt(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("tokenizers")
    res = dflash_ckpt.smoke_run(D, T, prompt="The capital of France is", max_new_tokens=8, min_acceptance=0.0,
                                device="cpu", draft_dtype="float32", target_dtype="float32")
    doc = res.to_dict()
    assert [p["text"] for p in doc["prompts"]] == ["The capital of France is"], doc["prompts"]
    assert res.ok and capsys.readouterr().out == ""


def test_one_select_code_as_a_string() -> None:
    assert [f.code for f in dflash_ckpt.inspect(TINY / "draft-top-level", select="DF1").findings] == \
        [f.code for f in dflash_ckpt.inspect(TINY / "draft-top-level", select=["DF1"]).findings]


def test_a_path_object_and_a_str_give_one_document(tmp_path: Path) -> None:
    assert dflash_ckpt.inspect(D).to_dict() == dflash_ckpt.inspect(str(D)).to_dict()
