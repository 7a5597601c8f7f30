"""A loopback stand-in for the Hugging Face Hub, for tests and benchmarks.

It serves fixture folders as model repos, answering exactly the requests huggingface_hub 2.4
sends for what this tool does, with the headers it reads:

- ``GET /api/models/{repo}`` and ``/api/models/{repo}/revision/{rev}`` (``?blobs=true`` adds sizes,
  git blob ids and LFS info to ``siblings``): repo info, whose ``sha`` pins a revision;
- ``GET /api/models/{repo}/tree/{rev}[/{path}]``: the file list ``snapshot_download`` walks;
- ``HEAD``/``GET /{repo}/resolve/{rev}/{file}``: small files answer 200 with ``ETag`` (git blob
  id), ``X-Repo-Commit`` and ``Content-Length``; LFS files (weights) answer 302 to the "CDN" with
  ``X-Repo-Commit``, ``X-Linked-Etag`` (sha256) and ``X-Linked-Size``, as the Hub does;
- the CDN is a second server on another port (another origin, so clients drop the
  ``Authorization`` header on the redirect, as they must with a real CDN). It honours ``Range``
  with ``206`` and ``Content-Range``, and streams bodies from disk in chunks, so sparse
  multi-GB fixtures are served without being held in memory.

Errors carry the ``X-Error-Code`` huggingface_hub maps to its exceptions: ``RepoNotFound``
(404, or 401 without a token), ``RevisionNotFound``, ``EntryNotFound``, ``GatedRepo`` (401 without
a token, 403 with a token that has no access); an unknown token gets 401 "Invalid credentials".

Tests script failures with ``fail``/``delay``/``corrupt`` and read ``requests`` (every request
seen, with its status and the bytes on the wire) to assert what went over the network. Hostile
answers (issue 10) are ``corrupt`` kinds too: ``oversize`` (a Content-Length ``extra`` bytes beyond
the file), ``overflow`` (no Content-Length, ``extra`` bytes more than the file, then close),
``gzip`` (a gzip bomb sent as ``Content-Encoding: gzip``), ``drip`` (the body one byte every
``interval`` seconds), ``drip-head`` (the response head itself that slowly), ``flip`` (the listed
length with other bytes), ``cut`` (``extra`` bytes of the body, then the connection closed) and ``bad-name`` (repo info listing a file outside the repo); ``tamper``
rewrites a repo's listing and ``raw_info`` replaces it with any bytes; ``fail`` takes a
``retry_after`` header value. Every loop is bounded, and the server only listens on 127.0.0.1.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

LFS_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".ckpt")
LFS_MIN_SIZE = 10 * 1024 * 1024
CHUNK = 1024 * 1024


def _sha1(data: bytes) -> str:
    return hashlib.sha1(data).hexdigest()  # noqa: S324 - git ids, not security


@dataclass(frozen=True)
class ServedFile:
    name: str
    path: Path
    size: int
    blob_id: str
    sha256: str | None  # LFS files only

    @property
    def lfs(self) -> bool:
        return self.sha256 is not None


@dataclass
class Commit:
    sha: str
    files: dict[str, ServedFile]


@dataclass
class Repo:
    repo_id: str
    refs: dict[str, str]  # branch or tag -> commit sha
    commits: dict[str, Commit]
    gated: bool = False
    private: bool = False
    tokens: frozenset[str] = frozenset()

    def commit(self, revision: str) -> Commit | None:
        sha = self.refs.get(revision, revision)
        return self.commits.get(sha)


@dataclass
class Seen:
    """One request as the server saw it."""

    server: str  # "hub" or "cdn"
    method: str
    path: str
    query: str
    headers: dict[str, str]
    status: int = 0
    body_bytes: int = 0
    wire_bytes: int = 0  # request head + response head + response body


@dataclass
class Fault:
    pattern: re.Pattern[str]
    action: str  # status | delay | html | bad-range | drop
    times: int
    method: str | None = None
    server: str | None = None
    status: int = 503
    seconds: float = 0.0
    extra: int = 0
    interval: float = 0.0
    retry_after: str | None = None


#: LFS files up to this size are listed with the sha256 of their content, which clients verify.
#: Above it (the published-size sparse drafts, gigabytes of zeros), hashing per test run buys
#: nothing and the listed digest is a stand-in: only range reads (inspect) may be made of them, a
#: download that checks the digest is refused.
REAL_SHA256_MAX = 64 * 1024 * 1024


def _sha256_of(path: Path, repo_id: str, sha: str, name: str, size: int) -> str:
    with open(path, "rb") as fh:
        if size > REAL_SHA256_MAX:
            return hashlib.sha256(f"{repo_id}@{sha}/{name}:{size}:".encode() + fh.read(64 * 1024)).hexdigest()
        digest = hashlib.sha256()
        while chunk := fh.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _scan(folder: Path, repo_id: str, sha: str) -> dict[str, ServedFile]:
    files: dict[str, ServedFile] = {}
    for path in sorted(folder.rglob("*")):
        if not path.is_file():
            continue
        name = path.relative_to(folder).as_posix()
        size = path.stat().st_size
        if name.endswith(LFS_SUFFIXES) or size >= LFS_MIN_SIZE:
            digest = _sha256_of(path, repo_id, sha, name, size)
            blob = _sha1(f"version https://git-lfs.github.com/spec/v1\noid sha256:{digest}\nsize {size}\n".encode())
            files[name] = ServedFile(name, path, size, blob, digest)
        else:
            data = path.read_bytes()
            files[name] = ServedFile(name, path, size, _sha1(b"blob %d\0" % size + data), None)
    return files


class HubServer:
    """The Hub API and resolve endpoints on one port, the CDN on another; both on 127.0.0.1."""

    def __init__(self) -> None:
        self.repos: dict[str, Repo] = {}
        #: Every token the server knows; any other token is rejected with 401.
        self.known_tokens: set[str] = set()
        self._seen: list[Seen] = []
        self._faults: list[Fault] = []
        self._in_flight = 0
        #: The most requests the server was answering at once (concurrency of the client).
        self.max_in_flight = 0
        self._lock = threading.Lock()
        self._blobs: dict[str, ServedFile] = {}
        #: Hostile listings (issue 18): per repo, a function rewriting the repo-info siblings, or
        #: the raw bytes to answer repo info with instead of the real document.
        self.tamper: dict[str, Any] = {}
        self.raw_info: dict[str, bytes] = {}
        self._hub = _QuietServer(("127.0.0.1", 0), _handler(self, "hub"))
        self._cdn = _QuietServer(("127.0.0.1", 0), _handler(self, "cdn"))
        for srv in (self._hub, self._cdn):
            srv.daemon_threads = True
            threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    # -- set-up ------------------------------------------------------------------------------

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._hub.server_address[1]}"

    @property
    def cdn(self) -> str:
        return f"http://127.0.0.1:{self._cdn.server_address[1]}"

    def add_repo(
        self,
        repo_id: str,
        folder: Path | None = None,
        *,
        revisions: dict[str, Path] | None = None,
        gated: bool = False,
        private: bool = False,
        tokens: tuple[str, ...] = (),
    ) -> Repo:
        """Serve ``folder`` as ``main`` of ``repo_id`` (and each of ``revisions`` as a branch or tag)."""
        revs = {**({"main": folder} if folder is not None else {}), **(revisions or {})}
        refs: dict[str, str] = {}
        commits: dict[str, Commit] = {}
        for name, path in revs.items():
            sha = _sha1(f"{repo_id}@{name}:{Path(path).resolve()}".encode())
            refs[name] = sha
            commits[sha] = Commit(sha, _scan(Path(path), repo_id, sha))
            for f in commits[sha].files.values():
                if f.sha256:
                    self._blobs[f.sha256] = f
        repo = Repo(repo_id, refs, commits, gated, private, frozenset(tokens))
        self.known_tokens.update(tokens)
        self.repos[repo_id] = repo
        return repo

    def commit_of(self, repo_id: str, revision: str = "main") -> str:
        return self.repos[repo_id].refs[revision]

    # -- scripting -----------------------------------------------------------------------------

    def fail(
        self, pattern: str, *, status: int = 503, times: int = 1, method: str | None = None, server: str | None = None,
        retry_after: str | None = None,
    ) -> None:
        """Answer the next ``times`` requests whose path matches ``pattern`` with ``status``
        (and a ``Retry-After`` header when given)."""
        self._add(Fault(re.compile(pattern), "status", times, method, server, status=status, retry_after=retry_after))

    def delay(self, pattern: str, seconds: float, *, times: int = 1, server: str | None = None) -> None:
        """Hold the next ``times`` matching requests ``seconds`` before answering (for timeouts)."""
        self._add(Fault(re.compile(pattern), "delay", times, None, server, seconds=seconds))

    def corrupt(
        self, pattern: str, kind: str, *, times: int = 1, server: str | None = None, extra: int = 0, interval: float = 0.0,
    ) -> None:
        """Answer wrongly: ``html`` (a 200 HTML page), ``bad-range`` (a wrong Content-Range),
        ``drop`` (close the connection without an answer), or one of the hostile kinds above."""
        self._add(Fault(re.compile(pattern), kind, times, None, server, extra=extra, interval=interval))

    def _add(self, fault: Fault) -> None:
        with self._lock:
            self._faults.append(fault)

    def take_fault(self, server: str, method: str, path: str) -> Fault | None:
        with self._lock:
            for fault in self._faults:
                if fault.times <= 0 or fault.server not in (None, server) or fault.method not in (None, method):
                    continue
                if fault.pattern.search(path):
                    fault.times -= 1
                    return fault
        return None

    # -- what happened -------------------------------------------------------------------------

    def record(self, seen: Seen) -> None:
        with self._lock:
            self._seen.append(seen)

    @property
    def requests(self) -> list[Seen]:
        with self._lock:
            return list(self._seen)

    def wire_bytes(self) -> int:
        return sum(s.wire_bytes for s in self.requests)

    def body_bytes(self) -> int:
        return sum(s.body_bytes for s in self.requests)

    def reset(self) -> None:
        """Forget requests, pending faults and hostile listings (repos stay)."""
        with self._lock:
            self._seen.clear()
            self._faults.clear()
            self.tamper.clear()
            self.raw_info.clear()
            self.max_in_flight = 0

    def enter(self) -> None:
        with self._lock:
            self._in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self._in_flight)

    def leave(self) -> None:
        with self._lock:
            self._in_flight -= 1

    def close(self) -> None:
        for srv in (self._hub, self._cdn):
            srv.shutdown()
            srv.server_close()

    def blob(self, sha256: str) -> ServedFile | None:
        return self._blobs.get(sha256)


class _QuietServer(ThreadingHTTPServer):
    """Clients that hang up (timeouts, dropped connections in tests) are not server errors."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        import sys

        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)


def _handler(hub: HubServer, server: str) -> type[BaseHTTPRequestHandler]:
    class Handler(_Handler):
        pass

    Handler.hub = hub
    Handler.server_name = server
    return Handler


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    hub: HubServer
    server_name: str

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
        pass

    def do_GET(self) -> None:  # noqa: N802
        self._dispatch("GET")

    def do_HEAD(self) -> None:  # noqa: N802
        self._dispatch("HEAD")

    # -- plumbing ------------------------------------------------------------------------------

    def _dispatch(self, method: str) -> None:
        self.hub.enter()
        try:
            self._answer(method)
        finally:
            self.hub.leave()

    def _answer(self, method: str) -> None:
        parts = urlsplit(self.path)
        self.seen = Seen(
            self.server_name, method, unquote(parts.path), parts.query,
            {k.lower(): v for k, v in self.headers.items()},
        )
        self.seen.wire_bytes = len(self.raw_requestline) + sum(len(k) + len(v) + 4 for k, v in self.headers.items()) + 2
        self.hub.record(self.seen)
        fault = self.hub.take_fault(self.server_name, method, self.seen.path)
        self.fault = fault
        if fault is not None:
            if fault.action == "delay":
                time.sleep(fault.seconds)
            elif fault.action == "status":
                extra = {"Retry-After": fault.retry_after} if fault.retry_after is not None else None
                return self._error(fault.status, "ServerError" if fault.status >= 500 else None, "Scripted failure", extra)
            elif fault.action == "drip-head":
                return self._drip_head(fault)
            elif fault.action == "html":
                return self._send(200, b"<!doctype html><html><body>Welcome to our proxy</body></html>",
                                  {"Content-Type": "text/html; charset=utf-8"}, head_only=method == "HEAD")
            elif fault.action == "drop":
                self.close_connection = True
                self.connection.shutdown(2)
                return None
        try:
            if self.server_name == "cdn":
                self._cdn(method, parts)
            else:
                self._hub(method, parts)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _send(self, status: int, body: bytes, headers: dict[str, str], *, head_only: bool = False) -> None:
        self.send_response(status)
        headers = {"Content-Length": str(len(body)), **headers}
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        self._count_head(status, headers)
        if not head_only and body:
            self.wfile.write(body)
            self.seen.body_bytes += len(body)
            self.seen.wire_bytes += len(body)

    def _count_head(self, status: int, headers: dict[str, str]) -> None:
        self.seen.status = status

    def flush_headers(self) -> None:
        """Count the response head exactly as written (status line and every header)."""
        buffered = getattr(self, "_headers_buffer", None)
        if buffered and getattr(self, "seen", None) is not None:
            self.seen.wire_bytes += sum(len(b) for b in buffered)
        super().flush_headers()

    def _json(self, status: int, doc: Any, headers: dict[str, str] | None = None, *, head_only: bool = False) -> None:
        self._send(status, json.dumps(doc).encode(), {"Content-Type": "application/json; charset=utf-8", **(headers or {})}, head_only=head_only)

    def _error(self, status: int, code: str | None, message: str, extra: dict[str, str] | None = None) -> None:
        headers = {"X-Error-Message": message, **(extra or {})}
        if code:
            headers["X-Error-Code"] = code
        self._json(status, {"error": message}, headers, head_only=self.command == "HEAD")

    # -- access --------------------------------------------------------------------------------

    def _token(self) -> tuple[str | None, bool]:
        """The bearer token sent, and whether it is acceptable at all (unknown tokens are not)."""
        auth = self.headers.get("Authorization", "")
        if not auth:
            return None, True
        token = auth.removeprefix("Bearer ").strip()
        return token, token in self.hub.known_tokens

    def _repo(self, repo_id: str, *, files: bool) -> Repo | None:
        """The repo if this request may see it; otherwise the error is sent and ``None`` returned."""
        token, valid = self._token()
        if not valid:
            self._error(401, None, "Invalid credentials in Authorization header")
            return None
        repo = self.hub.repos.get(repo_id)
        allowed = repo is not None and (token in repo.tokens)
        if repo is None or (repo.private and not allowed):
            self._error(401 if token is None else 404, "RepoNotFound", "Repository not found")
            return None
        if files and repo.gated and not allowed:
            if token is None:
                self._error(401, "GatedRepo", f"Access to model {repo_id} is restricted. You must have access to it and be authenticated to access it. Please log in.")
            else:
                self._error(403, "GatedRepo", f"Access to model {repo_id} is restricted and you are not in the authorized list. Visit {self.hub.endpoint}/{repo_id} to ask for access.")
            return None
        return repo

    def _commit(self, repo: Repo, revision: str) -> Commit | None:
        commit = repo.commit(revision)
        if commit is None:
            self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        return commit

    # -- the Hub -------------------------------------------------------------------------------

    API_RE = re.compile(r"^/api/models/([^/]+/[^/]+)(?:/revision/([^/]+))?/?$")
    TREE_RE = re.compile(r"^/api/models/([^/]+/[^/]+)/tree/([^/]+)(?:/(.*))?$")
    RESOLVE_RE = re.compile(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$")

    def _hub(self, method: str, parts: Any) -> None:
        # Match on the raw path: a revision such as refs/pr/1 arrives percent-encoded as one segment.
        raw = parts.path
        if raw == "/api/agent-harnesses":  # huggingface_hub's user-agent check, once a day
            return self._json(200, {"standardEnvVars": [], "harnesses": {}})
        if m := self.API_RE.match(raw):
            return self._repo_info(unquote(m.group(1)), unquote(m.group(2) or "main"), parse_qs(parts.query))
        if m := self.TREE_RE.match(raw):
            return self._tree(unquote(m.group(1)), unquote(m.group(2)), unquote(m.group(3) or ""), parse_qs(parts.query))
        if m := self.RESOLVE_RE.match(raw):
            return self._resolve(method, unquote(m.group(1)), unquote(m.group(2)), unquote(m.group(3)))
        self._error(404, None, "Not found")

    def _repo_info(self, repo_id: str, revision: str, query: dict[str, list[str]]) -> None:
        repo = self._repo(repo_id, files=False)
        if repo is None:
            return
        commit = self._commit(repo, revision)
        if commit is None:
            return
        blobs = query.get("blobs", ["false"])[0].lower() == "true"
        siblings = []
        for f in commit.files.values():
            entry: dict[str, Any] = {"rfilename": f.name}
            if blobs:
                entry.update(size=f.size, blobId=f.blob_id)
                if f.lfs:
                    entry["lfs"] = {"sha256": f.sha256, "size": f.size, "pointerSize": 134}
            siblings.append(entry)
        if repo_id in self.hub.raw_info:
            return self._send(200, self.hub.raw_info[repo_id], {"Content-Type": "application/json"})
        if repo_id in self.hub.tamper:
            siblings = self.hub.tamper[repo_id](siblings)
        if self.fault is not None and self.fault.action == "bad-name":  # a listing no Hub sends
            siblings.append({"rfilename": "../../../escape.safetensors.index.json", "size": 2, "blobId": "0" * 40})
        self._json(200, {
            "_id": commit.sha[:24], "id": repo_id, "modelId": repo_id, "author": repo_id.split("/")[0],
            "sha": commit.sha, "lastModified": "2026-05-01T00:00:00.000Z", "private": repo.private,
            "gated": "manual" if repo.gated else False, "disabled": False, "downloads": 0, "likes": 0,
            "tags": [], "library_name": "transformers", "siblings": siblings,
        })

    def _tree(self, repo_id: str, revision: str, under: str, query: dict[str, list[str]]) -> None:
        repo = self._repo(repo_id, files=False)
        if repo is None:
            return
        commit = self._commit(repo, revision)
        if commit is None:
            return
        out = []
        for f in commit.files.values():
            if under and not f.name.startswith(under.rstrip("/") + "/"):
                continue
            entry: dict[str, Any] = {"type": "file", "oid": f.blob_id, "size": f.size, "path": f.name}
            if f.lfs:
                entry["lfs"] = {"oid": f.sha256, "size": f.size, "pointerSize": 134}
            out.append(entry)
        self._json(200, out)

    def _resolve(self, method: str, repo_id: str, revision: str, name: str) -> None:
        repo = self._repo(repo_id, files=True)
        if repo is None:
            return
        commit = self._commit(repo, revision)
        if commit is None:
            return
        f = commit.files.get(name)
        if f is None:
            return self._error(404, "EntryNotFound", f"{name} does not exist on \"{revision}\"", {"X-Repo-Commit": commit.sha})
        common = {"X-Repo-Commit": commit.sha, "Accept-Ranges": "bytes"}
        if f.lfs:
            location = f"{self.hub.cdn}/blobs/{f.sha256}?name={quote(name)}"
            return self._send(302, b"", {
                **common, "Location": location, "ETag": f'"{f.blob_id}"',
                "X-Linked-Etag": f'"{f.sha256}"', "X-Linked-Size": str(f.size),
            }, head_only=method == "HEAD")
        self._serve_file(method, f, {**common, "ETag": f'"{f.blob_id}"', "Content-Type": "text/plain; charset=utf-8"})

    # -- the CDN -------------------------------------------------------------------------------

    def _cdn(self, method: str, parts: Any) -> None:
        m = re.match(r"^/blobs/([0-9a-f]{64})$", parts.path)
        f = self.hub.blob(m.group(1)) if m else None
        if f is None:
            return self._send(404, b"NoSuchKey", {"Content-Type": "text/plain"}, head_only=method == "HEAD")
        self._serve_file(method, f, {"ETag": f'"{f.sha256}"', "Content-Type": "application/octet-stream", "Accept-Ranges": "bytes"})

    def _serve_file(self, method: str, f: ServedFile, headers: dict[str, str]) -> None:
        """The file, or the byte range asked for, streamed from disk."""
        start, end, status = 0, f.size - 1, 200
        rng = self.headers.get("Range")
        if rng:
            m = re.fullmatch(r"\s*bytes=(\d*)-(\d*)\s*", rng)
            if not m or (not m.group(1) and not m.group(2)):
                return self._send(416, b"", {"Content-Range": f"bytes */{f.size}"})
            if m.group(1):
                start = int(m.group(1))
                end = min(int(m.group(2)), f.size - 1) if m.group(2) else f.size - 1
            else:
                start, end = max(0, f.size - int(m.group(2))), f.size - 1
            if start >= f.size or start > end:
                return self._send(416, b"", {"Content-Range": f"bytes */{f.size}"})
            status = 206
            headers = {**headers, "Content-Range": f"bytes {start}-{end}/{f.size}"}
            if self.fault is not None and self.fault.action == "bad-range":
                headers["Content-Range"] = f"bytes {start + 8}-{end + 8}/{f.size}"
        length = end - start + 1
        hostile = self.fault.action if self.fault is not None else None
        if hostile in ("oversize", "overflow", "gzip", "drip", "flip", "cut") and method == "GET":
            return self._hostile_body(hostile, status, headers, f, start, length)
        self.send_response(status)
        headers = {"Content-Length": str(length), **headers}
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        self._count_head(status, headers)
        if method == "HEAD":
            return
        with open(f.path, "rb") as fh:
            fh.seek(start)
            left = length
            while left > 0:
                chunk = fh.read(min(CHUNK, left))
                if not chunk:
                    break
                self.wfile.write(chunk)
                left -= len(chunk)
                self.seen.body_bytes += len(chunk)
                self.seen.wire_bytes += len(chunk)

    # -- hostile answers (bounded: at most ``MAX_HOSTILE`` bytes or ``MAX_DRIP`` pauses) -----------

    MAX_HOSTILE = 256 * 1024 * 1024
    MAX_DRIP = 400

    def _hostile_body(self, kind: str, status: int, headers: dict[str, str], f: ServedFile, start: int, length: int) -> None:
        import gzip

        assert self.fault is not None
        with open(f.path, "rb") as fh:
            fh.seek(start)
            real = fh.read(min(length, 1 << 20))
        if kind == "gzip":
            body = gzip.compress(b"\0" * min(self.fault.extra or 64 << 20, self.MAX_HOSTILE), compresslevel=9)
            self.send_response(status)
            for k, v in {**headers, "Content-Encoding": "gzip", "Content-Length": str(len(body))}.items():
                self.send_header(k, v)
            self.end_headers()
            self._count_head(status, headers)
            self._write(body)
            return
        if kind == "cut":  # the listed length promised, ``extra`` bytes sent, then the connection closed
            self.send_response(status)
            for k, v in {**headers, "Content-Length": str(length)}.items():
                self.send_header(k, v)
            self.end_headers()
            self._count_head(status, headers)
            self._write(real[: self.fault.extra])
            self.close_connection = True
            return
        if kind == "flip":  # the listed length, other bytes (the last one changed)
            self.send_response(status)
            for k, v in {**headers, "Content-Length": str(length)}.items():
                self.send_header(k, v)
            self.end_headers()
            self._count_head(status, headers)
            body = bytearray(real if len(real) == length else real + b"\0" * (length - len(real)))
            body[-1] ^= 0xFF
            self._write(bytes(body))
            return
        if kind == "drip":
            self.send_response(status)
            for k, v in {**headers, "Content-Length": str(length)}.items():
                self.send_header(k, v)
            self.end_headers()
            self._count_head(status, headers)
            for i in range(min(length, len(real), self.MAX_DRIP)):
                self._write(real[i:i + 1])
                time.sleep(self.fault.interval)
            return
        extra = min(self.fault.extra, self.MAX_HOSTILE)
        self.send_response(status)
        sent = {**headers}
        if kind == "oversize":
            sent["Content-Length"] = str(length + self.fault.extra)
        else:  # overflow: no length, the body ends when the connection closes
            sent["Connection"] = "close"
            self.close_connection = True
        for k, v in sent.items():
            self.send_header(k, v)
        self.end_headers()
        self._count_head(status, sent)
        self._write(real)
        left = length - len(real) + extra
        zeros = b"\0" * CHUNK
        while left > 0:
            n = min(left, CHUNK)
            self._write(zeros[:n])
            left -= n

    def _write(self, data: bytes) -> None:
        self.wfile.write(data)
        self.wfile.flush()
        self.seen.body_bytes += len(data)
        self.seen.wire_bytes += len(data)

    def _drip_head(self, fault: Fault) -> None:
        """A response head one byte every ``interval`` seconds (no per-read timeout ever trips)."""
        head = b"HTTP/1.1 200 OK\r\nX-Slow: " + b"z" * self.MAX_DRIP
        self.close_connection = True
        try:
            for i in range(len(head)):
                self.wfile.write(head[i:i + 1])
                self.wfile.flush()
                time.sleep(fault.interval)
        except OSError:
            return


def populate(server: HubServer, fixtures_root: Path) -> None:
    """The repos the tests and the benchmark use, from ``make_fixtures.build_all``'s tree."""
    d, m, t = fixtures_root / "drafts", fixtures_root / "mutants", fixtures_root / "targets"
    server.add_repo("z-lab/Qwen3-4B-DFlash-b16", d / "Qwen3-4B-DFlash-b16")
    server.add_repo("z-lab/Qwen3-8B-DFlash-b16-sharded", d / "Qwen3-8B-DFlash-b16-sharded")
    server.add_repo("z-lab/Qwen3.6-27B-DFlash-sharded", d / "Qwen3.6-27B-DFlash-sharded")
    server.add_repo("Qwen/Qwen3-4B", t / "Qwen3-4B")
    server.add_repo("Qwen/Qwen3-8B", t / "Qwen3-8B")
    server.add_repo("tiny/draft", m / "base", revisions={"broken": m / "DF204-truncated"})
    for mutant in ("DF203-header-not-json", "DF205-index-missing-shard", "DF206-index-missing-tensor", "DF212-missing-k-norm", "DF201-no-safetensors"):
        server.add_repo(f"mutant-org/{mutant}", m / mutant)
    server.add_repo("gated-org/draft", m / "base", gated=True, tokens=("hf_reader",))
    server.add_repo("private-org/draft", m / "base", private=True, tokens=("hf_reader",))
    server.known_tokens.add("hf_outsider")  # a valid token with access to neither


def hub_env(server: HubServer, home: Path, **extra: str) -> dict[str, str]:
    """Environment for a client process that talks to ``server`` only, with a cache under ``home``."""
    env = {
        "HF_ENDPOINT": server.endpoint,
        "HF_HOME": str(home),
        "HF_HUB_CACHE": str(home / "hub"),
        "HF_TOKEN_PATH": str(home / "token"),
        "HF_TOKEN": "", "HUGGING_FACE_HUB_TOKEN": "", "HF_OIDC_RESOURCE": "",
        "HF_HUB_OFFLINE": "0", "TRANSFORMERS_OFFLINE": "0",
        "HF_HUB_ETAG_TIMEOUT": "10", "HF_HUB_DOWNLOAD_TIMEOUT": "10",
        "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        "DFLASH_CKPT_HUB_BACKOFF": "0.05", "DFLASH_CKPT_HUB_RETRIES": "3",
        # Loopback never goes through a proxy the machine may have configured.
        "HTTP_PROXY": "", "HTTPS_PROXY": "", "ALL_PROXY": "", "http_proxy": "", "https_proxy": "", "all_proxy": "",
        "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost",
    }
    env.update(extra)
    return env


def serve_forever(folder: Path, repo_id: str) -> None:  # pragma: no cover - manual use
    """``python tests/hub_server.py FOLDER org/name``: serve one folder, print the endpoint."""
    server = HubServer()
    server.add_repo(repo_id, folder)
    print(f"HF_ENDPOINT={server.endpoint}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.close()


if __name__ == "__main__":  # pragma: no cover
    import sys

    serve_forever(Path(sys.argv[1]), sys.argv[2])
