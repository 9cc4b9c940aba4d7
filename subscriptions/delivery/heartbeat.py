"""Renewing a worker's leases (its spans and stream batches) while claimed
events are unsettled, so a healthy handler that runs longer than ``--lease``
is not delivered twice."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterable

from firebird.driver import DatabaseError

from subscriptions.db.connection import Database
from subscriptions.db.errors import first_line
from subscriptions.errors import SubsError

from .claims import Claimer

log = logging.getLogger("subs.worker")


class InFlight:
    """The events a worker has claimed and not settled yet.

    ``settling`` serialises writes to their leases: settling and the
    heartbeat's renewal write the same rows on two attachments and could
    deadlock (which the engine breaks only after DeadlockTimeout, 10 s).
    """

    def __init__(self) -> None:
        self._ids: set[int] = set()
        self._lock = threading.Lock()
        self.settling = threading.Lock()

    def add(self, ids: Iterable[int]) -> None:
        with self._lock:
            self._ids.update(ids)

    def discard(self, ids: Iterable[int]) -> None:
        with self._lock:
            self._ids.difference_update(ids)

    def __bool__(self) -> bool:
        with self._lock:
            return bool(self._ids)


def renew_leases(
    in_flight: InFlight, attach: Callable[[], Database], owner: str, lease: float, stop: threading.Event
) -> None:
    """Heartbeat thread: every third of the lease, while any event is in
    flight (running or waiting in its batch), renew every lease ``owner``
    holds, on an attachment of its own; ends when ``stop`` is set."""
    claimer: Claimer | None = None
    with contextlib.suppress(DatabaseError, SubsError):  # attached again below when needed, and warned of then
        claimer = Claimer(attach(), owner, lease)
    while not stop.wait(lease / 3):
        if not in_flight:
            continue
        try:
            claimer = claimer or Claimer(attach(), owner, lease)
            with in_flight.settling:
                if in_flight:
                    claimer.extend()
        except (DatabaseError, SubsError) as exc:
            log.warning("could not renew leases: %s", first_line(exc))
            claimer = None
    if claimer is not None:
        with contextlib.suppress(DatabaseError):  # its engine shut down by a stop signal (lifeline.py)
            claimer.free_statements()
        claimer.db.close()
