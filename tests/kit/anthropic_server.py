"""``FakeAnthropic`` behind a real HTTP server on 127.0.0.1.

A flow run in a subprocess drives the real SDK through ``ANTHROPIC_BASE_URL`` and every
request it makes, in any process, is counted by the fake in the test process.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx2

from tests.kit.anthropic import AnswerFn, FakeAnthropic


class _Handler(BaseHTTPRequestHandler):
    fake: FakeAnthropic
    lock: threading.Lock

    def _serve(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        request = httpx2.Request(
            self.command, f"http://api.test{self.path}", headers=dict(self.headers), content=body
        )
        with self.lock:
            response = self.fake.handler(request)
        payload = response.content
        self.send_response(response.status_code)
        for key, value in response.headers.items():
            if key.lower() not in ("content-length", "transfer-encoding", "content-encoding"):
                self.send_header(key, value)
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = _serve  # noqa: N815
    do_POST = _serve  # noqa: N815

    def log_message(self, *args: Any) -> None:  # quiet
        return


@contextmanager
def fake_anthropic_server(answer: AnswerFn | None = None) -> Iterator[tuple[FakeAnthropic, str]]:
    """(the fake, its base URL) for the duration of the block; ``answer`` as on the fake."""
    fake = FakeAnthropic()
    if answer is not None:
        fake.answer = answer
    handler = type("Handler", (_Handler,), {"fake": fake, "lock": threading.Lock()})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    fake.base_url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield fake, fake.base_url
    finally:
        server.shutdown()
        server.server_close()
