"""The narrow seam between subs and firebird-driver: attaching, short
transactions, and turning engine errors into messages a user can act on."""

from __future__ import annotations

import contextlib
import functools
import random
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

from firebird.driver import Connection, Cursor, DatabaseError, Isolation, connect, create_database, tpb

from . import queries, runtime
from .config import ConnectionSettings
from .errors import SubsError

T = TypeVar("T")

# Engine status codes (gds codes) we react to.
LOCK_CONFLICT = 335544345
DEADLOCK = 335544336
UPDATE_CONFLICT = 335544451
CONCURRENT_TRANSACTION = 335544878
UNIQUE_KEY_VIOLATION = 335544665
NO_DUP = 335544349
CONFLICT_CODES = frozenset(
    {LOCK_CONFLICT, DEADLOCK, UPDATE_CONFLICT, CONCURRENT_TRANSACTION, UNIQUE_KEY_VIOLATION, NO_DUP}
)
# The attachment is gone (killed, server down, network): nothing left to roll back.
CONNECTION_LOST_CODES = frozenset(
    {
        335544856,  # connection shutdown (killed through MON$ATTACHMENTS, server stopping)
        335544721,  # unable to complete network request
        335544726,  # error reading data from the connection
        335544727,  # error writing data to the connection
        335544741,  # connection lost to database
        335544648,  # connection lost to pipe server
        335544528,  # database shutdown
    }
)
_LOGIN_FAILED = 335544472
_NETWORK_ERROR = 335544721
_IO_ERROR = 335544344
_NOT_A_DATABASE = 335544323
_OPEN_FAILED = 335544734
_IS_DIRECTORY_OR_READ = 335544736


class MissingDatabase(SubsError):
    """The DSN names a database file that does not exist (``subs init --create`` makes it)."""


def is_conflict(exc: DatabaseError) -> bool:
    """True for the errors that mean "someone else changed this first; try again"."""
    return bool(CONFLICT_CODES.intersection(exc.gds_codes or ()))


def is_connection_lost(exc: DatabaseError) -> bool:
    return bool(CONNECTION_LOST_CODES.intersection(exc.gds_codes or ()))


@functools.cache
def nowait_tpb() -> bytes:
    """READ COMMITTED NO WAIT: for claims and anything that must give way
    rather than wait. Built on first use: building a TPB loads the client
    library, which must be the embedded runtime's (runtime.load())."""
    return tpb(Isolation.READ_COMMITTED_RECORD_VERSION, lock_timeout=0)


def first_line(exc: BaseException) -> str:
    """An engine message squeezed onto one line (they come with '-' continuation lines)."""
    lines = [line.strip().lstrip("-").strip() for line in str(exc).splitlines()]
    return "; ".join(line for line in lines if line)


def _connect_error(exc: DatabaseError, settings: ConnectionSettings) -> SubsError:
    codes = set(exc.gds_codes or ())
    where = settings.dsn
    if _LOGIN_FAILED in codes:
        return SubsError(
            f"cannot connect to {where}: user {settings.effective_user!r} or its password was "
            "rejected; set --user/ISC_USER and ISC_PASSWORD"
        )
    if _NETWORK_ERROR in codes:
        return SubsError(
            f"cannot reach the Firebird server for {where}: {first_line(exc)}; "
            "check the host and port and that the server is running"
        )
    if _NOT_A_DATABASE in codes:
        return SubsError(f"{where} is not a Firebird database; check --database/SUBS_DATABASE")
    if _IO_ERROR in codes and _OPEN_FAILED in codes:
        return MissingDatabase(
            f"database {where} does not exist; check --database/SUBS_DATABASE, "
            "or create it with `subs init --create`"
        )
    if _IO_ERROR in codes:
        return SubsError(f"cannot open database {where}: {first_line(exc)}")
    return SubsError(f"cannot connect to {where}: {first_line(exc)}")


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
            charset="UTF8",
        )
    except DatabaseError as exc:
        raise _connect_error(exc, settings) from None


class Database:
    """One attachment, used in short transactions only (nothing is left open
    between calls, so garbage collection is never held back by us)."""

    def __init__(self, settings: ConnectionSettings, *, create: bool = False) -> None:
        self.settings = settings
        self.connection = open_connection(settings, create=create)
        # (major, minor, patch) of the engine actually serving this database.
        text = self.fetch_value(queries.load("schema")["engine_version"])
        self.engine_version = tuple(int(part) for part in str(text).split("."))

    def close(self) -> None:
        with contextlib.suppress(DatabaseError):
            if self.connection.main_transaction.is_active():
                self.connection.rollback()
        self.connection.close()

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @contextlib.contextmanager
    def transaction(self, tpb: bytes | None = None) -> Iterator[Cursor]:
        """A transaction (SNAPSHOT unless ``tpb`` says otherwise) committed on
        success and rolled back on any error."""
        connection = self.connection
        if connection.main_transaction.is_active():
            # The driver's begin() would silently commit the open transaction.
            raise RuntimeError("nested Database.transaction()")
        connection.begin(tpb)
        try:
            with connection.cursor() as cursor:
                yield cursor
            # Deferred work (DDL, constraint checks) can fail at commit: the
            # transaction is then still open and must be rolled back too.
            connection.commit()
        except DatabaseError as exc:
            # A rollback on a dead remote attachment can block for ever (seen
            # on Firebird 3 with an event collector attached); the server has
            # already undone the transaction.
            if not is_connection_lost(exc) and connection.main_transaction.is_active():
                connection.rollback()
            raise
        except BaseException:
            if connection.main_transaction.is_active():
                connection.rollback()
            raise

    def run(self, work: Callable[[Cursor], T], *, attempts: int = 10) -> T:
        """Run ``work`` in a transaction, retrying from scratch (after a random,
        growing pause) when a concurrent transaction changed the same rows or
        metadata first."""
        for attempt in range(1, attempts + 1):
            try:
                with self.transaction() as cursor:
                    return work(cursor)
            except DatabaseError as exc:
                if not is_conflict(exc) or attempt == attempts:
                    raise
            time.sleep(random.uniform(0, min(0.02 * 2**attempt, 1.0)))
        raise AssertionError("unreachable")

    def fetch_value(self, sql: str, *params: object) -> object:
        with self.transaction() as cursor:
            cursor.execute(sql, params)
            row = cursor.fetchone()
            return row[0] if row else None


def read_text(value: object) -> str | None:
    """A text BLOB column's value as str: the driver hands out small ones as str
    and large ones as a BlobReader."""
    if value is None or isinstance(value, str):
        return value
    with value:  # type: ignore[attr-defined]
        return value.read()  # type: ignore[attr-defined]
