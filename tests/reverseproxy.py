"""A real reverse proxy on 127.0.0.1 for the console's tests, as nginx's
`location /PREFIX/ { proxy_pass http://UPSTREAM/; }` is one: it serves the
upstream under PREFIX, strips PREFIX from the path, and sends the upstream's
own address as Host (nginx's default), adding no X-Forwarded header."""

from __future__ import annotations

import contextlib
import http.client
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

from httppeer import LOOPBACK, running

# Headers of one connection, not of the request (RFC 9110, 7.6.1).
HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade"}


@contextlib.contextmanager
def serving(upstream: str, prefix: str) -> Iterator[str]:
    """Proxy ``prefix`` (e.g. "/subs") to the server at ``upstream``
    (host:port); yields the proxy's base address, prefix included."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _forward(self) -> None:
            if self.path != prefix and not self.path.startswith((prefix + "/", prefix + "?")):
                self.send_error(404, "not under the proxied prefix")
                return
            path = self.path[len(prefix) :]
            path = path if path.startswith("/") else "/" + path
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            headers = {name: value for name, value in self.headers.items() if name.lower() not in HOP_BY_HOP}
            headers["Host"] = upstream
            connection = http.client.HTTPConnection(upstream, timeout=10)
            try:
                connection.request(self.command, path, body or None, headers)
                answer = connection.getresponse()
                content = answer.read()
            finally:
                connection.close()
            self.send_response(answer.status, answer.reason)
            for name, value in answer.getheaders():
                if name.lower() not in HOP_BY_HOP and name.lower() != "content-length":
                    self.send_header(name, value)
            self.send_header("Content-Length", str(len(content)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(content)

        do_GET = do_POST = do_HEAD = do_DELETE = _forward

        def log_message(self, *args: Any) -> None:
            pass

    with running(Handler) as server:
        yield f"http://{LOOPBACK}:{server.server_address[1]}{prefix}"
