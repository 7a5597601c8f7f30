"""Why ``sources/hub/download.py`` does not hand whole-file downloads to ``hf_hub_download``.

huggingface_hub names the blob of a download after the ``ETag`` the server sends (``blobs/<etag>``)
without checking it is a hex id, so an endpoint that answers ``ETag: "../../../escaped"`` has the
file written outside the cache (measured on huggingface_hub 2.4.0). ``HF_ENDPOINT`` is user input
and a mirror can be hostile; our downloads name blobs after the listing's ids, checked before
anything is fetched (``sources/hub/ids.py``). When this test fails, the library has started to
refuse such an ETag: look again at moving downloads onto ``hf_hub_download``.
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

BODY = b"hello"


class _EscapingEtag(http.server.BaseHTTPRequestHandler):
    """A resolve endpoint whose ETag climbs out of the cache's ``blobs/`` folder."""

    def log_message(self, *args: object) -> None:
        pass

    def _head(self) -> None:
        self.send_response(200)
        self.send_header("ETag", '"../../../escaped"')
        self.send_header("X-Repo-Commit", "a" * 40)
        self.send_header("Content-Length", str(len(BODY)))
        self.end_headers()

    def do_HEAD(self) -> None:  # noqa: N802
        self._head()

    def do_GET(self) -> None:  # noqa: N802
        self._head()
        self.wfile.write(BODY)


@pytest.fixture
def endpoint() -> Iterator[str]:
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _EscapingEtag)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_port}"
    finally:
        srv.shutdown()
        srv.server_close()


def test_hf_hub_download_writes_where_the_servers_etag_points(endpoint: str, tmp_path: Path) -> None:
    from huggingface_hub import hf_hub_download

    cache = tmp_path / "hub"
    hf_hub_download("org/name", "config.json", revision="main", cache_dir=cache, endpoint=endpoint)
    escaped = tmp_path / "escaped"
    assert escaped.is_file() and escaped.read_bytes() == BODY, (
        "huggingface_hub no longer writes outside the cache on a hostile ETag: "
        "reconsider hf_hub_download for sources/hub/download.py"
    )
