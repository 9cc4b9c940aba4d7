"""The listener's ``/metrics`` endpoint (``subs listen --metrics-port``)."""

from __future__ import annotations

import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from subscriptions.errors import SubsError

from .metrics import CONTENT_TYPE, Metrics

log = logging.getLogger(__name__)


class MetricsServer:
    """A running /metrics endpoint; ``close()`` stops it and frees the port."""

    def __init__(self, server: ThreadingHTTPServer) -> None:
        self._server = server
        self.port: int = server.server_address[1]
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.1}, name="subs-metrics", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


def serve(metrics: Metrics, port: int, host: str = "127.0.0.1") -> MetricsServer:
    """Serve ``GET /metrics`` on a daemon thread; port 0 picks a free port."""

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

    try:
        server = ThreadingHTTPServer((host, port), Handler)
    except OSError as exc:
        where, reason = f"{host}:{port}", exc.strerror or exc
        raise SubsError(f"cannot serve metrics on {where}: {reason}; choose another --metrics-port") from None
    return MetricsServer(server)
