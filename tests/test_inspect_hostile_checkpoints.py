"""Hostile checkpoints (issue 10), built here at test time: headers the safetensors library refuses,
empty weights, config numbers that would size loops or allocations, integers past Python's
conversion limit and JSON nested hundreds deep. Each gets a finding or one line, never a
traceback and never "OK"; where the library is the judge, it is asked too."""

from __future__ import annotations

import json
import shutil
import struct
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import ERROR_LINE, ROOT, error_line, no_traceback

sys.path.insert(0, str(ROOT / "fixtures"))
import make_fixtures  # noqa: E402

from dflash_ckpt.limits import MAX_BLOCK_SIZE, MAX_LIST_LEN, MAX_TENSORS  # noqa: E402

BIG_INT = "9" * 5000  # past Python's 4300-digit limit for int <-> str


def _draft(tmp_path: Path, fixtures_root: Path) -> Path:
    dst = tmp_path / "draft"
    shutil.copytree(fixtures_root / "mutants/base", dst)
    return dst


def _config(d: Path) -> dict[str, Any]:
    return json.loads((d / "config.json").read_text())


def _safetensors(header_text: bytes, data_len: int, extra: bytes = b"") -> bytes:
    return struct.pack("<Q", len(header_text)) + header_text + b"\0" * data_len + extra


def _t(begin: int, end: int, dtype: str = "BF16", shape: list[int] | None = None) -> dict[str, Any]:
    return {"dtype": dtype, "shape": shape if shape is not None else [(end - begin) // 2], "data_offsets": [begin, end]}


def _inspect(cli: Any, d: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    """Exit code and the one draft's result of ``inspect --json`` (the envelope's ``results[0]``)."""
    res = cli("inspect", str(d), "--json", *extra)
    no_traceback(res)
    doc = res.json()
    assert doc["exit_code"] == res.code and doc["ok"] is (res.code == 0), doc
    return res.code, res.result()


def _library_refuses(path: Path) -> bool:
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="np") as fh:
            list(fh.keys())
    except Exception:  # noqa: BLE001 - any refusal counts
        return True
    return False


H = {"fc.weight": _t(0, 4), "norm.weight": _t(4, 8)}

REFUSED = {
    "gap": (json.dumps({"a": _t(0, 4), "b": _t(8, 12)}), 12, b"", "gap of 4 bytes"),
    "overlap": (json.dumps({"a": _t(0, 4), "b": _t(2, 6)}), 6, b"", "overlaps the previous tensor"),
    "not-from-zero": (json.dumps({"a": _t(4, 8)}), 8, b"", "gap of 4 bytes"),
    "bytes-after-data": (json.dumps(H), 8, b"xx", "2 bytes after the last tensor"),
    "unknown-dtype": (json.dumps({"a": _t(0, 4, "Q16")}), 4, b"", "does not define"),
    "metadata-not-str": (json.dumps({"__metadata__": {"format": 1}, **H}), 8, b"", "'__metadata__' has values that are not strings"),
    "metadata-list": (json.dumps({"__metadata__": ["pt"], **H}), 8, b"", "'__metadata__' is not an object"),
    "sub-byte-end": (json.dumps({"a": _t(0, 1, "F4", [1])}), 1, b"", "byte boundary"),
    "count-overflow": (json.dumps({"a": _t(0, 0, "F32", [2**62, 2**62, 0])}), 0, b"", "overflows 64 bits"),
    "dim-not-usize": (json.dumps({"a": _t(0, 0, "F32", [2**64, 0])}), 0, b"", "is not a list of sizes"),
    "offsets-three": (json.dumps({"a": {"dtype": "BF16", "shape": [2], "data_offsets": [0, 4, 4]}}), 4, b"", "are invalid"),
    "duplicate-key": ('{"a": %s, "a": %s}' % (json.dumps(_t(0, 4)), json.dumps(_t(4, 8))), 8, b"", "gap of 4 bytes"),
    "nested-500": ('{"a": ' + "[" * 500 + "]" * 500 + "}", 0, b"", "nested too deep"),
    "nested-5000": ('{"a": ' + "[" * 5000 + "]" * 5000 + "}", 0, b"", "nested too deep"),
    "int-5000-digits": ('{"a": {"dtype": "BF16", "shape": [%s], "data_offsets": [0, 2]}}' % BIG_INT, 2, b"", "4300 digits"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_header_the_library_refuses_is_refused_first(tmp_path: Path, fixtures_root: Path, cli: Any, case: str) -> None:
    text, data_len, extra, needle = REFUSED[case]
    d = _draft(tmp_path, fixtures_root)
    path = d / "model.safetensors"
    path.write_bytes(_safetensors(text.encode(), data_len, extra))
    assert _library_refuses(path), f"the library accepts {case}; the test input is wrong"
    code, doc = _inspect(cli, d)
    assert code == 1 and doc["ok"] is False
    bad = [f for f in doc["findings"] if f["code"] == "DF203"]
    assert len(bad) == 1 and bad[0]["path"] == str(path) and needle in bad[0]["message"], doc["findings"]
    assert "\n" not in bad[0]["message"] and len(bad[0]["message"]) < 600


ACCEPTED = {
    "keys-out-of-order": json.dumps({"norm.weight": _t(4, 8), "fc.weight": _t(0, 4)}),
    "metadata-null": json.dumps({"__metadata__": None, **H}),
    "padded": json.dumps(H) + "      ",
    "zero-size-first": json.dumps({"z": _t(0, 0, "BF16", [0]), **H}),
    "c64-and-fnuz": json.dumps({"c": _t(0, 8, "C64", [1]), "f": _t(8, 10, "F8_E4M3FNUZ", [2])}),
}


@pytest.mark.parametrize("case", sorted(ACCEPTED))
def test_header_the_library_accepts_is_read(tmp_path: Path, fixtures_root: Path, cli: Any, case: str) -> None:
    text = ACCEPTED[case].encode()
    offsets = [e["data_offsets"][1] for k, e in json.loads(text).items() if k != "__metadata__"]
    d = _draft(tmp_path, fixtures_root)
    path = d / "model.safetensors"
    path.write_bytes(_safetensors(text, max(offsets)))
    assert not _library_refuses(path)
    _, doc = _inspect(cli, d)
    assert not [f for f in doc["findings"] if f["code"] in ("DF203", "DF204")], doc["findings"]


def test_too_many_tensors_stops_early(tmp_path: Path, fixtures_root: Path, cli: Any) -> None:
    n = MAX_TENSORS + 10
    header = {f"t{i}": _t(2 * i, 2 * i + 2, "BF16", [1]) for i in range(n)}
    d = _draft(tmp_path, fixtures_root)
    (d / "model.safetensors").write_bytes(_safetensors(json.dumps(header).encode(), 2 * n))
    code, doc = _inspect(cli, d)
    assert code == 1
    msg = next(f["message"] for f in doc["findings"] if f["code"] == "DF203")
    assert f"more than {MAX_TENSORS:,} entries" in msg


def test_empty_header_is_an_error_not_ok(tmp_path: Path, fixtures_root: Path, cli: Any) -> None:
    d = _draft(tmp_path, fixtures_root)
    (d / "model.safetensors").write_bytes(_safetensors(b"{}", 0))
    assert not _library_refuses(d / "model.safetensors")  # the library loads it: zero tensors
    code, doc = _inspect(cli, d)
    assert code == 1 and doc["ok"] is False
    assert [f["code"] for f in doc["findings"] if f["severity"] == "error"] == ["DF223"]


def test_empty_weight_map_is_an_error_not_ok(tmp_path: Path, fixtures_root: Path, cli: Any) -> None:
    d = _draft(tmp_path, fixtures_root)
    (d / "model.safetensors").unlink()
    (d / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": {}}))
    code, doc = _inspect(cli, d)
    assert code == 1 and doc["ok"] is False
    msg = next(f["message"] for f in doc["findings"] if f["code"] == "DF223")
    assert "weight_map' is empty" in msg


@pytest.mark.parametrize(
    "key, value, needle",
    [
        ("block_size", 1_000_000, f"beyond the {MAX_BLOCK_SIZE:,}"),
        ("dflash_config.target_layer_ids", list(range(100_000)), "100,000 entries"),
        ("dflash_config.target_layer_ids", [1, 3, 10**40], "holds 100000..."),
        ("num_hidden_layers", 10**9, "'num_hidden_layers' is 1000000000"),
        ("hidden_size", 10**4000, "(4001 digits)"),
        ("vocab_size", 2**62, "'vocab_size'"),
        ("num_target_layers", 10**12, "'num_target_layers'"),
        ("layer_types", ["full_attention"] * (MAX_LIST_LEN + 1), f"{MAX_LIST_LEN + 1:,} entries"),
        ("dflash_config.mask_token_id", 10**300, "'dflash_config.mask_token_id'"),
    ],
    ids=["block", "taps-100k", "tap-huge", "layers", "hidden-4001-digits", "vocab", "target-layers", "layer-types", "mask"],
)
def test_config_numbers_beyond_bounds_are_a_finding(
    tmp_path: Path, fixtures_root: Path, cli: Any, key: str, value: Any, needle: str
) -> None:
    d = _draft(tmp_path, fixtures_root)
    cfg = _config(d)
    node = cfg
    *parents, last = key.split(".")
    for p in parents:
        node = node[p]
    node[last] = value
    (d / "config.json").write_text(json.dumps(cfg))
    code, doc = _inspect(cli, d, "--target", str(fixtures_root / "mutants/targets/small"))
    assert code == 1 and doc["ok"] is False
    msgs = [f["message"] for f in doc["findings"] if f["code"] == "DF145"]
    assert msgs and needle in msgs[0], doc["findings"]
    assert all(len(f["message"]) < 1000 for f in doc["findings"])  # nothing printed the whole value


def test_block_size_million_reaches_no_engine_hint(tmp_path: Path, fixtures_root: Path, cli: Any) -> None:
    d = _draft(tmp_path, fixtures_root)
    cfg = _config(d)
    cfg["block_size"] = 1_000_000
    (d / "config.json").write_text(json.dumps(cfg))
    res = cli("inspect", str(d))
    no_traceback(res)
    assert res.code == 1 and "num_speculative_tokens=999999" not in res.stdout


@pytest.mark.parametrize(
    "text, needle",
    [
        ('{"block_size": %s}' % BIG_INT, "over 4300 digits"),
        ('{"a": ' + "[" * 500 + "]" * 500 + "}", "nested too deep"),
        ('{"a": ' + "[" * 50_000 + "]" * 50_000 + "}", "nested too deep"),
    ],
    ids=["int-5000-digits", "nested-500", "nested-50000"],
)
def test_config_too_long_int_or_too_deep_is_one_line(tmp_path: Path, fixtures_root: Path, cli: Any, text: str, needle: str) -> None:
    d = _draft(tmp_path, fixtures_root)
    (d / "config.json").write_text(text)
    res = cli("inspect", str(d))
    no_traceback(res)
    assert res.code == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and str(d / "config.json") in lines[0], res.stderr


def test_index_with_a_too_long_int_is_a_finding(tmp_path: Path, fixtures_root: Path, cli: Any) -> None:
    d = _draft(tmp_path, fixtures_root)
    (d / "model.safetensors.index.json").write_text('{"metadata": {"total_size": %s}, "weight_map": {}}' % BIG_INT)
    code, doc = _inspect(cli, d)
    assert code == 1
    msg = next(f["message"] for f in doc["findings"] if f["code"] == "DF207")
    assert "4300 digits" in msg


def test_target_dims_beyond_bounds(tmp_path: Path, fixtures_root: Path, cli: Any) -> None:
    t = tmp_path / "target"
    t.mkdir()
    (t / "config.json").write_text(json.dumps({**make_fixtures.SMALL_TARGET, "num_hidden_layers": 10**4000, "vocab_size": 2**70}))
    code, doc = _inspect(cli, fixtures_root / "mutants/base", "--target", str(t))
    assert code == 1
    msgs = [f["message"] for f in doc["findings"] if f["code"] == "DF308"]
    assert len(msgs) == 2 and all("beyond the" in m for m in msgs)


def test_config_larger_than_the_cap_is_refused_before_reading(tmp_path: Path, fixtures_root: Path, cli: Any) -> None:
    from dflash_ckpt.limits import MAX_CONFIG_BYTES

    d = _draft(tmp_path, fixtures_root)
    with open(d / "config.json", "wb") as fh:  # sparse: costs no disk
        fh.truncate(MAX_CONFIG_BYTES + 1)
    res = cli("inspect", str(d))
    no_traceback(res)
    assert res.code == 2 and "too large for a JSON config (limit 16 MiB)" in res.stderr


def _peak_rss(*args: str) -> int:
    """Peak RSS (bytes) of ``python -m dflash_ckpt ARGS`` in its own process."""
    import subprocess

    code = (
        "import resource, subprocess, sys; "
        "subprocess.run([sys.executable, '-m', 'dflash_ckpt', *sys.argv[1:]], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
    )
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=True, timeout=120)
    return int(out.stdout.strip()) * 1024


@pytest.mark.slow
def test_peak_memory_of_a_big_header_stays_a_small_multiple(tmp_path: Path, fixtures_root: Path) -> None:
    """The bound the README states (figures: benchmarks/bench_hostile_memory.py), on a 24 MiB header
    holding as many tensors as a draft may (issue 10: 900k tensors in 90 MB cost 1.4 GB)."""
    d = _draft(tmp_path, fixtures_root)
    n = MAX_TENSORS
    text = ("{" + ",".join(f'"t{i:06d}":{{"dtype":"BF16","shape":[1],"data_offsets":[{2 * i},{2 * i + 2}]}}' for i in range(n)) + "}").encode()
    text += b" " * (24 * 2**20 - len(text))
    path = d / "model.safetensors"
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(text)) + text)
        fh.truncate(8 + len(text) + 2 * n)
    baseline = _peak_rss("inspect", str(fixtures_root / "mutants/base"), "-q")
    peak = _peak_rss("inspect", str(d), "-q")
    assert peak - baseline <= 3 * path.stat().st_size, (peak, baseline)  # README, Limits: 3x + 64 MiB


def test_a_broken_draft_among_several_is_a_row_of_its_own(tmp_path: Path, fixtures_root: Path, cli: Any) -> None:
    """Several drafts in one inspect: the hostile ones report their error, the others their verdict."""
    good = fixtures_root / "mutants/base"
    deep = tmp_path / "deep"
    shutil.copytree(good, deep)
    (deep / "config.json").write_text('{"a": ' + "[" * 5000 + "]" * 5000 + "}")
    header = tmp_path / "header"
    shutil.copytree(good, header)
    (header / "model.safetensors").write_bytes(_safetensors(b'{"a": {"dtype": "BF16", "shape": [%s], "data_offsets": [0, 2]}}' % BIG_INT.encode(), 2))
    huge = tmp_path / "huge"
    shutil.copytree(good, huge)
    cfg = _config(huge)
    cfg["num_hidden_layers"] = 10**4000
    cfg["dflash_config"]["target_layer_ids"] = list(range(100_000))
    (huge / "config.json").write_text(json.dumps(cfg))
    res = cli("inspect", str(good), str(deep), str(header), str(huge), "--json")
    no_traceback(res)
    doc = json.loads(res.stdout)
    assert [r["exit_code"] for r in doc["results"]] == [0, 2, 1, 1]
    assert res.code == 2
    assert "nested too deep" in doc["results"][1]["error"]["message"]


@pytest.mark.parametrize("name", ["config.json", "model.safetensors"])
@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_special_files_in_a_draft_are_named_for_what_they_are(tmp_path: Path, fixtures_root: Path, cli: Any, name: str, kind: str) -> None:
    import os

    d = _draft(tmp_path, fixtures_root)
    (d / name).unlink()
    if kind == "fifo":
        os.mkfifo(d / name)
    else:
        os.symlink("/dev/zero", d / name)
    res = cli("inspect", str(d))
    no_traceback(res)
    what = "a named pipe (FIFO)" if kind == "fifo" else "a character device"
    assert res.code == (2 if name == "config.json" else 1)
    if name == "config.json":  # nothing to check past it: the command's error
        lines = error_line(res).splitlines()[:1]  # the line itself (its old form follows)
    else:  # a finding among others: its error line, as -q prints it
        lines = [line for line in cli("inspect", str(d), "-q").stdout.splitlines() if ERROR_LINE.match(line)]
    ends = f" error: is {what}, not a regular file"
    assert any(line.startswith(f"{d / name}: DF") and line.endswith(ends) for line in lines), lines


@pytest.mark.slow
def test_from_file_reads_a_regular_file_only_and_capped(tmp_path: Path, fixtures_root: Path) -> None:
    """``inspect --from-file``: a FIFO there is one line at once (a plain open would wait for a
    writer forever), an oversized list is refused unread, and standard input is read no further
    than the same cap."""
    import os
    import subprocess

    from conftest import run_cli
    from dflash_ckpt.limits import MAX_ARG_FILE_BYTES

    fifo = tmp_path / "drafts.txt"
    os.mkfifo(fifo)
    res = run_cli("inspect", "--from-file", str(fifo), timeout=60)
    no_traceback(res)
    assert res.code == 2
    line = error_line(res).splitlines()[0]
    assert line == f"{fifo}: DF001 error: is a named pipe (FIFO), expected a regular --from-file list", line

    big = tmp_path / "big.txt"
    with open(big, "wb") as fh:  # sparse: costs no disk
        fh.truncate(MAX_ARG_FILE_BYTES + 1)
    res = run_cli("inspect", "--from-file", str(big), timeout=60)
    assert res.code == 2 and "too large for a --from-file list (limit 16 MiB)" in error_line(res), res.stderr

    listing = tmp_path / "ok.txt"
    listing.write_text(f"# one draft\n{fixtures_root / 'mutants/base'}\n")
    assert run_cli("inspect", "--from-file", str(listing), "-q", timeout=60).code == 0

    proc = subprocess.run([sys.executable, "-m", "dflash_ckpt", "inspect", "--from-file", "-"], input=b"#" * (MAX_ARG_FILE_BYTES + 1),
                          capture_output=True, timeout=60)
    err = proc.stderr.decode()
    assert proc.returncode == 2 and err.startswith("<stdin>: DF001 error: more than 16 MiB, too large for a --from-file list"), err
