"""A real forward HTTP proxy on 127.0.0.1 for the webhook's tests: CONNECT
tunnels (https) and absolute-URI requests (http), each recorded with the
Proxy-Authorization it came with."""

from __future__ import annotations

import contextlib
import http.client
import select
import socket
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from httppeer import LOOPBACK, running


@dataclass
class Proxy:
    address: str  # host:port
    seen: list[tuple[str, str, str | None]] = field(default_factory=list)  # method, target, Proxy-Authorization


def _relay(one: socket.socket, other: socket.socket) -> None:
    """Copy bytes both ways until either side closes."""
    while True:
        readable, _, _ = select.select([one, other], [], [], 5)
        if not readable:
            return
        for source in readable:
            data = source.recv(65536)
            if not data:
                return
            (other if source is one else one).sendall(data)


@contextlib.contextmanager
def serving() -> Iterator[Proxy]:
    proxy = Proxy("")

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_CONNECT(self) -> None:
            proxy.seen.append(("CONNECT", self.path, self.headers.get("Proxy-Authorization")))
            host, _, port = self.path.rpartition(":")
            with socket.create_connection((host, int(port)), timeout=5) as upstream:
                self.send_response(200, "Connection established")
                self.end_headers()
                _relay(self.connection, upstream)
            self.close_connection = True

        def do_POST(self) -> None:
            proxy.seen.append(("POST", self.path, self.headers.get("Proxy-Authorization")))
            target = urllib.parse.urlsplit(self.path)
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            headers = {name: value for name, value in self.headers.items() if not name.lower().startswith("proxy-")}
            upstream = http.client.HTTPConnection(target.hostname or "", target.port, timeout=5)
            try:
                path = (target.path or "/") + (f"?{target.query}" if target.query else "")
                upstream.request("POST", path, body, headers)
                answer = upstream.getresponse()
                content = answer.read()
            finally:
                upstream.close()
            self.send_response(answer.status, answer.reason)
            self.send_header("Content-Length", str(len(content)))
            self.end_headers()
            self.wfile.write(content)

        def log_message(self, *args: Any) -> None:
            pass

    with running(Handler) as server:
        proxy.address = f"{LOOPBACK}:{server.server_address[1]}"
        yield proxy
