"""Prometheus metrics for ``subs listen``, in the text exposition format 0.0.4.

Across processes, workers send deltas: each worker keeps its own Metrics,
periodically calls ``snapshot(reset=True)`` and sends the plain dict to the
supervisor, which ``merge()``s it into the Metrics it serves. Counters and
histograms add up; queue gauges in a snapshot replace the current values.
Deltas (rather than totals) keep the supervisor free of per-worker state and
make a restarted worker's fresh counters add up instead of going backwards.
"""

from __future__ import annotations

import bisect
import copy
import logging
import math
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from .errors import SubsError

log = logging.getLogger(__name__)

BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
OUTCOMES = ("handled", "failed", "dead")
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_COUNTER_HELP = {
    "handled": "Events whose handler succeeded, per subscription tag.",
    "failed": "Handler attempts that raised and will be retried, per subscription tag.",
    "dead": "Events given up on after their last attempt failed, per subscription tag.",
}
_GAUGES = {
    "pending": ("subs_queue_pending", "Events waiting to be claimed by a worker."),
    "in_flight": ("subs_queue_in_flight", "Events claimed by a worker and not yet finished."),
    "lag": ("subs_lag_seconds", "Age of the oldest pending event in seconds (0 when none is pending)."),
}
_DURATION = "subs_handler_duration_seconds"
_CONFLICTS = "subs_claim_conflicts_total"


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value) if isinstance(value, float) else str(value)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(**labels: str) -> str:
    return "{" + ",".join(f'{key}="{_escape(value)}"' for key, value in labels.items()) + "}"


def _empty() -> dict:
    return {"events": {}, "durations": {}, "queue": {}, "claim_conflicts": 0}


class Metrics:
    """Event counters, handler durations and queue gauges, keyed by subscription tag.

    Thread-safe: observe() runs on handler threads while the HTTP server renders.
    The snapshot dict is ``{"events": {tag: {outcome: n}}, "durations": {tag:
    {"buckets": [n per bucket, +Inf last, not cumulative], "sum": s, "count": n}},
    "queue": {tag: {"pending": n, "in_flight": n, "lag": seconds}}, "claim_conflicts": n}``.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._data = _empty()

    def observe(self, tag: str, outcome: str, seconds: float) -> None:
        """Count one handler run of ``tag`` ending in ``outcome`` that took ``seconds``."""
        if outcome not in OUTCOMES:
            raise ValueError(f"unknown outcome {outcome!r}; use one of {', '.join(OUTCOMES)}")
        with self._lock:
            events = self._data["events"].setdefault(tag, dict.fromkeys(OUTCOMES, 0))
            events[outcome] += 1
            duration = self._duration(tag)
            duration["buckets"][bisect.bisect_left(BUCKETS, seconds)] += 1
            duration["sum"] += seconds
            duration["count"] += 1

    def count_claim_conflicts(self, count: int) -> None:
        """Count claims that met another claimer's uncommitted change and claimed nothing."""
        with self._lock:
            self._data["claim_conflicts"] += count

    def set_queue(
        self, tag: str, pending: int, in_flight: int, oldest_pending_age_seconds: float | None
    ) -> None:
        """Record the queue state of ``tag``, as last seen in the event log."""
        with self._lock:
            self._data["queue"][tag] = {
                "pending": pending,
                "in_flight": in_flight,
                "lag": oldest_pending_age_seconds or 0.0,
            }

    def snapshot(self, *, reset: bool = False) -> dict:
        """A picklable copy of everything; with ``reset`` start again from zero (a delta)."""
        with self._lock:
            data = copy.deepcopy(self._data)
            if reset:
                self._data = _empty()
            return data

    def merge(self, snapshot: dict) -> None:
        """Add a worker's delta snapshot (see the module docstring)."""
        with self._lock:
            for tag, counts in snapshot.get("events", {}).items():
                events = self._data["events"].setdefault(tag, dict.fromkeys(OUTCOMES, 0))
                for outcome, count in counts.items():
                    events[outcome] += count
            for tag, other in snapshot.get("durations", {}).items():
                duration = self._duration(tag)
                duration["buckets"] = [a + b for a, b in zip(duration["buckets"], other["buckets"])]
                duration["sum"] += other["sum"]
                duration["count"] += other["count"]
            self._data["queue"].update(copy.deepcopy(snapshot.get("queue", {})))
            self._data["claim_conflicts"] += snapshot.get("claim_conflicts", 0)

    def _duration(self, tag: str) -> dict:
        return self._data["durations"].setdefault(
            tag, {"buckets": [0] * (len(BUCKETS) + 1), "sum": 0.0, "count": 0}
        )

    def render(self) -> str:
        """The text exposition format 0.0.4, as served on /metrics."""
        data = self.snapshot()
        lines: list[str] = []

        def family(name: str, kind: str, help_text: str) -> None:
            lines.append(f"# HELP {name} {help_text}")
            lines.append(f"# TYPE {name} {kind}")

        for outcome in OUTCOMES:
            name = f"subs_events_{outcome}_total"
            family(name, "counter", _COUNTER_HELP[outcome])
            for tag, counts in sorted(data["events"].items()):
                lines.append(f"{name}{_labels(tag=tag)} {counts[outcome]}")
        family(_DURATION, "histogram", "Time a handler took for one event, in seconds.")
        for tag, duration in sorted(data["durations"].items()):
            cumulative = 0
            for bound, count in zip((*BUCKETS, math.inf), duration["buckets"]):
                cumulative += count
                lines.append(f"{_DURATION}_bucket{_labels(tag=tag, le=_number(bound))} {cumulative}")
            lines.append(f"{_DURATION}_sum{_labels(tag=tag)} {_number(duration['sum'])}")
            lines.append(f"{_DURATION}_count{_labels(tag=tag)} {duration['count']}")
        family(_CONFLICTS, "counter", "Claims that met another claimer's uncommitted change, claimed "
               "nothing and were retried; a steady rate means workers compete for the same events.")
        lines.append(f"{_CONFLICTS} {data['claim_conflicts']}")
        for key, (name, help_text) in _GAUGES.items():
            family(name, "gauge", help_text)
            for tag, queue in sorted(data["queue"].items()):
                lines.append(f"{name}{_labels(tag=tag)} {_number(queue[key])}")
        return "\n".join(lines) + "\n"


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
