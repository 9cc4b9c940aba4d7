"""Engine status codes (gds codes) in one place, and what they mean to us."""

from __future__ import annotations

import ctypes
import re

from firebird.driver import DatabaseError, fbapi

from subscriptions.errors import SubsError

from .settings import ConnectionSettings

LOCK_CONFLICT = 335544345
LOCK_TIMEOUT = 335544510  # isc_lock_timeout: a WAIT transaction's lock_timeout ran out
DEADLOCK = 335544336
UPDATE_CONFLICT = 335544451
CONCURRENT_TRANSACTION = 335544878
UNIQUE_KEY_VIOLATION = 335544665
NO_DUP = 335544349
OBJECT_IN_USE = 335544453
COLUMN_UNKNOWN = 335544578  # isc_dsql_field_err
NO_PRIVILEGE = 335544352  # isc_no_priv: "no permission for ... access to ..."
# LOCK_TIMEOUT is a WAIT transaction's LOCK_CONFLICT: a relation another
# transaction reserved (an index rebuild holds EVENT_LOG) past its wait.
CONFLICT_CODES = frozenset(
    {LOCK_CONFLICT, LOCK_TIMEOUT, DEADLOCK, UPDATE_CONFLICT, CONCURRENT_TRANSACTION, UNIQUE_KEY_VIOLATION, NO_DUP}
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
_TEXT_ONLY = 335544382  # isc_random: a message the engine gives as text only
_EXECUTE_STATEMENT_ERROR = 335544926  # isc_eds_statement: "Execute statement error at ..."
_INNER_CODE = re.compile(r"^(\d{9}) : ", re.MULTILINE)  # how it spells the inner error's codes
INDEX_REBUILT = "index unexpectedly deleted"
# A READ COMMITTED update that waited for a transaction which then deleted
# the row fails with this text under the generic code (Firebird 3).
_ERASED_MEANWHILE = "cannot update erased record"
_NO_SUCH_INDEX = 335544636  # isc_indexname: "there is no index ... for table ..."
QUEUE_INDEX = "IX_EVENT_LOG_QUEUE"
_LOGIN_FAILED = 335544472
_NETWORK_ERROR = 335544721
_IO_ERROR = 335544344
_NOT_A_DATABASE = 335544323
_OPEN_FAILED = 335544734
# An engine attaching to a file whose lock table was made by an engine of
# another Firebird version (each has its own layout) fails with one of these,
# depending on which of the two versions came first.
_OTHER_VERSION = re.compile(r"inconsistent (lock table|shared memory) type/version")


class LockWaitOver(SubsError):
    """Rows a command needs were held by another transaction for the whole
    of its lock wait: one that is not ending."""

    def __init__(self, seconds: int) -> None:
        super().__init__(
            f"another transaction has held rows this needs for over {seconds} s and is not ending "
            "(an isql session that did not commit, or a `subs backfill` going on?): end it "
            "(MON$TRANSACTIONS lists the open ones) and run this again"
        )


class MissingDatabase(SubsError):
    """The DSN names a database file that does not exist (``subs init --create`` makes it)."""


def codes(exc: DatabaseError) -> frozenset[int]:
    """The error's gds codes, with those of a statement run by EXECUTE
    STATEMENT (sql/engine.sql's session set-up, the capture's DDL), which
    the engine gives in the text only."""
    found = frozenset(exc.gds_codes or ())
    if _EXECUTE_STATEMENT_ERROR in found:
        found |= {int(code) for code in _INNER_CODE.findall(str(exc))}
    return found


def is_conflict(exc: DatabaseError) -> bool:
    """True for the errors that mean "someone else changed this first; try again"."""
    erased_meanwhile = _TEXT_ONLY in codes(exc) and _ERASED_MEANWHILE in str(exc)
    return bool(CONFLICT_CODES & codes(exc)) or index_was_rebuilt(exc) or erased_meanwhile


def index_was_rebuilt(exc: DatabaseError) -> bool:
    """A statement that walked an index while another attachment rebuilt it
    (a listener's housekeeping, sql/housekeeping.sql) fails with this text
    under the engine's generic code, and one that names the claim index in
    its plan fails to prepare meanwhile (Firebird 3); run again, it uses
    the new index."""
    if _TEXT_ONLY in codes(exc) and INDEX_REBUILT in str(exc):
        return True
    return _NO_SUCH_INDEX in codes(exc) and QUEUE_INDEX in str(exc)


def is_connection_lost(exc: DatabaseError) -> bool:
    return bool(CONNECTION_LOST_CODES & codes(exc))


def first_line(exc: BaseException) -> str:
    """An engine message squeezed onto one line (they come with '-' continuation lines)."""
    lines = [line.strip().lstrip("-").strip() for line in str(exc).splitlines()]
    return "; ".join(line for line in lines if line)


def connect_error(exc: DatabaseError, settings: ConnectionSettings) -> SubsError:
    """A failed attach as a message saying what to check."""
    found = codes(exc)
    where = settings.dsn
    if _LOGIN_FAILED in found:
        return SubsError(
            f"cannot connect to {where}: user {settings.effective_user!r} or its password was "
            "rejected; set --user/ISC_USER and ISC_PASSWORD"
        )
    if _NETWORK_ERROR in found:
        return SubsError(
            f"cannot reach the Firebird server for {where}: {first_line(exc)}; "
            "check the host and port and that the server is running"
        )
    if _NOT_A_DATABASE in found:
        return SubsError(f"{where} is not a Firebird database; check --database/SUBS_DATABASE")
    if _IO_ERROR in found and _OPEN_FAILED in found:
        return MissingDatabase(
            f"database {where} does not exist; check --database/SUBS_DATABASE, or create it with `subs init --create`"
        )
    if _IO_ERROR in found:
        return SubsError(f"cannot open database {where}: {first_line(exc)}")
    if _OTHER_VERSION.search(str(exc)):
        return SubsError(
            f"cannot connect to {where}: another program has it open with a Firebird engine of "
            "another version, and engines of different versions cannot share a database file; "
            "give subs that program's engine version (pip install firebird-embedded==X.Y), "
            "or let every program reach the file through one Firebird server (host:/path)"
        )
    return SubsError(f"cannot connect to {where}: {first_line(exc)}")


def missing_right(exc: DatabaseError, user: str) -> SubsError | None:
    """A statement the engine refused for want of a right that a GRANT gives,
    as a message saying who may run it; None for any other error (read-write
    access to a database on a read-only file is no such right)."""
    if NO_PRIVILEGE not in codes(exc) or "access to database" in str(exc):
        return None
    return SubsError(
        f"user {user!r} lacks a right this needs ({first_line(exc)}): run it as the user that owns subs's "
        "tables (the one that ran `subs init`) or SYSDBA, or GRANT that user the right named"
    )


def role_error(settings: ConnectionSettings) -> SubsError:
    """The engine attached without the role asked for: it does not exist, or
    the user was not granted it."""
    return SubsError(
        f"user {settings.effective_user!r} has no role {settings.role!r} in {settings.dsn}: "
        f"the role does not exist or is not granted to the user; GRANT it TO USER {settings.effective_user} "
        "(as its owner), or leave out --role/SUBS_ROLE"
    )


# How a capture trigger on Firebird 3, whose PSQL has no RDB$ERROR, records
# the error a --when condition raised (sql/capture.sql).
_CODES_ONLY = re.compile(r"SQLSTATE (\w{5}), GDSCODE (\d+)$")
_MESSAGE_ARGUMENTS = 4
_ARG_END, _ARG_GDS, _ARG_STRING = 0, 1, 2  # a status vector's items (isc_arg_*)


def spelled_out(error: str | None) -> str | None:
    """A stored event error, with a Firebird 3 GDSCODE's message put in front
    of its codes by the client library (its arguments, which the trigger
    could not keep, shown as ?)."""
    found = _CODES_ONLY.search(error or "")
    if error is None or found is None:
        return error
    placeholder = ctypes.c_char_p(b"?")
    argument = ctypes.cast(placeholder, ctypes.c_void_p).value or 0
    vector = (fbapi.ISC_STATUS * (3 + 2 * _MESSAGE_ARGUMENTS))(
        _ARG_GDS, int(found.group(2)), *([_ARG_STRING, argument] * _MESSAGE_ARGUMENTS), _ARG_END
    )
    message = ctypes.create_string_buffer(1024)
    if not fbapi.get_api().fb_interpret(
        message, len(message), ctypes.pointer(ctypes.cast(vector, fbapi.ISC_STATUS_PTR))
    ):
        return error
    text = message.value.decode(errors="replace")
    return f"{error[: found.start()]}{text} ({found.group(0)})"
