"""A worker's wake-ups: the Firebird events (POST_EVENT) of its tags.

A notification only means "drain now"; counts are not trusted, and ``--poll``
wakes the worker anyway, so a lost notification costs at most one poll
interval.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from firebird.driver import DatabaseError

from subscriptions.capture.triggers import event_name
from subscriptions.db.connection import Database

log = logging.getLogger("subs.worker")

REGISTER_TIMEOUT = 10.0
REGISTER_RETRY = 300.0
_WAIT_SLICE = 0.5


class Notifications:
    """The event collector of one worker, registered for its tags."""

    def __init__(self, poll: float, stop: threading.Event) -> None:
        self.poll = poll
        self.stop = stop
        self._collector = None
        self._tags: set[str] = set()
        self._retry_at = 0.0

    def follow(self, db: Database, tags: set[str]) -> bool:
        """Be registered on ``db`` for ``tags``: (re)register when they changed,
        when there is no collector (a reconnect), or when a hung registration's
        retry time has come. False when registering hung: on the embedded
        engine, once a process of the database was SIGKILLed, it can hang
        inside the engine until every process detaches. The caller must then
        leave ``db`` alone and go on through a fresh attachment; ``poll`` does
        the waking up until registering is tried again REGISTER_RETRY later."""
        if tags == self._tags and (self._collector is not None or time.monotonic() < self._retry_at):
            return True
        self.close()
        self._tags = set(tags)
        if not tags:
            return True
        names, outcome = sorted(event_name(tag) for tag in tags), {}

        def begin() -> None:
            try:
                collector = db.connection.event_collector(names)
                collector.begin()
                outcome["collector"] = collector
            except BaseException as exc:  # handed to the worker thread below
                outcome["error"] = exc

        registering = threading.Thread(target=begin, name="register-events", daemon=True)
        registering.start()
        registering.join(REGISTER_TIMEOUT)
        if registering.is_alive():
            log.error(
                "registering for event notifications did not finish in %.0fs; polling every %gs "
                "instead and trying again in %.0fs",
                REGISTER_TIMEOUT,
                self.poll,
                REGISTER_RETRY,
            )
            self._retry_at = time.monotonic() + REGISTER_RETRY
            return False
        if "error" in outcome:
            raise outcome["error"]
        self._collector = outcome["collector"]
        return True

    def wait(self, stamp: Callable[[], None], until: float | None = None) -> None:
        """Sleep until a notification, the poll interval, ``until`` (a
        monotonic time: a retry falls due) or a stop request, calling
        ``stamp`` every half second."""
        deadline = min(time.monotonic() + self.poll, until if until is not None else float("inf"))
        while not self.stop.is_set() and time.monotonic() < deadline:
            stamp()
            if self._collector is None:
                time.sleep(min(_WAIT_SLICE, deadline - time.monotonic()))
                continue
            counts = self._collector.wait(min(_WAIT_SLICE, max(deadline - time.monotonic(), 0)))
            if any(counts.values()):
                self._collector.flush()
                return

    def arrived(self) -> bool:
        """Whether a notification came since the last wait or look, without waiting."""
        if self._collector is None:
            return False
        if any(self._collector.wait(0).values()):
            self._collector.flush()
            return True
        return False

    def close(self) -> None:
        """Close the collector, working around firebird-driver 2.1 raising
        TypeError when a notification is still queued (it is consumed a moment later)."""
        collector, self._collector = self._collector, None
        for _ in range(100):
            if collector is None or collector.is_closed():
                return
            try:
                collector.close()
            except TypeError:
                time.sleep(0.01)
            except DatabaseError:
                return  # its attachment is gone, and the notifications with it

    def drop(self) -> None:
        """Forget the collector without closing it (its attachment is being abandoned)."""
        self._collector = None
