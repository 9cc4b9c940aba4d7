"""The console's attachments: a few, reused across requests (attaching
costs more than a page's queries); each request takes one for one short
transaction and gives it back. One whose connection was lost is dropped."""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Iterator

from firebird.driver import DatabaseError

from subscriptions.db.connection import Database
from subscriptions.db.errors import is_connection_lost
from subscriptions.db.settings import ConnectionSettings

POOL_SIZE = 4


class Attachments:
    """At most ``size`` attachments, handed out one per request."""

    def __init__(self, settings: ConnectionSettings, size: int = POOL_SIZE) -> None:
        self.settings = settings
        self._idle: queue.LifoQueue[Database] = queue.LifoQueue()
        self._slots = threading.BoundedSemaphore(size)

    @contextlib.contextmanager
    def use(self) -> Iterator[Database]:
        with self._slots:
            try:
                db = self._idle.get_nowait()
            except queue.Empty:
                db = Database(self.settings)
            try:
                yield db
            except DatabaseError as exc:
                if is_connection_lost(exc):
                    with contextlib.suppress(DatabaseError):
                        db.close()
                else:
                    self._idle.put(db)
                raise
            except BaseException:
                self._idle.put(db)
                raise
            self._idle.put(db)

    def close(self) -> None:
        while True:
            try:
                db = self._idle.get_nowait()
            except queue.Empty:
                return
            with contextlib.suppress(DatabaseError):
                db.close()
