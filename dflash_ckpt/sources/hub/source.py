"""A ``Source`` over one Hub repo at one commit that never downloads tensor data.

Small files (``config.json``, the shard index, ``tokenizer_config.json``) are fetched whole
(``HubClient.download``: capped at their listed size) and land in the Hugging Face cache. Weight files are read with HTTP range
requests: a read that starts at byte 0 fetches a little more than asked (``prefetch``) so that
the 8-byte length and the JSON header of a safetensors file usually come in one request, and the
bytes read from the start of a file are kept (in memory and in the cache) so that the next run,
or an offline one, reads them from disk. Sizes come from the repo listing, so the truncation
check compares the header with the size the Hub reports.

huggingface_hub's ``get_safetensors_metadata`` is not used: it returns parsed tensor info but
neither the raw header (our checks validate it byte by byte and report DF203/DF204 with the
reason) nor the file size the truncation check needs, and it fetches 100 kB per file where
draft headers take 0.2 to 13 kB.
"""

from __future__ import annotations

import threading
from pathlib import Path

from dflash_ckpt.errors import InputError
from dflash_ckpt.limits import MAX_INDEX_BYTES
from dflash_ckpt.sources.hub.cache import RepoCache, RepoListing
from dflash_ckpt.sources.hub.errors import HubError
from dflash_ckpt.sources.hub.net import HubClient
from dflash_ckpt.sources.base import Source, os_error
from dflash_ckpt.sources.repo_ref import RepoRef

#: First request of a run: enough for the header of every published single-file draft (13 kB at
#: most); shared among the shards when there are several (each shard holds part of the tensors).
PREFETCH_FIRST = 16 * 1024
#: Later files of the same repo: twice the largest prefix used so far, within these bounds.
PREFETCH_MIN = 2 * 1024
PREFETCH_MAX = 64 * 1024


class HubSource(Source):
    """Files of ``listing.repo_id`` at ``listing.commit``; ``client`` is ``None`` when offline."""

    kind = "hub"

    def __init__(self, ref: RepoRef, listing: RepoListing, cache: RepoCache, client: HubClient | None) -> None:
        super().__init__()
        self.ref = ref
        self.label = ref.label
        self.listing = listing
        self.commit = listing.commit
        self.cache = cache
        self.client = client
        self._prefixes: dict[str, bytes] = {}
        self._whole: dict[str, bytes] = {}
        self._lock = threading.RLock()
        shards = sum(1 for n in listing.top_level() if n.endswith(".safetensors"))
        self._prefetch = max(PREFETCH_MIN, PREFETCH_FIRST // max(1, shards))
        self._used = 0

    def where(self, name: str) -> str:
        return f"{self.label}:{name}"

    def list_files(self) -> list[str]:
        return self.listing.top_level()

    def size(self, name: str) -> int:
        rf = self.listing.files.get(name)
        if rf is None:
            raise InputError(f"not in the repo at commit {self.commit[:12]}", code="DF001", path=self.where(name))
        return rf.size

    def read(self, name: str, offset: int = 0, length: int | None = None) -> bytes:
        size = self.size(name)
        local = self.cache.snapshot_file(self.commit, name)
        if local is not None:
            data = self._read_local(local, offset, length)
        elif length is None:
            data = self._read_whole(name)[offset:]
        else:
            data = self._read_range(name, size, offset, length)
        self.bytes_read += len(data)
        return data

    # -- the three places bytes come from ------------------------------------------------------

    def _read_local(self, path: Path, offset: int, length: int | None) -> bytes:
        try:
            with open(path, "rb") as fh:
                fh.seek(offset)
                # whole files read this way are JSON, whose size the caller checked on the listing
                return fh.read(MAX_INDEX_BYTES + 1) if length is None else fh.read(length)
        except OSError as err:
            raise os_error(err, str(path), code="DF001") from None

    def _read_whole(self, name: str) -> bytes:
        with self._lock:
            if name not in self._whole:
                rf = self.listing.files[name]
                path = self._require_client(name).download(name, rf.size, rf.lfs_sha256, rf.blob_id)
                try:
                    self._whole[name] = path.read_bytes()
                except OSError as err:
                    raise os_error(err, str(path), code="DF001") from None
            return self._whole[name]

    def _read_range(self, name: str, size: int, offset: int, length: int) -> bytes:
        end = min(offset + length, size)  # exclusive
        if end <= offset:
            return b""
        with self._lock:
            prefix = self._prefix(name)
            if end > len(prefix):
                client = self._require_client(name)
                if offset > len(prefix):  # a read far from the start: fetch it alone, keep nothing
                    return client.fetch_range(name, offset, end - 1, size)
                want_end = max(end, min(size, self._prefetch)) if not prefix else end
                prefix += client.fetch_range(name, len(prefix), want_end - 1, size)
                self._prefixes[name] = prefix
                self.cache.write_prefix(self.commit, name, prefix)
            self._used = max(self._used, end)
            self._prefetch = min(PREFETCH_MAX, max(PREFETCH_MIN, 2 * self._used))
            return prefix[offset:end]

    def _prefix(self, name: str) -> bytes:
        if name not in self._prefixes:
            cached = self.cache.read_prefix(self.commit, name)
            self._prefixes[name] = cached if len(cached) <= self.size(name) else b""
        return self._prefixes[name]

    def _require_client(self, name: str) -> HubClient:
        if self.client is None:
            raise HubError(
                f"not in the local Hugging Face cache at {self.cache.folder} and "
                "HF_HUB_OFFLINE is set; run once without HF_HUB_OFFLINE, or give a local folder", path=self.where(name)
            )
        return self.client
