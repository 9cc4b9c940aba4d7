"""A worker's wake-ups: the Firebird events (POST_EVENT) of its tags.

A notification only means "drain now"; counts are not trusted, and ``--poll``
wakes the worker anyway, so a lost notification costs at most one poll
interval. REQUEUED_EVENT also says that dead events were queued again
with their old ids, below the claim floors (floors.py).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from subscriptions.capture.triggers import REQUEUED_EVENT, event_name
from subscriptions.db.connection import Database
from subscriptions.db.events import EventWatch

log = logging.getLogger("subs.worker")

REGISTER_TIMEOUT = 10.0
REGISTER_RETRY = 300.0
_WAIT_SLICE = 0.5


class Notifications:
    """The event watch of one worker, registered for its tags."""

    def __init__(self, poll: float, stop: threading.Event) -> None:
        self.poll = poll
        self.stop = stop
        self._watch: EventWatch | None = None
        self._tags: set[str] = set()
        self._retry_at = 0.0
        self._woken = False  # a notification requeued() took for arrived()
        self._heard_requeues = False  # requeued() asked since the watch was registered
        # Registrations that hung: if one ends after all, its watch is kept
        # here, as the client library may call back into it.
        self._hung: list[list[EventWatch]] = []

    def follow(self, db: Database, tags: set[str]) -> bool:
        """Be registered on ``db`` for ``tags``: (re)register when they changed,
        when there is no collector (a reconnect), or when a hung registration's
        retry time has come. False when registering hung: on the embedded
        engine, once a process of the database was SIGKILLed, it can hang
        inside the engine until every process detaches. The caller must then
        leave ``db`` alone and go on through a fresh attachment; ``poll`` does
        the waking up until registering is tried again REGISTER_RETRY later."""
        if tags == self._tags and (self._watch is not None or time.monotonic() < self._retry_at):
            return True
        self.close()
        self._tags = set(tags)
        if not tags:
            return True
        names = sorted(event_name(tag) for tag in tags) + [REQUEUED_EVENT]
        watches: list[EventWatch] = []
        errors: list[BaseException] = []

        def begin() -> None:
            try:
                watches.append(EventWatch(db.connection, names))
            except BaseException as exc:  # handed to the worker thread below
                errors.append(exc)

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
            self._hung.append(watches)
            return False
        if errors:
            raise errors[0]
        self._watch = watches[0]
        self._heard_requeues = False
        return True

    def wait(self, stamp: Callable[[], None], until: float | None = None) -> None:
        """Sleep until a notification, the poll interval, ``until`` (a
        monotonic time: a retry falls due) or a stop request, calling
        ``stamp`` every half second."""
        deadline = min(time.monotonic() + self.poll, until if until is not None else float("inf"))
        while not self.stop.is_set() and time.monotonic() < deadline:
            stamp()
            if self._watch is None:
                time.sleep(min(_WAIT_SLICE, deadline - time.monotonic()))
                continue
            if self._take(self._watch.wait(min(_WAIT_SLICE, max(deadline - time.monotonic(), 0)))):
                return

    def arrived(self) -> bool:
        """Whether a notification came since the last wait or look, without waiting."""
        woken, self._woken = self._woken, False
        return woken or (self._watch is not None and self._take(self._watch.take()))

    def requeued(self) -> bool:
        """Whether dead events may have been queued again since the last
        call: REQUEUED_EVENT came, or no registration would have heard it
        (none, or a new one: a post before it was missed)."""
        watch = self._watch
        if watch is None:
            return True
        if not self._heard_requeues:
            self._heard_requeues = True
            return True
        self._woken = self._take(watch.take()) or self._woken
        return watch.posted(REQUEUED_EVENT)

    def _take(self, notified: bool) -> bool:
        """``notified``, after forgetting a watch the server ended: its
        attachment is going, which the worker's next statement tells; if
        it lives on after all, follow() registers afresh."""
        if notified and self._watch is not None and self._watch.ended:
            self._watch.abandon()
            self._watch, self._tags = None, set()
        return notified

    def close(self) -> None:
        """Cancel the registration."""
        watch, self._watch = self._watch, None
        if watch is not None:
            watch.close()

    def drop(self) -> None:
        """Forget the watch without cancelling it (its attachment is being abandoned)."""
        if self._watch is not None:
            self._watch.abandon()
        self._watch = None
