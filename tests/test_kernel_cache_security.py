"""The kernel cache runs no code we did not build (issue 39, item 1; runtime/kernel_cache.py).

Each hostile cache of the red-team round is built here at test time: a library planted under the
kernel's exact name (the tag is computable) in a world-writable folder, behind a symbolic link to
the folder or to the file, with a wrong digest or none, truncated, without the kernel's symbol;
``/proc``, a file, or a folder (or a FIFO) at the library's name as the cache. Held for each: the
planted library's constructor never runs (it would write a marker file), the kernel still works
(built for this process alone, or from the repaired cache) or torch's path runs, the reason is
said (``cache_note`` / ``why_not``, and smoke-run's loading line), nothing is left behind, and no
error, signal or hang ends the process. A call of the kernel that returns an error code hands the
rest of the run to torch's path with a reason, not an out-of-memory error.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

torch = pytest.importorskip("torch")

from dflash_ckpt.runtime import cpu_kernel, kernel_cache, prepack  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PAIR = ROOT / "fixtures" / "tiny-pair"
CC = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")

pytestmark = pytest.mark.skipif(not (cpu_kernel._cpu_has("avx2", "fma") and CC),
                                reason="the kernel needs AVX2, FMA and a C compiler")

#: A library an attacker would plant: its constructor runs at dlopen, before any check of ours.
PLANTED = r"""
#include <stdio.h>
#include <stdint.h>
#ifdef WITH_CONSTRUCTOR
__attribute__((constructor)) static void planted(void) {
    FILE *f = fopen(MARKER, "w");
    if (f) { fputs("planted code ran\n", f); fclose(f); }
}
#endif
#ifdef WITH_SYMBOL
int dflash_bf16_linear(const uint16_t *x, const uint16_t *w, const uint16_t *b, uint16_t *y,
                       int64_t m, int64_t n, int64_t k, int t) { return 0; }
#endif
"""


@pytest.fixture
def cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """The kernel cache path of the test's own (not created yet), and a forgotten load."""
    where = tmp_path / "cache" / "kernels"
    monkeypatch.setenv("DFLASH_CKPT_KERNEL_DIR", str(where))
    monkeypatch.delenv("DFLASH_CKPT_NO_KERNEL", raising=False)
    cpu_kernel.kernel.cache_clear()
    yield where
    cpu_kernel.kernel.cache_clear()


def plant(tmp_path: Path, *, symbol: bool = True, constructor: bool = True) -> tuple[bytes, Path]:
    """A compiled hostile library's bytes and the marker file its constructor would write."""
    marker = tmp_path / "PLANTED-CODE-RAN"
    src = tmp_path / "planted.c"
    src.write_text(PLANTED)
    out = tmp_path / "planted.so"
    flags = [f'-DMARKER="{marker}"'] + (["-DWITH_SYMBOL"] if symbol else []) + (["-DWITH_CONSTRUCTOR"] if constructor else [])
    subprocess.run([CC, "-shared", "-fPIC", *flags, str(src), "-o", str(out)], check=True, capture_output=True)
    return out.read_bytes(), marker


def name() -> str:
    """The file name the kernel is looked up by: the attacker can compute it as we do."""
    assert CC
    return cpu_kernel.library_name(CC)


def private(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o700)
    return folder


def put(folder: Path, data: bytes, *, digest: str | None) -> Path:
    """``data`` at the kernel's name in ``folder``, with ``digest`` beside it (None: no digest file)."""
    lib = folder / name()
    lib.write_bytes(data)
    lib.chmod(0o600)
    if digest is not None:
        (folder / (name() + kernel_cache.DIGEST_SUFFIX)).write_text(digest + "\n")
    return lib


def assert_kernel_works() -> None:
    """The kernel is loaded and computes the product (within a bf16 ulp of the fp32 one)."""
    assert cpu_kernel.kernel() is not None, cpu_kernel.why_not()
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(3, 40, generator=gen).to(torch.bfloat16)
    w = torch.randn(9, 40, generator=gen).to(torch.bfloat16)
    want = (x.float() @ w.float().T).to(torch.bfloat16).float()
    ulp = want.abs().clamp_min(1e-2).log2().floor().sub(7).exp2()
    assert bool(((cpu_kernel.linear(x, w).float() - want).abs() <= ulp).all())


def assert_no_litter(folder: Path) -> None:
    """No temporary name or private load folder is left in the cache."""
    if folder.is_dir() and not folder.is_symlink():
        assert not [p.name for p in folder.iterdir() if p.name.startswith(".")], list(folder.iterdir())


def assert_cache_repaired(folder: Path) -> None:
    """After a refused library, the cache holds our build and the digest of its bytes."""
    lib = folder / name()
    assert not lib.is_symlink() and lib.is_file()
    sums = (folder / (name() + kernel_cache.DIGEST_SUFFIX)).read_text().split()
    assert sums[0] == hashlib.sha256(lib.read_bytes()).hexdigest()


def test_a_planted_library_in_a_world_writable_cache_never_runs(cache: Path, tmp_path: Path) -> None:
    data, marker = plant(tmp_path)
    private(cache)
    put(cache, data, digest=hashlib.sha256(data).hexdigest())  # even with a digest that matches
    cache.chmod(0o777)
    assert_kernel_works()
    assert not marker.exists()
    note = cpu_kernel.cache_note()
    assert note and note.startswith("built for this run alone (") and str(cache) in note and "writable by others" in note
    assert (cache / name()).read_bytes() == data  # the cache is not ours to rewrite: left as it is
    assert_no_litter(cache)


def test_a_folder_above_the_cache_writable_by_others_refuses_it(cache: Path, tmp_path: Path) -> None:
    data, marker = plant(tmp_path)
    put(private(cache), data, digest=hashlib.sha256(data).hexdigest())
    cache.parent.chmod(0o777)  # anyone could swap the kernels folder for their own
    assert_kernel_works()
    assert not marker.exists()
    note = cpu_kernel.cache_note()
    assert note and "a folder above the kernel cache is writable by others" in note and str(cache.parent) in note


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder to another user needs root")
def test_a_cache_owned_by_another_user_is_refused(cache: Path, tmp_path: Path) -> None:
    data, marker = plant(tmp_path)
    put(private(cache), data, digest=hashlib.sha256(data).hexdigest())
    os.chown(cache, 65534, 65534)
    assert_kernel_works()
    assert not marker.exists()
    assert "not owned by you" in (cpu_kernel.cache_note() or "")


def test_a_symlinked_cache_folder_is_refused(cache: Path, tmp_path: Path) -> None:
    data, marker = plant(tmp_path)
    elsewhere = private(tmp_path / "elsewhere")
    put(elsewhere, data, digest=hashlib.sha256(data).hexdigest())
    cache.parent.mkdir(mode=0o700)
    cache.symlink_to(elsewhere)
    assert_kernel_works()
    assert not marker.exists()
    note = cpu_kernel.cache_note()
    assert note and "symbolic link" in note and str(cache) in note
    assert sorted(p.name for p in elsewhere.iterdir()) == sorted([name(), name() + ".sha256"])  # untouched


def test_a_symlinked_library_is_not_loaded_and_is_replaced(cache: Path, tmp_path: Path) -> None:
    data, marker = plant(tmp_path)
    target = tmp_path / "planted-elsewhere.so"
    target.write_bytes(data)
    private(cache)
    (cache / name()).symlink_to(target)
    (cache / (name() + ".sha256")).write_text(hashlib.sha256(data).hexdigest())
    assert_kernel_works()
    assert not marker.exists()
    assert "is a symbolic link" in (cpu_kernel.cache_note() or "")
    assert target.read_bytes() == data  # the link was replaced, never written through
    assert_cache_repaired(cache)
    assert_no_litter(cache)


@pytest.mark.slow
@pytest.mark.parametrize("digest", [None, "0" * 64, "not a digest", ""])
def test_a_library_without_its_digest_is_never_loaded(cache: Path, tmp_path: Path, digest: str | None) -> None:
    data, marker = plant(tmp_path)
    put(private(cache), data, digest=digest)
    assert_kernel_works()
    assert not marker.exists()
    note = cpu_kernel.cache_note() or ""
    assert note.startswith("rebuilt into the cache (a cached kernel is not loaded") and str(cache / name()) in note
    assert ("no digest file" if digest is None else "do not match") in note
    assert_cache_repaired(cache)
    assert_no_litter(cache)
    cpu_kernel.kernel.cache_clear()  # the repaired cache is then used as it is, and says nothing
    assert_kernel_works()
    assert cpu_kernel.cache_note() is None


def test_an_unreadable_digest_is_never_trusted(cache: Path, tmp_path: Path) -> None:
    data, marker = plant(tmp_path)
    put(private(cache), data, digest=None)
    (cache / (name() + ".sha256")).mkdir()  # a folder where the digest should be
    assert_kernel_works()
    assert not marker.exists()
    assert "a cached kernel is not loaded" in (cpu_kernel.cache_note() or "")


@pytest.mark.slow
def test_a_truncated_cached_library_is_rebuilt_not_mapped(cache: Path) -> None:
    """A half-written library would be a SIGBUS when mapped: its bytes no longer hash to the
    digest, so it is rebuilt. In a child process, so a regression is a failed test, not a crash."""
    assert_kernel_works()  # a good build, then cut in half as a full disk would
    lib = cache / name()
    lib.write_bytes(lib.read_bytes()[: lib.stat().st_size // 2])
    code = ("from dflash_ckpt.runtime import cpu_kernel as k\n"
            "assert k.kernel() is not None, k.why_not()\n"
            "print(k.cache_note())\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "do not match the digest" in done.stdout
    assert_cache_repaired(cache)


def test_a_library_without_the_symbol_is_a_reason_not_a_traceback(cache: Path, tmp_path: Path) -> None:
    """Even a library that passes the digest (ours, broken): no AttributeError, torch's path."""
    data, marker = plant(tmp_path, symbol=False, constructor=False)
    put(private(cache), data, digest=hashlib.sha256(data).hexdigest())
    assert cpu_kernel.kernel() is None
    assert "has no dflash_bf16_linear" in (cpu_kernel.why_not() or "")
    w = torch.ones(4, 8, dtype=torch.bfloat16)
    assert not cpu_kernel.usable(w)
    x = torch.ones(2, 8, dtype=torch.bfloat16)
    assert torch.equal(cpu_kernel.linear(x, w), torch.nn.functional.linear(x, w))


def test_a_planted_library_without_the_symbol_is_never_loaded(cache: Path, tmp_path: Path) -> None:
    data, marker = plant(tmp_path, symbol=False)
    put(private(cache), data, digest=None)
    assert_kernel_works()
    assert not marker.exists()
    assert_cache_repaired(cache)


@pytest.mark.parametrize("kind", ["proc", "file", "folder at the library's name", "fifo at the library's name"])
def test_a_cache_path_that_cannot_hold_the_kernel_builds_it_privately(cache: Path, monkeypatch: pytest.MonkeyPatch,
                                                                       kind: str) -> None:
    """No DF001 naming a hidden temporary file, no hang on a FIFO: a private build, and why."""
    if kind == "proc":
        monkeypatch.setenv("DFLASH_CKPT_KERNEL_DIR", "/proc")
    elif kind == "file":
        cache.parent.mkdir(mode=0o700)
        cache.write_text("not a folder")
    else:
        private(cache)
        if kind.startswith("folder"):
            (cache / name()).mkdir()
        else:
            os.mkfifo(cache / name(), 0o600)
    assert_kernel_works()
    note = cpu_kernel.cache_note() or ""
    want = {"proc": ("cannot be written", "not owned by you"), "file": ("is not a folder",),
            "folder at the library's name": ("is a folder, not a library",),
            "fifo at the library's name": ("is not a regular file",)}[kind]
    assert any(w in note for w in want), note
    if kind.startswith("fifo"):  # replaced by our build: a rename takes the FIFO's name
        assert_cache_repaired(cache)
    elif kind.startswith("folder"):
        assert (cache / name()).is_dir() and "cannot be written" in note
        assert_no_litter(cache)


def test_the_private_cache_rule_itself(tmp_path: Path) -> None:
    """``open_private_dir`` creates missing folders 0700 and takes them; refuses each hostile shape."""
    fd, where = kernel_cache.open_private_dir(tmp_path / "a" / "b")
    os.close(fd)
    assert where == str(tmp_path / "a" / "b")
    assert stat.S_IMODE((tmp_path / "a").stat().st_mode) == 0o700 == stat.S_IMODE((tmp_path / "a" / "b").stat().st_mode)
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "a")
    with pytest.raises(kernel_cache.Unsafe, match="link: is a symbolic link"):  # the cache itself: never
        kernel_cache.open_private_dir(link)
    if os.geteuid() == 0:  # above the cache only a link root owns in a folder only root writes is followed
        fd, _ = kernel_cache.open_private_dir(link / "b")
        os.close(fd)
        os.lchown(link, 65534, 65534)
    with pytest.raises(kernel_cache.Unsafe, match="link: is a symbolic link"):
        kernel_cache.open_private_dir(link / "b")
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    (tmp_path / "to-open").symlink_to(open_dir)  # a followed link still leads only to checked folders
    with pytest.raises(kernel_cache.Unsafe, match="(symbolic link|writable by others)"):
        kernel_cache.open_private_dir(tmp_path / "to-open" / "k")
    assert not (open_dir / "k").exists()
    (tmp_path / "a" / "b").chmod(0o720)
    with pytest.raises(kernel_cache.Unsafe, match="writable by others"):
        kernel_cache.open_private_dir(tmp_path / "a" / "b")
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)  # as /tmp: what we own in it cannot be swapped by others
    fd, _ = kernel_cache.open_private_dir(sticky / "mine")
    os.close(fd)


def test_a_kernel_call_that_fails_hands_the_run_to_torch(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A return code is not an out-of-memory error (DF407): torch's path runs, and it says why."""
    assert cpu_kernel.kernel() is not None
    gen = torch.Generator().manual_seed(6)
    x = torch.randn(2, 3, 16, generator=gen).to(torch.bfloat16)
    w = torch.randn(8, 16, generator=gen).to(torch.bfloat16)
    monkeypatch.setattr(cpu_kernel, "_call", lambda *a, **kw: 1)
    got = cpu_kernel.linear(x, w)
    assert torch.equal(got, torch.nn.functional.linear(x, w))
    assert "returned error 1" in (cpu_kernel.failed() or "") and not cpu_kernel.usable(w)
    model = torch.nn.Module()
    model.LINEARS = ("proj",)  # type: ignore[assignment]
    model.proj = torch.nn.Linear(16, 8, bias=False).to(torch.bfloat16)
    setattr(model.proj.weight, prepack.KERNEL, True)
    assert prepack.cpu_linear_path(model) == "torch"
    assert "returned error 1" in (prepack.kernel_failed_note() or "")
    assert "not used (a call of the kernel returned error 1" in (prepack.slow_path_note(model) or "")


def test_the_loading_line_says_the_kernel_was_built_privately(cache: Path) -> None:
    private(cache).chmod(0o777)
    model = torch.nn.Module()
    model.LINEARS = ("proj",)  # type: ignore[assignment]
    model.proj = torch.nn.Linear(16, 8, bias=False).to(torch.bfloat16)
    assert cpu_kernel.kernel() is not None
    setattr(model.proj.weight, prepack.KERNEL, True)
    note = prepack.slow_path_note(model) or ""
    assert note.startswith("the AVX2 kernel was built for this run alone") and "writable by others" in note


@pytest.mark.slow
@pytest.mark.parametrize("case", ["planted in a world-writable cache", "truncated cached library", "a file as the cache",
                                  "a folder at the library's name"])
def test_smoke_run_on_the_kernel_path_with_a_hostile_cache(cache: Path, tmp_path: Path, case: str) -> None:
    """The red-team cases end to end (``ONEDNN_MAX_CPU_ISA=AVX2`` forces the kernel path): exit 0
    on our own build, not SIGBUS or DF001 naming a hidden temporary file; the planted code never
    ran; the loading line says why the kernel was built for this run alone or rebuilt."""
    data, marker = plant(tmp_path)
    want = {"planted in a world-writable cache": "writable by others", "truncated cached library": "do not match",
            "a file as the cache": "is not a folder", "a folder at the library's name": "is a folder"}[case]
    if case.startswith("planted"):
        put(private(cache), data, digest=hashlib.sha256(data).hexdigest())
        cache.chmod(0o777)
    elif case.startswith("truncated"):
        assert_kernel_works()  # a good build in the cache, then cut as a full disk would
        lib = cache / name()
        lib.write_bytes(lib.read_bytes()[:4096])
    elif case.startswith("a file"):
        cache.parent.mkdir(mode=0o700)
        cache.write_text("not a folder")
    else:
        (private(cache) / name()).mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ONEDNN_MAX_CPU_ISA": "AVX2", "DFLASH_CKPT_KERNEL_DIR": str(cache)}
    env.pop("DFLASH_CKPT_NO_KERNEL", None)
    done = subprocess.run([sys.executable, "-m", "dflash_ckpt", "smoke-run", str(PAIR / "draft"), "--target",
                           str(PAIR / "target"), "-n", "8"], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=600)
    assert done.returncode == 0, (done.returncode, done.stdout[-2000:], done.stderr[-2000:])
    assert not marker.exists()
    said = done.stdout + done.stderr
    assert "AVX2 bf16 kernel (" in said and want in said, said[-3000:]
    how = "rebuilt into the cache" if case.startswith("truncated") else "built for this run alone"
    assert f"the AVX2 kernel was {how} (" in said
