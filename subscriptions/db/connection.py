"""Attaching, and short transactions on one attachment."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import logging
import time
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Any, TypeVar, cast

from firebird.driver import (
    TPB,
    Connection,
    Cursor,
    DatabaseError,
    Isolation,
    TableAccessMode,
    TableShareMode,
    TraAccessMode,
    connect,
    create_database,
    tpb,
)
from firebird.driver.core import BlobReader

from subscriptions.errors import SubsError

from . import runtime, sql
from .errors import LockWaitOver, connect_error, is_conflict, is_connection_lost, role_error
from .retry import Backoff, retrying
from .settings import ConnectionSettings

logger = logging.getLogger(__name__)
T = TypeVar("T")
CONFLICT_ATTEMPTS = 10

# The driver objects of lost attachments (Database._abandon). Never freed,
# not even as the interpreter exits: their destructors would call into the
# lost attachment (an error for each, printed then, or a crash).
_abandoned: list[tuple[Connection, Cursor | None]] = []
ctypes.pythonapi.Py_IncRef(ctypes.py_object(_abandoned))


@functools.cache
def nowait_tpb() -> bytes:
    """READ COMMITTED NO WAIT: for claims and anything that must give way
    rather than wait. Built on first use: building a TPB loads the client
    library, which must be the embedded runtime's (runtime.load())."""
    return cast(bytes, tpb(Isolation.READ_COMMITTED_RECORD_VERSION, lock_timeout=0))


@functools.cache
def waiting_tpb(lock_wait: int) -> bytes:
    """SNAPSHOT that waits at most ``lock_wait`` seconds for a row another
    transaction holds: the caller says what a longer wait means (settling
    tries again visibly, delivery/dispatch.py; a command gives up)."""
    return cast(bytes, tpb(Isolation.SNAPSHOT, lock_timeout=lock_wait))


@functools.cache
def protected_write_tpb(table: str, lock_timeout: int = 0) -> bytes:
    """READ COMMITTED holding ``table`` for protected write from its start:
    others may read the table but not write it until the commit. When others
    are writing it, starting the transaction fails with a lock conflict, at
    once or after ``lock_timeout`` seconds. For DDL whose commit must not be
    refused because the table is in use (housekeeping.py)."""
    spec = TPB(isolation=Isolation.READ_COMMITTED_RECORD_VERSION, lock_timeout=lock_timeout)
    spec.reserve_table(table, TableShareMode.PROTECTED, TableAccessMode.LOCK_WRITE)
    return cast(bytes, spec.get_buffer())


@functools.cache
def read_only_tpb() -> bytes:
    """READ COMMITTED read-only: for reads that must never hold back the
    server's garbage collection (the console's pages)."""
    return cast(bytes, tpb(Isolation.READ_COMMITTED_RECORD_VERSION, access_mode=TraAccessMode.READ))


def open_connection(settings: ConnectionSettings, *, create: bool = False) -> Connection:
    """Attach (or create and attach) with the UTF8 connection character set, so
    non-ASCII identifiers and values survive both ways."""
    runtime.load()
    attach = create_database if create else connect
    try:
        return attach(
            settings.target,
            user=settings.effective_user,
            password=settings.password,
            role=sql.quote(settings.role) if settings.role else None,
            charset="UTF8",
        )
    except DatabaseError as exc:
        raise connect_error(exc, settings) from None


@functools.cache
def _warn_of_unknown_zone(zone: str) -> None:
    """Once per process: every attachment finds it (sql/engine.sql)."""
    logger.warning(
        "this Firebird does not know subs's time zone %r (EVENT_TIME_ZONE(), recorded where the database was "
        "installed): subs reads and stamps times in each session's own zone; update this engine, whose time "
        "zone data is older",
        zone,
    )


class Database:
    """One attachment, used in short transactions only (nothing is left open
    between calls, so garbage collection is never held back by us)."""

    def __init__(self, settings: ConnectionSettings, *, create: bool = False, lock_wait: int | None = None) -> None:
        """``lock_wait``: how long a transaction begun without a TPB waits for
        a row another transaction holds; None: as long as that transaction
        lasts. A lock held longer fails the transaction (LockWaitOver)."""
        if create and settings.role is not None:
            raise SubsError(
                f"cannot create {settings.dsn} with role {settings.role!r}: a new database has no roles; "
                "create it without --role/SUBS_ROLE"
            )
        self.settings = settings
        self.lock_wait = lock_wait
        self.lost: DatabaseError | None = None  # what lost the attachment (see _abandon)
        self.connection = open_connection(settings, create=create)
        with self.transaction() as cursor:
            cursor.execute(sql.load("engine")["attachment"])
            version, role, unknown_zone = cursor.fetchone()
        if unknown_zone is not None:
            _warn_of_unknown_zone(unknown_zone)
        # (major, minor, patch) of the engine actually serving this database.
        self.engine_version = tuple(int(part) for part in str(version).split("."))
        if settings.role is not None and role != settings.role:
            self.close()
            raise role_error(settings)

    def close(self) -> None:
        """Detach; an attachment lost meanwhile (killed, or its engine shut
        down by the client library on a stop signal) is left as it is."""
        if self.lost is not None:
            return
        with contextlib.suppress(DatabaseError):
            if self.connection.main_transaction.is_active():
                self.connection.rollback()
        try:
            self.connection.close()
        except DatabaseError as exc:
            if not is_connection_lost(exc):
                raise
            self._abandon(None, exc)

    def __enter__(self) -> Database:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    @contextlib.contextmanager
    def transaction(self, tpb: bytes | None = None) -> Iterator[Cursor]:
        """A transaction (SNAPSHOT unless ``tpb`` says otherwise) committed on
        success and rolled back on any error. Without ``tpb``, one that
        failed on a conflict after ``lock_wait`` raises LockWaitOver: the
        engine reports a lock wait that ran out as a conflict too."""
        if self.lost is not None:
            raise self.lost
        connection = self.connection
        if connection.main_transaction.is_active():
            # The driver's begin() would silently commit the open transaction.
            raise RuntimeError("nested Database.transaction()")
        lock_wait = self.lock_wait if tpb is None else None
        if lock_wait is not None:
            tpb = waiting_tpb(lock_wait)
        began = time.monotonic()
        try:
            connection.begin(tpb)
        except DatabaseError as exc:
            if is_connection_lost(exc):
                self._abandon(None, exc)
            raise
        cursor = connection.cursor()
        try:
            yield cursor
            cursor.close()
            # Deferred work (DDL, constraint checks) can fail at commit: the
            # transaction is then still open and must be rolled back too.
            connection.commit()
        except BaseException as exc:
            self._end_failed(cursor, exc)
            # The engine ends a lock wait on a whole second of its clock:
            # Firebird 3 gave up a 10 s wait after 9.989 s, a 1 s one after 0.545 s.
            waited = time.monotonic() - began + 1
            if lock_wait is not None and isinstance(exc, DatabaseError) and is_conflict(exc) and waited >= lock_wait:
                raise LockWaitOver(lock_wait) from None
            raise

    def _end_failed(self, cursor: Cursor, error: BaseException) -> None:
        """Close the cursor and roll back after ``error``; on a lost
        attachment, make no further call into it."""
        if isinstance(error, DatabaseError) and is_connection_lost(error):
            self._abandon(cursor, error)
            return
        try:
            cursor.close()
            if self.connection.main_transaction.is_active():
                self.connection.rollback()
        except DatabaseError as exc:
            if not is_connection_lost(exc):
                raise
            self._abandon(cursor, exc)

    def _abandon(self, cursor: Cursor | None, error: DatabaseError) -> None:
        """Leave a lost attachment and the cursor on it as they are, for the
        life of the process. firebird-driver's close of a lost attachment
        fails half-way and frees it while the cursor still holds its result
        set and statement; closing those later (the garbage collector does)
        then calls into freed memory and the process dies of SIGSEGV
        (FIREBIRD-BUGS 9). A rollback there can also block for ever (seen on
        Firebird 3 with events registered); the server has already undone
        the transaction. What is kept is a few KB per lost attachment; each
        further transaction raises ``error`` again."""
        self.lost = error
        _abandoned.append((self.connection, cursor))

    def run(
        self,
        work: Callable[[Cursor], T],
        *,
        attempts: int = CONFLICT_ATTEMPTS,
        tpb: bytes | None = None,
        backoff: Backoff | None = None,
    ) -> T:
        """Run ``work`` in a transaction (``tpb``, SNAPSHOT by default),
        retrying from scratch when a concurrent transaction changed the same
        rows or metadata first (not after ``lock_wait``: LockWaitOver)."""

        def once() -> T:
            with self.transaction(tpb) as cursor:
                return work(cursor)

        return retrying(
            once,
            attempts=attempts,
            retry_on=lambda exc: isinstance(exc, DatabaseError) and is_conflict(exc),
            sleep=time.sleep,
            backoff=backoff or Backoff(0.04, 1.0),
        )

    def fetch_value(self, statement: str, *params: object) -> Any:
        with self.transaction() as cursor:
            cursor.execute(statement, params)
            row = cursor.fetchone()
            return row[0] if row else None


def read_blob(value: object) -> bytes | None:
    """A binary BLOB column's value as bytes: the driver hands out small ones
    as bytes and large ones as a BlobReader."""
    if value is None or isinstance(value, bytes):
        return value
    with value:  # type: ignore[attr-defined]
        return cast(bytes, value.read())  # type: ignore[attr-defined]


def fetch_all(cursor: Cursor) -> list[tuple[Any, ...]]:
    """The cursor's remaining rows, every BLOB in them read: the driver hands
    out a large one as a BlobReader of the cursor's statement, which the
    cursor's next execute closes. Types are compared, not isinstance-checked:
    BlobReader is an io.IOBase, whose isinstance check cost a claim's row
    about 2 µs."""
    return [
        tuple(_read(value) if type(value) is BlobReader else value for value in row)
        if BlobReader in map(type, row)
        else row
        for row in cursor.fetchall()
    ]


def _read(blob: BlobReader) -> Any:
    with blob:
        return blob.read()


def read_text(value: object) -> str | None:
    """A text BLOB column's value as str: the driver hands out small ones as str
    and large ones as a BlobReader."""
    if value is None or isinstance(value, str):
        return value
    with value:  # type: ignore[attr-defined]
        return cast(str, value.read())  # type: ignore[attr-defined]
