"""A real HTTP server on 127.0.0.1 for the webhook's tests, which records
what it receives and answers by path:

- ``/ok`` 200, ``/empty`` 204, ``/fail`` 500, ``/redirect`` 302 to /ok;
- ``/slow`` never answers (until the server stops);
- on https when given a TLS context;
- ``/throttle?status=S&after=A`` answers S with ``Retry-After: A``;
  ``/throttle-once?...`` does so to the first request of each event
  (``X-Subs-Event-Id``) and 200 to the next ones.
"""

from __future__ import annotations

import contextlib
import ssl
import threading
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

LOOPBACK = "127.0.0.1"
_STATUSES = {"/empty": 204, "/fail": 500, "/redirect": 302}


@dataclass
class Received:
    path: str
    headers: Message  # names as sent; looked up in any case
    body: bytes
    at: float  # time.monotonic() on arrival
    client: tuple[str, int]  # the address the request came from: one per connection


@dataclass
class HttpPeer:
    base: str
    requests: list[Received] = field(default_factory=list)

    def answer(self, received: Received) -> tuple[int, dict[str, str]]:
        """The status and headers for a request, by its path."""
        path, _, query = received.path.partition("?")
        if path.startswith("/throttle"):
            asked = dict(urllib.parse.parse_qsl(query, keep_blank_values=True))
            event_id = received.headers.get("X-Subs-Event-Id")
            earlier = [r for r in self.requests[:-1] if r.headers.get("X-Subs-Event-Id") == event_id]
            if path == "/throttle" or not earlier:
                return int(asked.get("status", "429")), {"Retry-After": asked.get("after", "")}
            return 200, {}
        if path == "/redirect":
            return 302, {"Location": "/ok"}
        return _STATUSES.get(path, 200), {}


@contextlib.contextmanager
def serving(tls: ssl.SSLContext | None = None) -> Iterator[HttpPeer]:
    """The server, on https with ``tls`` (its certificate, and whether it
    asks clients for theirs)."""
    release = threading.Event()
    peer = HttpPeer("")

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # connections are kept between requests

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            received = Received(self.path, self.headers, body, time.monotonic(), self.client_address)
            peer.requests.append(received)
            if self.path.startswith("/slow"):
                release.wait(5)
                self.close_connection = True
                return
            status, headers = peer.answer(received)
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    with running(Handler, tls) as server:
        peer.base = f"{'https' if tls else 'http'}://{LOOPBACK}:{server.server_address[1]}"
        try:
            yield peer
        finally:
            release.set()


@contextlib.contextmanager
def running(handler: type[BaseHTTPRequestHandler], tls: ssl.SSLContext | None = None) -> Iterator[ThreadingHTTPServer]:
    """A server of ``handler`` on a free loopback port, in a thread of its own."""
    server = ThreadingHTTPServer((LOOPBACK, 0), handler)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
