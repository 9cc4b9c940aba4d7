"""Prometheus metrics for ``subs listen``, in the text exposition format 0.0.4.

Across processes, workers send deltas: each worker keeps its own Metrics,
periodically calls ``snapshot(reset=True)`` and sends the plain dict to the
supervisor, which ``merge()``s it into the Metrics it serves. Counters and
histograms add up; queue gauges in a snapshot replace the current values.
Deltas (rather than totals) keep the supervisor free of per-worker state and
make a restarted worker's fresh counters add up instead of going backwards.

Queue gauges are per subscription (two subscriptions may share a tag), read
by the supervisor with a query whose cost does not grow with the log: each
subscription's live events are counted up to MAX_COUNTED.
"""

from __future__ import annotations

import bisect
import copy
import math
import threading
import time
from dataclasses import dataclass
from typing import Any

from firebird.driver import Cursor

from subscriptions.db import sql
from subscriptions.db.connection import Database

MAX_COUNTED = 10_000

BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
OUTCOMES = ("handled", "failed", "dead")
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_COUNTER_HELP = {
    "handled": "Events whose handler succeeded, per subscription tag.",
    "failed": "Handler attempts that raised and will be retried, per subscription tag.",
    "dead": "Events given up on after their last attempt failed, per subscription tag.",
}
_GAUGES = {
    "pending": ("subs_queue_pending", f"Events waiting to be claimed, per subscription (counted up to {MAX_COUNTED})."),
    "in_flight": ("subs_queue_in_flight", "Events claimed by a worker and not yet finished, per subscription."),
    "failed": (
        "subs_queue_failed",
        f"Failed events waiting for their retry, per subscription (counted up to {MAX_COUNTED}; subs_queue_pending "
        "counts them too).",
    ),
    "lag": ("subs_lag_seconds", "Age of the oldest live event in seconds (0 when none), per subscription."),
    "dead": (
        "subs_queue_dead",
        "Dead events kept until retried or purged, per subscription (counted up to "
        f"{MAX_COUNTED}): out of attempts, or logged dead because the --when condition raised.",
    ),
}
_DURATION = "subs_handler_duration_seconds"
_CONFLICTS = "subs_claim_conflicts_total"
_EXITS = "subs_process_exits_total"
_OLDEST = "subs_oldest_transaction_seconds"


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


Snapshot = dict[str, Any]


def _empty() -> Snapshot:
    return {
        "events": {},
        "durations": {},
        "queue": {},
        "claim_conflicts": 0,
        "process_exits": {},
        "minutes": {},
        "oldest_transaction": 0.0,
    }


def minute_of(timestamp: float) -> int:
    """The minute (since the epoch) ``timestamp`` falls in: what the
    per-minute statistics (stats.py) are counted by."""
    return int(timestamp // 60)


@dataclass(frozen=True)
class QueueDepth:
    """A subscription's live events, counted up to a bound: ``pending`` (not
    failed, not in flight), ``in_flight``, ``failed`` (waiting for a
    retry), and its ``dead`` ones; ``live_more`` and ``dead_more`` say a
    count stopped at the bound."""

    sub_id: int
    table: str
    action: str
    tag: str
    pending: int
    in_flight: int
    oldest_seconds: float | None
    failed: int = 0
    dead: int = 0
    active: bool = True
    paused: bool = False
    live_more: bool = False
    dead_more: bool = False

    @property
    def waiting(self) -> int:
        """Live events not in flight: pending and failed ones."""
        return self.pending + self.failed


def queue_depths(cursor: Cursor, max_counted: int = MAX_COUNTED) -> list[QueueDepth]:
    """Every subscription's queue depth, each count stopping at ``max_counted``."""
    cursor.execute(sql.load("metrics")["queue_depth"], (max_counted,))
    depths = []
    for sub_id, table, action, tag, pending, in_flight, oldest_ms, *counts_and_flags in cursor.fetchall():
        oldest = None if oldest_ms is None else oldest_ms / 1000
        depths.append(QueueDepth(sub_id, table, action, tag, pending, in_flight, oldest, *counts_and_flags))
    return depths


def read_queue_depth(db: Database, max_counted: int = MAX_COUNTED) -> list[QueueDepth]:
    with db.transaction() as cursor:
        return queue_depths(cursor, max_counted)


class Metrics:
    """Event counters, handler durations and queue gauges, keyed by subscription tag.

    Thread-safe: observe() runs on handler threads while the HTTP server renders.
    The snapshot dict is ``{"events": {tag: {outcome: n}}, "durations": {tag:
    {"buckets": [n per bucket, +Inf last, not cumulative], "sum": s, "count": n}},
    "queue": {sub_id: {"table": t, "action": a, "tag": t, "pending": n,
    "in_flight": n, "failed": n, "lag": seconds, "dead": n}},
    "claim_conflicts": n, "process_exits": {(process, how): n}, "minutes":
    {(sub_id, minute): [handled, failed, dead]}}``; "minutes" feeds the
    console's statistics (stats.py) and is taken out by ``take_minutes``.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._data = _empty()

    def observe(self, tag: str, outcome: str, seconds: float, sub_id: int | None = None) -> None:
        """Count one handler run of ``tag`` (of subscription ``sub_id``, when
        known) ending in ``outcome`` that took ``seconds``."""
        if outcome not in OUTCOMES:
            raise ValueError(f"unknown outcome {outcome!r}; use one of {', '.join(OUTCOMES)}")
        with self._lock:
            if sub_id is not None:
                minute = self._data["minutes"].setdefault((sub_id, minute_of(time.time())), [0] * len(OUTCOMES))
                minute[OUTCOMES.index(outcome)] += 1
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

    def count_process_exit(self, process: str, how: str) -> None:
        """Count a ``process`` ("claimer" or "handler") that ended, ``how``
        (recovery.exit_label), and was replaced while the listener ran on."""
        with self._lock:
            exits = self._data["process_exits"]
            exits[(process, how)] = exits.get((process, how), 0) + 1

    def set_queue(self, depths: list[QueueDepth]) -> None:
        """Replace the queue gauges with ``depths``, as last read from the log."""
        with self._lock:
            self._data["queue"] = {
                depth.sub_id: {
                    "table": depth.table,
                    "action": depth.action,
                    "tag": depth.tag,
                    "pending": depth.waiting,
                    "in_flight": depth.in_flight,
                    "failed": depth.failed,
                    "lag": depth.oldest_seconds or 0.0,
                    "dead": depth.dead,
                }
                for depth in depths
            }

    def set_oldest_transaction(self, seconds: float) -> None:
        """How long the database's oldest active transaction has been it
        (oldest_transaction.py); the supervisor's alone, merged from no worker."""
        with self._lock:
            self._data["oldest_transaction"] = seconds

    def snapshot(self, *, reset: bool = False) -> Snapshot:
        """A picklable copy of everything; with ``reset`` start again from zero (a delta)."""
        with self._lock:
            data = copy.deepcopy(self._data)
            if reset:
                self._data = _empty()
            return data

    def totals(self) -> dict[str, int]:
        """Events per outcome over every tag: what a run did, for its last words."""
        with self._lock:
            return {outcome: sum(counts[outcome] for counts in self._data["events"].values()) for outcome in OUTCOMES}

    def merge(self, snapshot: Snapshot) -> None:
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
            for key, count in snapshot.get("process_exits", {}).items():
                self._data["process_exits"][key] = self._data["process_exits"].get(key, 0) + count
            for key, counts in snapshot.get("minutes", {}).items():
                mine = self._data["minutes"].setdefault(key, [0] * len(OUTCOMES))
                self._data["minutes"][key] = [a + b for a, b in zip(mine, counts)]

    def take_minutes(self) -> dict[tuple[int, int], list[int]]:
        """The per-minute counts so far, leaving none behind (to record them;
        merge them back in a snapshot if that fails)."""
        with self._lock:
            minutes: dict[tuple[int, int], list[int]] = self._data["minutes"]
            self._data["minutes"] = {}
            return minutes

    def _duration(self, tag: str) -> dict[str, Any]:
        return self._data["durations"].setdefault(  # type: ignore[no-any-return]
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
        family(
            _CONFLICTS,
            "counter",
            "Claims that met another claimer's uncommitted change, claimed "
            "nothing and were retried; a steady rate means workers compete for the same events.",
        )
        lines.append(f"{_CONFLICTS} {data['claim_conflicts']}")
        family(
            _EXITS,
            "counter",
            "Claimer and handler processes that ended while the listener ran on, and were replaced, by how: "
            "a signal (SIGKILL: the OOM killer, a person, or subs itself for --timeout or a stalled claimer; "
            "SIGABRT, SIGSEGV: a crash), 'reconnect' (a claimer after a database error), or an exit code.",
        )
        for (process, how), count in sorted(data["process_exits"].items()):
            lines.append(f"{_EXITS}{_labels(process=process, how=how)} {count}")
        family(
            _OLDEST,
            "gauge",
            "Seconds the database's oldest active transaction has been the oldest, as seen every minute (0 while "
            "fewer than 1,000 transactions started since): while one stays open, handled events stay in EVENT_LOG "
            "as garbage and the log grows with them.",
        )
        lines.append(f"{_OLDEST} {_number(data['oldest_transaction'])}")
        for key, (name, help_text) in _GAUGES.items():
            family(name, "gauge", help_text)
            for sub_id, queue in sorted(data["queue"].items()):
                labels = _labels(
                    subscription=str(sub_id), table=queue["table"], action=queue["action"], tag=queue["tag"]
                )
                lines.append(f"{name}{labels} {_number(queue[key])}")
        return "\n".join(lines) + "\n"
