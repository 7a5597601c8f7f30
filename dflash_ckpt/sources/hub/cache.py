"""What this tool keeps in the Hugging Face cache, and how it finds things there without the network.

The layout is huggingface_hub's (``models--org--name/{refs,snapshots,blobs}``), so files that
``hf download`` or ``snapshot_download`` fetched are used as they are, and files we fetch
through huggingface_hub land where every other tool finds them. Beside it, in the repo's own
folder (which ``hf cache rm`` deletes with the repo), ``dflash-ckpt/<commit>/`` holds what
huggingface_hub has no place for:

- ``files.json``: the repo's file list with sizes at that commit, so that a later run, offline
  or with the commit pinned, knows the files without asking the Hub;
- ``<file>.head``: the first bytes of a weights file, as far as they were read (its safetensors
  header). A commit is immutable, so neither ever goes stale.

Only the standard library is used here: the cache is read before huggingface_hub is imported
(``huggingface_hub.constants`` reads the environment once, when imported, 4-12 ms;
``try_to_load_from_cache`` and ``repo_folder_name`` come with ``file_download``, 160-350 ms to
import here: ``benchmarks/bench_hub_helpers.py``).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dflash_ckpt import limits
from dflash_ckpt.sources.base import user_path
from dflash_ckpt.sources.hub.errors import HubError
from dflash_ckpt.sources.hub.ids import inside, is_git_id, is_sha256, name_problem, shown

# The Hugging Face cache is located without importing huggingface_hub (its constants are fixed
# at import time; reading the environment at call time lets one process honour a changed HF_HOME).


def hf_hub_cache() -> Path:
    """The hub cache folder, by the same precedence huggingface_hub uses."""
    env = os.environ
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if env.get(var):
            return user_path(env[var], var)
    if env.get("HF_HOME"):
        return user_path(env["HF_HOME"], "HF_HOME") / "hub"
    xdg = env.get("XDG_CACHE_HOME") or str(user_path("~", "the home folder (set HF_HOME)") / ".cache")
    return user_path(xdg, "XDG_CACHE_HOME") / "huggingface" / "hub"


def hf_offline() -> bool:
    """``HF_HUB_OFFLINE`` (or the older ``TRANSFORMERS_OFFLINE``) set to a true value."""
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        if os.environ.get(var, "").strip().upper() in {"1", "ON", "YES", "TRUE"}:
            return True
    return False


#: Our folder inside a cached repo's folder.
OWN_DIR = "dflash-ckpt"
LISTING_FORMAT = 1


@dataclass(frozen=True)
class RemoteFile:
    """One file of a repo at a commit, as the Hub lists it."""

    name: str
    size: int
    lfs_sha256: str | None = None
    #: The git blob id (what huggingface_hub names a small file's blob by); ``None`` when not listed.
    blob_id: str | None = None


@dataclass(frozen=True)
class RepoListing:
    """The files of a repo at one commit."""

    repo_id: str
    commit: str
    files: dict[str, RemoteFile]

    def top_level(self) -> list[str]:
        """Names of the files at the top of the repo (every checkpoint layout keeps weights there)."""
        return sorted(n for n in self.files if "/" not in n)


def is_commit(revision: str | None) -> bool:
    """A full commit id; anything else given as a revision is a branch or tag name."""
    return is_git_id(revision)


def count_problem(body: bytes | bytearray) -> str | None:
    """Why a listing's raw bytes are too many things to parse (``None`` when they are not): more
    files, JSON objects or values than ``limits.MAX_LISTING_*`` allow, counted by substring."""
    files = body.count(b'"rfilename"')
    if files > limits.MAX_LISTING_FILES:
        return f"{files:,} files, more than the {limits.MAX_LISTING_FILES:,} a listing may name"
    objects = body.count(b"{")
    if objects > limits.MAX_LISTING_OBJECTS:
        return f"{objects:,} JSON objects, more than the {limits.MAX_LISTING_OBJECTS:,} a listing may hold"
    items = body.count(b",")
    if items > limits.MAX_LISTING_ITEMS:
        return f"{items:,} JSON values, more than the {limits.MAX_LISTING_ITEMS:,} a listing may hold"
    return None


class RepoCache:
    """The cache folder of one model repo."""

    def __init__(self, cache_dir: Path, repo_id: str) -> None:
        self.cache_dir = cache_dir
        self.repo_id = repo_id
        self.folder = cache_dir / ("models--" + repo_id.replace("/", "--"))

    def holds(self, path: Path) -> bool:
        """Whether ``path`` resolves inside this repo's cache folder (no link leads elsewhere)."""
        return inside(path, self.folder)

    def _write(self, path: Path, data: bytes) -> None:
        """Write ``data`` to ``path`` inside the repo's folder only (a link out of it is not followed)
        through a temporary file and a rename, so readers see all or nothing. Best effort: the
        cache may be read-only, and every record here can be made again from the Hub."""
        if not self.holds(path):
            return
        tmp = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, path)
        except BaseException as exc:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
            if not isinstance(exc, OSError):
                raise

    # -- refs and snapshots (huggingface_hub's layout) -----------------------------------------

    def read_ref(self, revision: str) -> str | None:
        """The commit a branch or tag pointed to when it was last resolved, if recorded."""
        if is_commit(revision):
            return revision
        if name_problem(revision) is not None:
            return None
        try:
            commit = (self.folder / "refs" / revision).read_text().strip()
        except (OSError, UnicodeDecodeError):
            return None
        return commit if is_commit(commit) else None

    def write_ref(self, revision: str, commit: str) -> None:
        """Record ``revision -> commit`` as huggingface_hub does (best effort: the cache may be read-only)."""
        if is_commit(revision) or name_problem(revision) or self.read_ref(revision) == commit:
            return
        self._write(self.folder / "refs" / revision, commit.encode())

    def snapshot_dir(self, commit: str) -> Path:
        return self.folder / "snapshots" / commit

    def snapshot_file(self, commit: str, name: str) -> Path | None:
        """The cached copy of ``name`` at ``commit``, when huggingface_hub has downloaded it."""
        if name_problem(name):
            return None
        path = self.snapshot_dir(commit) / name
        try:
            return path if path.is_file() else None
        except OSError:
            return None

    # -- our own records -----------------------------------------------------------------------

    def _own(self, commit: str) -> Path:
        return self.folder / OWN_DIR / commit

    def write_listing(self, listing: RepoListing) -> None:
        doc = {
            "format": LISTING_FORMAT,
            "repo_id": listing.repo_id,
            "commit": listing.commit,
            "files": {
                f.name: {
                    "size": f.size,
                    **({"lfs_sha256": f.lfs_sha256} if f.lfs_sha256 else {}),
                    **({"blob_id": f.blob_id} if f.blob_id else {}),
                }
                for f in listing.files.values()
            },
        }
        self._write(self._own(listing.commit) / "files.json", json.dumps(doc, indent=1).encode())

    def write_hf_tree(self, listing: RepoListing) -> None:
        """huggingface_hub's ``trees/<commit>.json`` (its format 1), so that its own offline lookups
        know the files; written only when every file has its git blob id (best effort)."""
        if any(f.blob_id is None for f in listing.files.values()):
            return
        files: dict[str, Any] = {}
        for f in sorted(listing.files.values(), key=lambda f: f.name):
            files[f.name] = {"size": f.size, "blob_id": f.blob_id}
            if f.lfs_sha256:
                files[f.name].update(lfs_sha256=f.lfs_sha256, lfs_size=f.size)
        self._write(self.folder / "trees" / f"{listing.commit}.json",
                    json.dumps({"format_version": 1, "files": files}, indent=1).encode())

    def read_listing(self, commit: str) -> RepoListing | None:
        """Our file list for ``commit``, else huggingface_hub's own tree listing for it, else ``None``.

        Either is input like the Hub's answer: capped and counted before it is parsed, every name
        and id checked; a hostile or broken one ends the command in one line naming the file
        (``HubError``) rather than building a path from it.
        """
        if not is_commit(commit):
            return None
        own = self._load(self._own(commit) / "files.json")
        if own is not None and own.get("format") == LISTING_FORMAT and own.get("commit") == commit:
            return self._listing(commit, self._own(commit) / "files.json", own.get("files"), "lfs_sha256", "size")
        path = self.folder / "trees" / f"{commit}.json"
        tree = self._load(path)
        if tree is not None and tree.get("format_version") == 1:
            return self._listing(commit, path, tree.get("files"), "lfs_sha256", "lfs_size")
        return None

    def _load(self, path: Path) -> dict[str, Any] | None:
        try:
            with open(path, "rb") as fh:
                body = fh.read(limits.MAX_LISTING_BYTES + 1)
        except OSError:
            return None
        problem = "larger than 64 MiB" if len(body) > limits.MAX_LISTING_BYTES else count_problem(body)
        if problem is not None:
            raise self._corrupt(path, f"a listing of {problem}")
        try:
            doc = json.loads(body)
        except (ValueError, RecursionError):
            return None  # a torn or foreign file: as if absent, the Hub is asked instead
        return doc if isinstance(doc, dict) else None

    def _listing(self, commit: str, path: Path, entries: object, sha_key: str, size_key: str) -> RepoListing:
        if not isinstance(entries, dict):
            raise self._corrupt(path, "its 'files' is not an object")
        if len(entries) > limits.MAX_LISTING_FILES:
            raise self._corrupt(path, f"{len(entries):,} files, more than the {limits.MAX_LISTING_FILES:,} a listing may name")
        files: dict[str, RemoteFile] = {}
        for name, info in entries.items():
            problem = name_problem(name)
            if problem is not None:
                raise self._corrupt(path, f"the file name {shown(name)} is {problem}")
            if not isinstance(info, dict):
                raise self._corrupt(path, f"the entry of {shown(name)} is not an object")
            size = info.get(size_key) if info.get(size_key) is not None else info.get("size")
            sha256, blob_id = info.get(sha_key), info.get("blob_id")
            if not isinstance(size, int) or isinstance(size, bool) or not 0 <= size <= limits.MAX_USIZE:
                raise self._corrupt(path, f"the size of {shown(name)} is {shown(size, 40)}")
            if sha256 is not None and not is_sha256(sha256):
                raise self._corrupt(path, f"'{sha_key}' of {shown(name)} is {shown(sha256, 40)}, not 64 hex digits")
            if blob_id is not None and not is_git_id(blob_id):
                raise self._corrupt(path, f"'blob_id' of {shown(name)} is {shown(blob_id, 40)}, not 40 hex digits")
            files[name] = RemoteFile(name, size, sha256, blob_id)
        return RepoListing(self.repo_id, commit, files)

    def _corrupt(self, path: Path, problem: str) -> HubError:
        return HubError(
            f"not a listing this tool trusts: {problem}; delete it (or the repo's folder: "
            f"hf cache rm {self.repo_id}) and run again", path=path
        )

    def read_prefix(self, commit: str, name: str) -> bytes:
        """The first bytes of ``name`` read on an earlier run (empty when none)."""
        if name_problem(name) or "/" in name:
            return b""
        try:
            return (self._own(commit) / f"{name}.head").read_bytes()
        except OSError:
            return b""

    def write_prefix(self, commit: str, name: str, data: bytes) -> None:
        if name_problem(name) or "/" in name:
            return
        self._write(self._own(commit) / f"{name}.head", data)


def hub_cache_snapshot(folder: Path) -> str | None:
    """The repo id when ``folder`` is a snapshot in a Hugging Face cache
    (``.../models--org--name/snapshots/<commit>``), else ``None``.

    The real path is judged, so that a link to a snapshot, or ``snapshots/<c>/../<c>``, is the
    snapshot it reaches (``normalize --in-place`` refuses all three alike).
    """
    real = Path(os.path.realpath(folder))
    snapshots, repo_dir = real.parent, real.parent.parent
    if snapshots.name != "snapshots" or not (repo_dir / "blobs").is_dir():
        return None
    kind, sep, rest = repo_dir.name.partition("--")
    if not sep or kind not in ("models", "datasets", "spaces") or "--" not in rest:
        return None
    return rest.replace("--", "/", 1)
