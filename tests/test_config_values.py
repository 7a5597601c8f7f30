"""Issue 32, bad values that passed: rope_theta no reader can use (DF147), normalize writing
non-finite numbers or accepting a key twice in rope_parameters, DF310 missing a mask id written as
``725.0`` or ``[[725]]``, an empty rendering blamed on the prompt, and the API's smoke_run leaving
its thread count in the caller. Each hostile input is built here."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, error_line, no_traceback

PAIR = ROOT / "fixtures" / "tiny-pair"
DRAFT, TARGET = PAIR / "draft", PAIR / "target"
BASE = json.loads((DRAFT / "config.json").read_text())
MASK = BASE.get("dflash_config", {}).get("mask_token_id", BASE.get("mask_token_id"))


def _draft(folder: Path, text: str) -> Path:
    folder.mkdir(parents=True)
    (folder / "model.safetensors").symlink_to(DRAFT / "model.safetensors")
    (folder / "config.json").write_text(text)
    return folder


def _with(patch: dict[str, Any], raw: dict[str, str] | None = None) -> str:
    """The tiny draft's config with ``patch``; ``raw`` replaces a placeholder string by raw JSON text
    (``1e400``, ``NaN``, a key given twice), which ``json.dumps`` cannot write."""
    cfg = {k: v for k, v in BASE.items() if k not in patch or patch[k] is not ...}
    cfg.update({k: v for k, v in patch.items() if v is not ...})
    text = json.dumps(cfg, indent=2)
    for placeholder, replacement in (raw or {}).items():
        text = text.replace(json.dumps(placeholder), replacement)
    return text


BAD_THETA = {"string": ('"abc"', "a string"), "nan": ("NaN", "not finite"), "zero": ("0", "found 0"),
             "negative": ("-1", "found -1"), "huge": ("1e400", "not finite"), "true": ("true", "a boolean"),
             "object": ('{"a": 1}', "an object")}


@pytest.mark.parametrize("where", ["top", "rope_parameters", "per-layer-type"])
@pytest.mark.parametrize("name", sorted(BAD_THETA))
def test_a_rope_theta_no_reader_can_use_is_an_error_finding(cli: Any, tmp_path: Path, name: str, where: str) -> None:
    raw, needle = BAD_THETA[name]
    if where == "top":
        patch, key = {"rope_theta": "@@"}, "rope_theta"
    elif where == "rope_parameters":
        patch, key = {"rope_theta": ..., "rope_parameters": {"rope_type": "default", "rope_theta": "@@"}}, "rope_parameters.rope_theta"
    else:
        patch = {"rope_theta": ..., "rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": "@@"},
                                                         "sliding_attention": {"rope_type": "default", "rope_theta": 10000}}}
        key = "rope_parameters.full_attention.rope_theta"
    folder = _draft(tmp_path / "d", _with(patch, {"@@": raw}))
    res = cli("inspect", str(folder), "--json")
    no_traceback(res)
    assert res.code == 1, res.stdout[-400:] + res.stderr
    hits = [f for f in res.json()["results"][0]["findings"] if f["code"] == "DF147"]
    assert hits and hits[0]["severity"] == "error" and hits[0]["key"] == key and needle in hits[0]["message"], hits


def test_rope_objects_that_are_not_objects_are_error_findings(cli: Any, tmp_path: Path) -> None:
    folder = _draft(tmp_path / "d", _with({"rope_scaling": "x", "rope_parameters": 5}))
    res = cli("inspect", str(folder), "--json")
    keys = {f["key"] for f in res.json()["results"][0]["findings"] if f["code"] == "DF147"}
    assert res.code == 1 and keys == {"rope_scaling", "rope_parameters"}


def test_good_rope_values_give_no_finding(cli: Any, tmp_path: Path) -> None:
    folder = _draft(tmp_path / "d", _with({"rope_theta": 1e6, "rope_scaling": None,
                                           "rope_parameters": {"rope_type": "default", "rope_theta": 1000000}}))
    res = cli("inspect", str(folder), "--json")
    assert res.code == 0 and not [f for f in res.json()["results"][0]["findings"] if f["code"] == "DF147"]


@pytest.mark.parametrize("raw, key", [("1e400", "rope_parameters.rope_theta"), ("NaN", "rope_parameters.rope_theta"),
                                      ("-Infinity", "rope_parameters.rope_theta")])
def test_normalize_writes_strict_json_or_nothing(cli: Any, tmp_path: Path, raw: str, key: str) -> None:
    """``rope_parameters.rope_theta: 1e400`` was mirrored as ``"rope_theta": Infinity`` (not JSON), exit 0."""
    folder = _draft(tmp_path / "d", _with({"rope_theta": ..., "rope_parameters": {"rope_type": "default", "rope_theta": "@@"}},
                                          {"@@": raw}))
    out = tmp_path / "out"
    res = cli("normalize", str(folder), str(out))
    no_traceback(res)
    assert res.code == 2, res.stdout + res.stderr
    line = error_line(res)
    assert "DF002" in line and f"key '{key}'" in line and "strict JSON" in line
    assert not out.exists()


def test_normalize_output_parses_as_strict_json(cli: Any, tmp_path: Path) -> None:
    folder = _draft(tmp_path / "d", _with({"rope_theta": ..., "rope_parameters": {"rope_type": "default", "rope_theta": 1e6}}))
    out = tmp_path / "out"
    assert cli("normalize", str(folder), str(out)).code == 0

    def refuse(name: str) -> None:
        raise AssertionError(f"{name} written")

    assert json.loads((out / "config.json").read_text(), parse_constant=refuse)["rope_theta"] == 1e6


@pytest.mark.parametrize("inner", [False, True])
def test_a_key_twice_inside_rope_parameters_is_refused_like_the_top_level(cli: Any, tmp_path: Path, inner: bool) -> None:
    params = {"rope_type": "default", "rope_theta": "@@"}
    patch = {"rope_theta": ..., "rope_parameters": {"full_attention": params, "sliding_attention": params} if inner else params}
    folder = _draft(tmp_path / "d", _with(patch, {"@@": '1000000, "rope_theta": 10000'}))
    out = tmp_path / "out"
    res = cli("normalize", str(folder), str(out))
    no_traceback(res)
    assert res.code == 2, res.stdout + res.stderr
    place = "rope_parameters.full_attention" if inner else "rope_parameters"
    assert f"key 'rope_theta' appears twice in {place}" in error_line(res) and not out.exists()


def _target(folder: Path, patch: dict[str, Any], file: str = "config.json") -> Path:
    shutil.copytree(TARGET, folder, symlinks=True)
    path = folder / file
    cfg = json.loads(path.read_text()) if path.exists() else {}
    path.write_text(json.dumps({**cfg, **patch}))
    return folder


@pytest.mark.parametrize("value", ["float", "nested", "nested-in-list"])
@pytest.mark.parametrize("file", ["config.json", "generation_config.json"])
def test_df310_sees_a_mask_id_written_as_a_float_or_nested(cli: Any, tmp_path: Path, value: str, file: str) -> None:
    assert isinstance(MASK, int)
    written = {"float": float(MASK), "nested": [[MASK]], "nested-in-list": [1, [2, [MASK]]]}[value]
    target = _target(tmp_path / "t", {"eos_token_id": written}, file)
    res = cli("inspect", str(DRAFT), "--target", str(target), "--json")
    no_traceback(res)
    hits = [f for f in res.json()["results"][0]["findings"] if f["code"] == "DF310"]
    assert res.code == 1 and hits and f"eos_token_id in {file}" in hits[0]["message"], res.stdout[-600:]


def test_token_ids_reads_what_loaders_read() -> None:
    from dflash_ckpt.checks.pitfalls import token_ids

    assert token_ids(725.0) == [725] and token_ids([[725], 3]) == [725, 3] and token_ids(725.5) == []
    assert token_ids(True) == [] and token_ids([[[[[725]]]]]) == [] and token_ids(float("inf")) == []


@pytest.mark.parametrize("template", ["", "{% if false %}{{ messages }}{% endif %}"])
def test_an_empty_rendering_blames_the_template_naming_its_file(tmp_path: Path, template: str) -> None:
    from dflash_ckpt.errors import DFlashCkptError
    from dflash_ckpt.run.options import RunOptions
    from dflash_ckpt.run.pair import encode_prompts

    tok = tmp_path / "tok"
    tok.mkdir()
    shutil.copy(TARGET / "tokenizer.json", tok)
    (tok / "chat_template.jinja").write_text(template)
    opts = RunOptions(draft=str(DRAFT), target=str(TARGET), prompt=["hello"], tokenizer=str(tok))
    with pytest.raises(DFlashCkptError) as err:
        encode_prompts(opts, TARGET)
    line = err.value.line()
    assert err.value.code == "DF002" and err.value.exit_code == 2
    assert line.startswith(f"{tok / 'chat_template.jinja'}: DF002 error: the chat template renders prompt 'prompt-1'")
    assert "encodes to no tokens" not in line


def test_the_api_smoke_run_restores_the_callers_thread_count(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    import dflash_ckpt
    import dflash_ckpt.runtime.loading as loading

    before = torch.get_num_threads()
    mine = 2 if before != 2 else 3
    torch.set_num_threads(mine)
    try:
        res = dflash_ckpt.smoke_run(DRAFT, TARGET, prompt=["hi"], max_new_tokens=4, device="cpu", threads=1, min_acceptance=0.0)
        assert res.threads == 1 and torch.get_num_threads() == mine

        def fails(*args: Any, **kwargs: Any) -> Any:
            raise dflash_ckpt.DFlashCkptError("draft: cannot be loaded")

        monkeypatch.setattr(loading, "load_draft", fails)  # raises after the run set its threads
        with pytest.raises(dflash_ckpt.DFlashCkptError):
            dflash_ckpt.smoke_run(DRAFT, TARGET, prompt=["hi"], max_new_tokens=4, device="cpu", threads=1)
        assert torch.get_num_threads() == mine
    finally:
        torch.set_num_threads(before)
