"""The listener's ``/metrics`` endpoint (``subs listen --metrics-port``)."""

from __future__ import annotations

import logging
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from subscriptions.errors import SubsError

from .metrics import CONTENT_TYPE, Metrics

log = logging.getLogger(__name__)


class MetricsServer:
    """A /metrics endpoint whose port is taken; ``start()`` answers on it,
    ``close()`` stops it and frees the port. Taking the port comes first, so
    that one in use is refused before the listener changes anything or goes
    into the background, where the error would reach only its log."""

    def __init__(self, server: ThreadingHTTPServer) -> None:
        self._server = server
        self.port: int = server.server_address[1]
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.1}, name="subs-metrics", daemon=True
        )

    def start(self) -> MetricsServer:
        self._thread.start()
        return self

    def close(self) -> None:
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join()
        self._server.server_close()


def bind(metrics: Metrics, port: int, host: str = "127.0.0.1") -> MetricsServer:
    """Take ``port`` (0: a free one) for ``GET /metrics``, served on a daemon
    thread once started."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?", 1)[0] != "/metrics":
                self.send_error(404, "try /metrics")
                return
            body = metrics.render().encode()
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            log.debug("metrics %s: " + format, self.address_string(), *args)

    class Server(ThreadingHTTPServer):
        address_family = socket.AF_INET6 if ":" in host else socket.AF_INET  # --metrics-host ::1 too

    try:
        server = Server((host, port), Handler)
    except OSError as exc:
        where, reason = f"{host}:{port}", exc.strerror or exc
        raise SubsError(
            f"cannot serve metrics on {where}: {reason}; choose another --metrics-host or --metrics-port"
        ) from None
    return MetricsServer(server)
