"""A stand-in for ``serve_launch.py vllm serve ... --port N``: the served path's process handling
without vLLM. It starts a grandchild in a session of its own (as a server's workers may), writes
both ids to ``$FAKE_SERVE_PIDS``, and answers ``/health`` on the port (200, or 503 forever with
``FAKE_SERVE_MODE=never``) until it is ended."""

from __future__ import annotations

import os
import sys
import time
from http.server import BaseHTTPRequestHandler, HTTPServer


class Health(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        ready = os.environ.get("FAKE_SERVE_MODE") != "never"
        self.send_response(200 if ready and self.path == "/health" else 503)
        self.send_header("Content-Length", "0")
        self.end_headers()


def main(argv: list[str]) -> int:
    port = int(argv[argv.index("--port") + 1])
    child = os.fork()
    if child == 0:
        os.setsid()
        while True:
            time.sleep(1)
    with open(os.environ["FAKE_SERVE_PIDS"], "w") as fh:
        fh.write(f"{os.getpid()} {child}\n")
    print("fake server listening", flush=True)
    HTTPServer(("127.0.0.1", port), Health).serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
