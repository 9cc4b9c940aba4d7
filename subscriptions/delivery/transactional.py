"""Transactional handlers inside a handler process: the handler's writes
and its event's acknowledgement commit in one transaction, on the process's
own attachment, made at the first such call.

Imported only when a process first runs a transactional handler: the others
never load the database driver, a good part of a handler process's start-up.
"""

from __future__ import annotations

from collections.abc import Callable

from subscriptions.db.connection import Database
from subscriptions.events import Event
from subscriptions.plugins import Handler

from . import reaper
from .calls import invoke
from .claims import Claimer
from .options import ListenOptions
from .serving import serves


class Transactions:
    """The attachment a handler process's transactional handlers share."""

    def __init__(self, options: ListenOptions, owner: str) -> None:
        self.options = options
        self.owner = owner
        self.claimer: Claimer | None = None

    def wrap(self, handler: Handler) -> Callable[[Event], object]:
        """The handler with its writes and the event's acknowledgement in one
        transaction: both commit, or neither does."""

        def run_in_transaction(event: Event) -> object:
            claimer = self._claimer()
            with claimer.db.transaction() as cursor:
                event.cursor = cursor
                try:
                    result = invoke(handler.function, event)
                finally:
                    event.cursor = None
                claimer.ack_in(cursor, event.id)
            return result

        return run_in_transaction

    def _claimer(self) -> Claimer:
        """The attachment's claimer; a new attachment once the last one was
        lost (its event's attempt failed with that)."""
        if self.claimer is None or self.claimer.db.lost is not None:
            db = Database(self.options.settings)
            reaper.tag(db, self.owner, serves(self.options))
            self.claimer = Claimer(db, self.owner, self.options.lease)
        return self.claimer

    def close(self) -> None:
        if self.claimer is not None:
            self.claimer.free_statements()
            self.claimer.db.close()
