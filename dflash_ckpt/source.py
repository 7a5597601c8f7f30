"""Where a checkpoint's files come from: a local folder, the local Hugging Face cache, the Hub.

Everything downstream reads through a ``Source`` so that the checks never care whether bytes come
from disk or over HTTP range requests. A source reads only what it is asked for: a whole small
JSON file, or a byte range of a safetensors file (its header), never tensor data.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from abc import ABC, abstractmethod
from pathlib import Path
from typing import NamedTuple

from dflash_ckpt.errors import InputError

#: ``org/name`` as the Hub spells repo ids, optionally ``@revision``.
REPO_ID_RE = re.compile(r"^(?P<repo>[A-Za-z0-9][\w.\-]*/[\w.\-]+)(?:@(?P<rev>[^\s@]+))?$")
#: JSON files larger than this are not configs; refusing them keeps a bad argument cheap.
MAX_JSON_BYTES = 64 * 1024 * 1024


class Source(ABC):
    """Read-only access to the files of one checkpoint."""

    #: What the user typed, used to name the checkpoint in reports.
    label: str
    #: ``local``, ``cache`` or ``hub``.
    kind: str

    def __init__(self) -> None:
        self.bytes_read = 0

    @abstractmethod
    def where(self, name: str) -> str:
        """How to name file ``name`` of this checkpoint in a message (a path or ``repo:file``)."""

    @abstractmethod
    def list_files(self) -> list[str]:
        """Relative names of the top-level files (weights live at the top level in every layout)."""

    @abstractmethod
    def size(self, name: str) -> int:
        """Size in bytes of file ``name``; ``InputError`` if it cannot be read."""

    @abstractmethod
    def read(self, name: str, offset: int = 0, length: int | None = None) -> bytes:
        """``length`` bytes of ``name`` from ``offset`` (to the end when ``None``)."""

    def exists(self, name: str) -> bool:
        return name in self.list_files()

    def read_json_bytes(self, name: str) -> bytes:
        """The bytes of a small JSON file, refusing files too large to be a config."""
        size = self.size(name)
        if size > MAX_JSON_BYTES:
            raise InputError(
                f"{self.where(name)}: {size} bytes is too large for a JSON config "
                f"(limit {MAX_JSON_BYTES})",
                code="DF001",
            )
        return self.read(name)

    @property
    def local_dir(self) -> Path | None:
        """The folder holding the files, when there is one on this machine."""
        return None


def describe_os_error(err: OSError, path: str) -> str:
    """One line for an OS error, naming the path and what to do."""
    if err.errno == errno.ENOENT:
        return f"{path}: no such file or folder"
    if err.errno in (errno.EACCES, errno.EPERM):
        return f"{path}: permission denied; make it readable (chmod) or run as its owner"
    if err.errno == errno.ELOOP:
        return f"{path}: symbolic link loop; point the link at a real file"
    if err.errno == errno.EISDIR:
        return f"{path}: is a folder, expected a file"
    if err.errno == errno.ENOTDIR:
        return f"{path}: a part of the path is not a folder"
    return f"{path}: {err.strerror or err}"


class LocalSource(Source):
    """A folder on this machine (a plain checkpoint or a snapshot of the Hugging Face cache)."""

    kind = "local"

    def __init__(self, folder: Path, label: str | None = None, kind: str = "local") -> None:
        super().__init__()
        self.folder = folder
        self.label = label if label is not None else str(folder)
        self.kind = kind
        self._files: list[str] | None = None

    @property
    def local_dir(self) -> Path:
        return self.folder

    def path(self, name: str) -> Path:
        return self.folder / name

    def where(self, name: str) -> str:
        return str(self.folder / name)

    def list_files(self) -> list[str]:
        if self._files is None:
            try:
                entries = sorted(os.scandir(self.folder), key=lambda e: e.name)
            except OSError as err:
                raise InputError(describe_os_error(err, str(self.folder)), code="DF001") from None
            files = []
            for entry in entries:
                try:
                    # Follows links: cache snapshots are links to blobs. A dangling link or loop
                    # still counts as a file here so that reading it gives the precise error.
                    if entry.is_file() or (entry.is_symlink() and not entry.is_dir()):
                        files.append(entry.name)
                except OSError:
                    files.append(entry.name)
            self._files = files
        return self._files

    def size(self, name: str) -> int:
        try:
            st = os.stat(self.path(name))
        except OSError as err:
            raise InputError(describe_os_error(err, self.where(name)), code="DF001") from None
        if not stat.S_ISREG(st.st_mode):
            raise InputError(f"{self.where(name)}: not a regular file", code="DF001")
        return st.st_size

    def read(self, name: str, offset: int = 0, length: int | None = None) -> bytes:
        try:
            # Unbuffered: a buffered reader would pull a whole block to return an 8-byte length.
            with open(self.path(name), "rb", buffering=0) as fh:
                if length is None:
                    length = os.fstat(fh.fileno()).st_size - offset
                chunks, got = [], 0
                while got < length:
                    chunk = os.pread(fh.fileno(), length - got, offset + got)
                    if not chunk:
                        break
                    chunks.append(chunk)
                    got += len(chunk)
                data = b"".join(chunks)
        except OSError as err:
            raise InputError(describe_os_error(err, self.where(name)), code="DF001") from None
        self.bytes_read += len(data)
        return data


# ---------------------------------------------------------------------------------------------
# The Hugging Face cache, read without importing huggingface_hub (its constants are fixed at
# import time; reading the environment here lets one process honour a changed HF_HOME).


def hf_hub_cache() -> Path:
    """The hub cache folder, by the same precedence huggingface_hub uses."""
    env = os.environ
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if env.get(var):
            return Path(env[var]).expanduser()
    if env.get("HF_HOME"):
        return Path(env["HF_HOME"]).expanduser() / "hub"
    xdg = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg).expanduser() / "huggingface" / "hub"


def hf_offline() -> bool:
    """``HF_HUB_OFFLINE`` (or the older ``TRANSFORMERS_OFFLINE``) set to a true value."""
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        if os.environ.get(var, "").strip().upper() in {"1", "ON", "YES", "TRUE"}:
            return True
    return False


def cached_snapshot(repo_id: str, revision: str | None) -> Path | None:
    """The cached snapshot folder of ``repo_id`` at ``revision`` (default ``main``), if any."""
    repo_dir = hf_hub_cache() / ("models--" + repo_id.replace("/", "--"))
    rev = revision or "main"
    if re.fullmatch(r"[0-9a-f]{40}", rev):
        commit = rev
    else:
        try:
            commit = (repo_dir / "refs" / rev).read_text().strip()
        except OSError:
            return None
    snap = repo_dir / "snapshots" / commit
    return snap if snap.is_dir() else None


class RepoRef(NamedTuple):
    """A Hub repo id with an optional revision, parsed from ``org/name[@rev]``."""

    repo_id: str
    revision: str | None

    @property
    def label(self) -> str:
        return f"{self.repo_id}@{self.revision}" if self.revision else self.repo_id


def parse_repo_ref(arg: str, revision: str | None = None) -> RepoRef | None:
    """``org/name`` or ``org/name@rev`` as a ``RepoRef``; ``None`` if ``arg`` is not a repo id."""
    m = REPO_ID_RE.match(arg)
    if not m or ".." in m.group("repo") or m.group("repo").endswith(".json"):
        return None
    rev = m.group("rev")
    if rev and revision and rev != revision:
        raise InputError(
            f"{arg}: revision given twice ('@{rev}' and --revision {revision}); keep one",
            code="DF001",
        )
    return RepoRef(m.group("repo"), rev or revision)


def looks_like_path(arg: str) -> bool:
    """Arguments that can only mean a folder: absolute, ``./``, ``~``, or more than one slash."""
    return (
        arg.startswith((".", "/", "~"))
        or arg.count("/") != 1
        or os.sep != "/" and os.sep in arg
    )


def open_source(
    arg: str,
    *,
    revision: str | None = None,
    token: str | None = None,
    role: str = "draft",
) -> Source:
    """Resolve a command-line argument to a ``Source``.

    A path that exists wins (as with ``from_pretrained``); otherwise ``org/name[@rev]`` is a Hub
    repo, read from the local cache first and, unless offline, over the network.
    """
    path = Path(arg).expanduser()
    try:
        is_dir = path.is_dir()
        exists = is_dir or path.exists() or path.is_symlink()
    except OSError as err:
        raise InputError(describe_os_error(err, arg), code="DF001") from None
    if is_dir:
        try:
            os.listdir(path)
        except OSError as err:
            raise InputError(describe_os_error(err, arg), code="DF001") from None
        return LocalSource(path, label=arg)
    if exists:
        try:
            path.stat()
        except OSError as err:
            raise InputError(describe_os_error(err, arg), code="DF001") from None
        raise InputError(
            f"{arg}: is a file; give the {role} checkpoint folder (the one holding config.json)",
            code="DF001",
        )
    ref = None if looks_like_path(arg) else parse_repo_ref(arg, revision)
    if ref is None:
        raise InputError(
            f"{arg}: no such folder; give a local {role} folder or a Hub repo id (org/name)",
            code="DF001",
        )
    from dflash_ckpt.hub import open_hub_source  # noqa: PLC0415 - only Hub arguments pay for it

    return open_hub_source(ref, token=token, role=role)


def local_folder(
    arg: str,
    *,
    revision: str | None = None,
    token: str | None = None,
    role: str = "draft",
    allow_patterns: list[str] | None = None,
) -> tuple[Path, str]:
    """A folder on this machine holding the checkpoint, and its label for messages.

    For ``normalize`` and ``smoke-run``, which need real files: a local folder is returned as
    is; a Hub repo id is downloaded (only ``allow_patterns``) into the Hugging Face cache, or
    taken from it, and its snapshot folder returned.
    """
    src = open_source(arg, revision=revision, token=token, role=role) if looks_like_path(arg) or Path(arg).expanduser().exists() else None
    if src is not None:
        return src.local_dir, src.label  # type: ignore[return-value]
    ref = parse_repo_ref(arg, revision)
    if ref is None:
        raise InputError(f"{arg}: no such folder; give a local {role} folder or a Hub repo id (org/name)", code="DF001")
    from dflash_ckpt.hub import download_snapshot  # noqa: PLC0415

    return download_snapshot(ref, token=token, role=role, allow_patterns=allow_patterns), ref.label
