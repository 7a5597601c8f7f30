"""A checkpoint folder on this machine (a plain checkpoint or a Hugging Face cache snapshot)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from dflash_ckpt.errors import InputError
from dflash_ckpt.sources.base import Source, os_error


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
                raise os_error(err, str(self.folder), code="DF001") from None
            files = []
            for entry in entries:
                try:
                    # Follows links: cache snapshots are links to blobs. A dangling link or loop
                    # still counts as a file here so that reading it gives the precise error.
                    # Not only regular files: a FIFO or device named config.json is reported as what
                    # it is (by ``size``), not as a missing file.
                    if not entry.is_dir():
                        files.append(entry.name)
                except OSError:
                    files.append(entry.name)
            self._files = files
        return self._files

    def size(self, name: str) -> int:
        try:
            st = os.stat(self.path(name))
        except OSError as err:
            raise os_error(err, self.where(name), code="DF001") from None
        if not stat.S_ISREG(st.st_mode):
            from dflash_ckpt.sources.files import file_kind  # noqa: PLC0415

            raise InputError(f"is {file_kind(st.st_mode)}, not a regular file", code="DF001", path=self.where(name))
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
            raise os_error(err, self.where(name), code="DF001") from None
        self.bytes_read += len(data)
        return data
