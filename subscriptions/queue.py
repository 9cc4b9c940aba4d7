"""What operators ask of the event log: status, failing and dead events,
re-queueing dead events and purging old ones."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from . import queries, schema
from .capture import decode
from .config import ConnectionSettings
from .db import Database, read_text
from .errors import SubsError
from .identifiers import check_tag


@dataclass(frozen=True)
class SubscriptionStatus:
    sub_id: int
    table: str
    action: str
    tag: str
    active: bool
    pending: int
    in_flight: int
    failed: int
    dead: int
    oldest_pending_age: float | None  # seconds

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class ProblemEvent:
    """A failing or dead event; ``when`` is its next attempt or its death."""

    id: int
    tag: str
    table: str
    action: str
    pk: dict
    attempts: int
    last_error: str | None
    created_at: dt.datetime
    when: dt.datetime | None

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def status(settings: ConnectionSettings) -> list[SubscriptionStatus]:
    with Database(settings) as db:
        schema.require_current(db)
        with db.transaction() as cursor:
            cursor.execute(queries.load("queue")["status"])
            rows = cursor.fetchall()
    return [
        SubscriptionStatus(*row[:5], *(int(n or 0) for n in row[5:9]), None if row[9] is None else float(row[9]) / 1000)
        for row in rows
    ]


def problems(db: Database, kind: str) -> list[ProblemEvent]:
    """``kind`` is "failed" (waiting for a retry) or "dead"."""
    with db.transaction() as cursor:
        cursor.execute(queries.load("queue")[kind])
        return [
            ProblemEvent(row[0], row[1], row[2], row[3], decode(row[4]) or {}, row[5], read_text(row[6]), *row[7:])
            for row in cursor.fetchall()
        ]


def retry(db: Database, *, ids: Sequence[int] = (), tag: str | None = None, everything: bool = False) -> int:
    """Re-queue dead events (attempts start again from 1); unknown ids are an
    error and nothing is changed."""
    sql = queries.load("queue")
    if sum((bool(ids), tag is not None, everything)) != 1:
        raise SubsError("say which dead events to retry: event ids, --tag TAG, or --all")

    def work(cursor) -> int:
        if ids:
            missing = []
            for event_id in ids:
                cursor.execute(sql["dead_by_id"], (event_id,))
                if not cursor.fetchone()[0]:
                    missing.append(str(event_id))
            if missing:
                raise SubsError(f"no dead event with id {', '.join(missing)}; `subs dead` lists them")
            for event_id in ids:
                cursor.execute(sql["retry_id"], (event_id,))
            return len(ids)
        if tag is not None:
            cursor.execute(sql["retry_tag"], (check_tag(tag),))
        else:
            cursor.execute(sql["retry_all"])
        return cursor.affected_rows

    return db.run(work)


_DURATION = re.compile(r"^(\d+)([smhd])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_age(text: str) -> float:
    """``30s``, ``15m``, ``12h``, ``7d`` as seconds."""
    match = _DURATION.match(text.strip())
    if not match:
        raise SubsError(f"age {text!r} is not valid; write a number and a unit s, m, h or d, e.g. 7d")
    return int(match[1]) * _UNITS[match[2]]


def purge(db: Database, older_than: float) -> tuple[int, int]:
    """Delete dead events that died more than ``older_than`` seconds ago, and
    removed subscriptions left without events; returns both counts."""
    sql = queries.load("queue")

    def work(cursor) -> tuple[int, int]:
        cursor.execute(sql["purge_dead"], (-int(older_than * 1000),))
        events = cursor.affected_rows
        cursor.execute(sql["purge_removed_subscriptions"])
        subscriptions = cursor.affected_rows
        cursor.execute(sql["purge_orphan_leases"])
        return events, subscriptions

    return db.run(work)
