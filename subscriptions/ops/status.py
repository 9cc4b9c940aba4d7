"""What operators ask of the event log: per-subscription status, and the
events that are failing or dead."""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection
from dataclasses import asdict, dataclass
from typing import Any

from firebird.driver import Cursor

from subscriptions.capture.drift import OK, capture_states
from subscriptions.capture.values import UndecodableEvent, decode
from subscriptions.db import sql
from subscriptions.db.connection import Database, read_text
from subscriptions.db.errors import spelled_out
from subscriptions.db.settings import ConnectionSettings
from subscriptions.delivery import oldest_transaction
from subscriptions.delivery.serving import Consumer, consumers, listening_modes, sees_every_attachment
from subscriptions.schema.version import require_current

from .text_table import describe_age


@dataclass(frozen=True)
class BackfillStatus:
    """The latest `subs backfill` run of an insert subscription. ``running``:
    whether an attachment runs it, as MON$ shows them to the user (all to
    SYSDBA, the database's owner and RDB$ADMIN); None when no attachment
    this user sees runs it, but it may not see them all."""

    rows_done: int
    rows_total: int
    events: int
    finished: bool
    seconds_since_update: float
    running: bool | None

    def describe(self) -> str:
        if self.finished:
            return f"done {self.rows_done:,} row{'' if self.rows_done == 1 else 's'}"
        share = 100.0 * self.rows_done / self.rows_total if self.rows_total else 100.0
        stands = f"{self.rows_done:,}/{self.rows_total:,} rows ({share:.0f}%)"
        age = describe_age(self.seconds_since_update)
        if self.running is None:
            return f"{stands}, updated {age} ago"
        return f"{stands}, running, updated {age} ago" if self.running else f"{stands}, stopped {age} ago"


# What `subs status` and the console say to a user that does not see every
# attachment (serving.sees_every_attachment).
PARTIAL_VIEW = (
    "this user sees only its own user's attachments in MON$, so listeners and running backfills of other "
    "users are not shown; SYSDBA, the database's owner and RDB$ADMIN see them all, and on Firebird 4 and later "
    "a role with MONITOR_ANY_ATTACHMENT (docs/OPERATIONS.md, Users and rights)"
)


def backfills(cursor: Cursor, sees_every: bool) -> dict[int, BackfillStatus]:
    """The last backfill run of each insert subscription that had one;
    ``sees_every``: whether an attachment this user does not see runs none."""
    cursor.execute(sql.load("status")["backfills"])
    runs: dict[int, BackfillStatus] = {}
    for sub_id, done, total, events, finished, age, seen_running in cursor.fetchall():
        running = True if seen_running else False if sees_every else None
        runs[sub_id] = BackfillStatus(
            int(done), int(total or 0), int(events), bool(finished), float(age or 0) / 1000, running
        )
    return runs


@dataclass(frozen=True)
class SubscriptionStatus:
    sub_id: int
    table: str
    action: str
    tag: str
    active: bool
    paused: bool
    pending: int
    in_flight: int
    failed: int
    dead: int
    oldest_pending_age: float | None  # seconds
    capture: str  # drift.OK, what is wrong with the table's capture, or "removed"
    backfill: BackfillStatus | None = None
    listeners: tuple[Consumer, ...] = ()  # the live listeners that take its tag

    @property
    def listening(self) -> str:
        return listening_modes(self.listeners)

    def as_dict(self) -> dict[str, object]:
        data = asdict(self)
        data["listeners"] = [{"owner": listener.owner, "mode": listener.mode} for listener in self.listeners]
        return data


@dataclass(frozen=True)
class ProblemEvent:
    """A failing or dead event; ``when`` is its next attempt or its death."""

    id: int
    tag: str
    table: str
    action: str
    pk: dict[str, Any]
    attempts: int
    last_error: str | None
    created_at: dt.datetime
    when: dt.datetime | None

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class Status:
    """What `subs status` shows: each subscription, the transaction left
    open for long, if any, and whether it shows every listener and backfill."""

    subscriptions: list[SubscriptionStatus]
    open_transaction: OpenTransaction | None
    sees_every_attachment: bool


def read_status(settings: ConnectionSettings) -> Status:
    """Status in one attachment and transaction (a second attachment cost
    every `subs status --watch` refresh a connect)."""
    with Database(settings) as db:
        require_current(db)
        with db.transaction() as cursor:
            cursor.execute(sql.load("status")["status"])
            rows = cursor.fetchall()
            states = capture_states(cursor, {row[1] for row in rows if row[4]})  # active ones
            sees_every = sees_every_attachment(cursor)
            listeners = consumers(cursor)
            runs = backfills(cursor, sees_every)
            open_transaction = long_open_transaction(cursor)
    subscriptions = [
        SubscriptionStatus(
            sub_id=sub_id,
            table=table,
            action=action,
            tag=tag,
            active=active,
            paused=bool(paused),
            pending=live - in_flight - failed,
            in_flight=in_flight,
            failed=failed,
            dead=dead,
            oldest_pending_age=None if oldest_ms is None else float(oldest_ms) / 1000,
            capture=states[table] if active else "removed",
            backfill=runs.get(sub_id),
            listeners=tuple(listener for listener in listeners if active and listener.takes(tag)),
        )
        for sub_id, table, action, tag, active, paused, live, in_flight, failed, dead, oldest_ms in rows
    ]
    return Status(subscriptions, open_transaction, sees_every)


@dataclass(frozen=True)
class OpenTransaction:
    """The database's oldest active transaction, open for long: while it is,
    handled events stay in EVENT_LOG as garbage (delivery/oldest_transaction.py)."""

    id: int
    seconds: float
    user: str
    process: str | None

    def describe(self) -> str:
        holder = self.user + (f", {self.process}" if self.process else "")
        return (
            f"transaction {self.id} ({holder}) has been open for {describe_age(self.seconds)}: the events handled "
            "since it started stay in EVENT_LOG as garbage, and the log grows with them; commit or roll it back"
        )


def long_open_transaction(cursor: Cursor) -> OpenTransaction | None:
    """The oldest active transaction if it has been open for
    oldest_transaction.OLD_AFTER or more and MON$ shows it to this user."""
    cursor.execute(sql.load("status")["oldest_transaction"])
    row = cursor.fetchone()
    if row is None or row[1] < oldest_transaction.OLD_AFTER * 1000:
        return None
    transaction_id, milliseconds, user, process = row
    return OpenTransaction(int(transaction_id), milliseconds / 1000, str(user), process or None)


@dataclass(frozen=True)
class LeftBehind:
    """What the log still holds for some tags, as `subs listen --drain` reports it."""

    waiting: int  # pending or in flight
    failing: int  # failed, waiting for a retry (not in flight)
    dead: int


def left_behind(settings: ConnectionSettings, tags: Collection[str]) -> LeftBehind:
    """The events of ``tags`` (all when empty) the log holds: the counts of
    read_status without its capture check, which reads every subscribed
    table's metadata (1.5 s with 300 tables)."""
    waiting = failing = dead = 0
    with Database(settings) as db:
        require_current(db)
        with db.transaction() as cursor:
            cursor.execute(sql.load("status")["status"])
            for _, _, _, tag, _, _, live, _, failed, dead_ones, _ in cursor.fetchall():
                if not tags or tag in tags:
                    waiting, failing, dead = waiting + live - failed, failing + failed, dead + dead_ones
    return LeftBehind(waiting, failing, dead)


def drifted(rows: list[SubscriptionStatus]) -> list[SubscriptionStatus]:
    """Active subscriptions whose changes are not captured as they should be."""
    return [row for row in rows if row.active and row.capture != OK]


def lagging(rows: list[SubscriptionStatus], max_lag: float) -> list[SubscriptionStatus]:
    """Active, unpaused subscriptions whose oldest live event is older than
    ``max_lag`` seconds: no listener, a stuck or failing handler, a backlog."""
    return [
        row
        for row in rows
        if row.active and not row.paused and row.oldest_pending_age is not None and row.oldest_pending_age > max_lag
    ]


def _key(captured: bytes) -> dict[str, Any]:
    """A problem event's key; one that cannot be decoded is shown as its bytes
    (such an event is dead for that reason, and its error says so)."""
    try:
        return decode(captured) or {}
    except UndecodableEvent:
        return {"captured": captured}


def problems(db: Database, kind: str, limit: int) -> list[ProblemEvent]:
    """The first ``limit`` events of ``kind``, "failed" (waiting for a
    retry) or "dead", oldest first."""
    with db.transaction() as cursor:
        cursor.execute(sql.load("status")[kind], (limit,))
        return [
            ProblemEvent(row[0], row[1], row[2], row[3], _key(row[4]), row[5], spelled_out(read_text(row[6])), *row[7:])
            for row in cursor.fetchall()
        ]
