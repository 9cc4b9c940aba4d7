"""What the console shows and does (`subs web`): one query layer under both
its pages and its JSON API (sql/console.sql).

Reads take a cursor, so that a page's reads share one short transaction
(``db.connection.read_only_tpb``: READ COMMITTED read-only, which never
holds back the server's garbage collection); the actions are in console_actions.py.
Nothing counts a whole log (see console.sql), so the cost of a page does not
grow with the backlog.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from firebird.driver import Cursor

from subscriptions.capture.drift import capture_states
from subscriptions.capture.keys import key_hash, row_key
from subscriptions.capture.values import UndecodableEvent, decode
from subscriptions.db import sql
from subscriptions.db.connection import fetch_all, read_blob, read_text
from subscriptions.db.errors import spelled_out
from subscriptions.delivery.metrics import queue_depths
from subscriptions.delivery.serving import consumers, listening_modes, sees_every_attachment
from subscriptions.errors import SubsError
from subscriptions.events import MAX_EVENT_ID

from .status import BackfillStatus, backfills

# Counts stop here and show as "1,000+": a refresh walks at most this many
# live and dead events per subscription (benchmark W9 keeps it flat).
MAX_COUNTED = 1_000
PAGE_SIZE = 50
MAX_PAGE_SIZE = 500
MAX_STATS_MINUTES = 24 * 60
STATES = {"pending": "P", "failed": "F", "dead": "D"}
_STATE_NAMES = {code: name for name, code in STATES.items()}


class NotFound(SubsError):
    """What was asked for does not exist (HTTP 404)."""


@dataclass(frozen=True)
class SubscriptionSummary:
    """A subscription's figures; ``at_least`` names the counts that stopped
    at MAX_COUNTED (the true figure is higher)."""

    id: int
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
    capture: str  # drift.OK, what is wrong with the capture, or "removed"
    listening: str = "-"  # the live listeners that take its tag (serving.listening_modes)
    at_least: tuple[str, ...] = ()
    backfill: BackfillStatus | None = None  # its last `subs backfill` run

    def as_dict(self) -> dict[str, Any]:
        return {
            **self.__dict__,
            "at_least": list(self.at_least),
            "backfill": None if self.backfill is None else asdict(self.backfill),
        }


@dataclass(frozen=True)
class LoggedEvent:
    """One row of EVENT_LOG, decoded; ``undecodable`` says why pk, old and new
    are missing when its bytes cannot be read."""

    id: int
    subscription: int
    state: str  # pending, failed or dead
    in_flight: bool
    attempts: int
    last_error: str | None
    pk: dict[str, Any]
    old: dict[str, Any] | None
    new: dict[str, Any] | None
    created_at: dt.datetime
    next_attempt_at: dt.datetime | None
    dead_at: dt.datetime | None
    held_by: str | None
    undecodable: str | None = None
    held_until: dt.datetime | None = field(default=None)

    @property
    def changed(self) -> set[str]:
        """Columns whose value differs between old and new (updates)."""
        if self.old is None or self.new is None:
            return set()
        return {name for name in self.old.keys() | self.new.keys() if self.old.get(name) != self.new.get(name)}

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class EventPage:
    events: list[LoggedEvent]
    next: int | None  # the cursor (EVENT_ID) of the next page


@dataclass(frozen=True)
class EventFilter:
    """Which events a list shows: by state, subscription, and one row's key
    (the table's key columns' values in key order; needs ``subscription``
    or ``table``)."""

    state: str | None = None
    subscription: int | None = None
    table: str | None = None
    key: tuple[str, ...] = ()

    def check(self) -> None:
        if self.state is not None and self.state not in STATES:
            raise SubsError(f"state {self.state!r} is not one of {', '.join(STATES)}")
        if self.key and self.subscription is None and not self.table:
            raise SubsError("a key search needs the subscription or the table the key belongs to")


@dataclass(frozen=True)
class Overview:
    """Every subscription's figures, and whether they show every listener
    and running backfill (False: only those of this user, which is all MON$
    shows it; status.PARTIAL_VIEW says so)."""

    subscriptions: list[SubscriptionSummary]
    sees_every_attachment: bool


def overview(cursor: Cursor, max_counted: int = MAX_COUNTED) -> Overview:
    depths = queue_depths(cursor, max_counted)
    states = capture_states(cursor, {depth.table for depth in depths if depth.active})
    listeners = consumers(cursor)
    sees_every = sees_every_attachment(cursor)
    runs = backfills(cursor, sees_every)
    summaries = [
        SubscriptionSummary(
            id=depth.sub_id,
            table=depth.table,
            action=depth.action,
            tag=depth.tag,
            active=depth.active,
            paused=depth.paused,
            pending=depth.pending,
            in_flight=depth.in_flight,
            failed=depth.failed,
            dead=depth.dead,
            oldest_pending_age=depth.oldest_seconds,
            capture=states[depth.table] if depth.active else "removed",
            listening=listening_modes(listener for listener in listeners if depth.active and listener.takes(depth.tag)),
            at_least=(("pending", "in_flight", "failed") if depth.live_more else ())
            + (("dead",) if depth.dead_more else ()),
            backfill=runs.get(depth.sub_id),
        )
        for depth in depths
    ]
    return Overview(summaries, sees_every)


@dataclass(frozen=True)
class MinuteStats:
    minute: dt.datetime
    handled: int
    failed: int
    dead: int
    backlog: int | None  # as a listener saw it in that minute; None: none ran


def stats(cursor: Cursor, minutes: int = 60) -> dict[int, list[MinuteStats]]:
    """Per subscription, one entry per minute of the last ``minutes`` (the
    current one last), zeros where nothing was recorded."""
    if not 1 <= minutes <= MAX_STATS_MINUTES:
        raise SubsError(f"minutes must be between 1 and {MAX_STATS_MINUTES}, not {minutes}")
    statements = sql.load("console")
    cursor.execute(statements["server_minute"])
    now = cursor.fetchone()[0].replace(second=0, microsecond=0)
    axis = [now - dt.timedelta(minutes=back) for back in range(minutes - 1, -1, -1)]
    cursor.execute(statements["stats"], (axis[0],))
    recorded = {(row[0], row[1]): row[2:] for row in cursor.fetchall()}
    empty = (0, 0, 0, None)
    return {
        sub_id: [MinuteStats(minute, *_minute(recorded.get((sub_id, minute), empty))) for minute in axis]
        for sub_id in subscriptions(cursor)
    }


def _minute(row: Sequence[Any]) -> tuple[int, int, int, int | None]:
    handled, failed, dead, backlog = row
    return int(handled), int(failed), int(dead), None if backlog is None else int(backlog)


def _event(row: Sequence[Any], held_until: dt.datetime | None = None) -> LoggedEvent:
    event_id, sub_id, pk_row, old, long_old, new, long_new, state, held, attempts, error = row[:11]
    created_at, next_attempt_at, dead_at, held_by = row[11:15]
    undecodable = None
    try:
        pk = decode(pk_row) or {}
        old_values = decode(old if long_old is None else read_blob(long_old))
        new_values = decode(new if long_new is None else read_blob(long_new))
    except UndecodableEvent as exc:
        pk, old_values, new_values, undecodable = {}, None, None, str(exc)
    return LoggedEvent(
        id=event_id,
        subscription=sub_id,
        state=_STATE_NAMES[state],
        in_flight=bool(held),
        attempts=attempts,
        last_error=spelled_out(read_text(error)),
        pk=pk,
        old=old_values,
        new=new_values,
        created_at=created_at,
        next_attempt_at=next_attempt_at,
        dead_at=dead_at,
        held_by=held_by,
        undecodable=undecodable,
        held_until=held_until,
    )


def events(cursor: Cursor, chosen: EventFilter, *, limit: int = PAGE_SIZE, after: int = 0) -> EventPage:
    """A page of events in log order after the cursor ``after``: one walk
    of an index per subscription (and live/dead), or per tag for a key,
    each at most ``limit + 1`` long, merged."""
    chosen.check()
    if not 1 <= limit <= MAX_PAGE_SIZE:
        raise SubsError(f"limit must be between 1 and {MAX_PAGE_SIZE}, not {limit}")
    statements = sql.load("console")
    like = STATES[chosen.state] if chosen.state else "%"
    rows: list[Sequence[Any]] = []
    targets = _subscriptions(cursor, chosen)
    if chosen.key:
        table, captured = row_key(cursor, chosen.table or targets[0][1], chosen.key)
        for tag in sorted({tag for _, sub_table, tag in targets if sub_table == table}):
            row_hash = key_hash(cursor, table, tag, captured)
            cursor.execute(
                statements["row_events"],
                (limit + 1, row_hash, captured, after, table, chosen.subscription, chosen.subscription, like),
            )
            rows.extend(fetch_all(cursor))
    else:
        deads = [chosen.state == "dead"] if chosen.state else [False, True]
        for sub_id, _, _ in targets:
            for dead in deads:
                cursor.execute(statements["subscription_events"], (limit + 1, sub_id, dead, after, like))
                rows.extend(fetch_all(cursor))
    rows.sort(key=lambda row: int(row[0]))
    page = [_event(row) for row in rows[:limit]]
    return EventPage(page, page[-1].id if len(rows) > limit else None)


def _subscriptions(cursor: Cursor, chosen: EventFilter) -> list[tuple[int, str, str]]:
    """(id, table, tag) of the subscriptions a filter covers."""
    every = [(s.id, s.table, s.tag) for s in subscriptions(cursor).values()]
    if chosen.subscription is not None:
        chosen_ones = [target for target in every if target[0] == chosen.subscription]
        if not chosen_ones:
            raise NotFound(f"there is no subscription {chosen.subscription}")
        return chosen_ones
    return every


def event(cursor: Cursor, event_id: int) -> LoggedEvent:
    if not 0 < event_id <= MAX_EVENT_ID:
        raise NotFound(f"there is no event {event_id}; event ids run from 1 to {MAX_EVENT_ID}")
    cursor.execute(sql.load("console")["event"], (event_id,))
    row = cursor.fetchone()
    if row is None:
        raise NotFound(f"there is no event {event_id}; it was handled or discarded, or never existed")
    return _event(row[:-1], row[-1])


@dataclass(frozen=True)
class SubscriptionName:
    """What names a subscription on a page, without its figures."""

    id: int
    table: str
    action: str
    tag: str
    active: bool
    paused: bool


def subscriptions(cursor: Cursor) -> dict[int, SubscriptionName]:
    cursor.execute(sql.load("console")["subscriptions"])
    return {row[0]: SubscriptionName(*row) for row in cursor.fetchall()}


def subscription(cursor: Cursor, sub_id: int) -> SubscriptionName:
    found = subscriptions(cursor).get(sub_id)
    if found is None:
        raise NotFound(f"there is no subscription {sub_id}")
    return found
