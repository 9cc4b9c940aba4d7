"""Repairing the event log: re-queueing dead events, purging old ones."""

from __future__ import annotations

import re
from collections.abc import Sequence

from firebird.driver import Cursor

from subscriptions.capture.names import check_tag
from subscriptions.capture.subscribers import wake
from subscriptions.db import sql
from subscriptions.db.connection import Database
from subscriptions.errors import SubsError


def retry(db: Database, *, ids: Sequence[int] = (), tag: str | None = None, everything: bool = False) -> int:
    """Re-queue dead events (attempts start again from 1) and wake their
    listeners; unknown ids are an error and nothing is changed."""
    statements = sql.load("repair")
    chosen = sum((bool(ids), tag is not None, everything))
    if chosen == 0:
        raise SubsError("say which dead events to retry: event ids, --tag TAG, or --all")
    if chosen > 1:
        raise SubsError("give one of event ids, --tag TAG or --all, not several")

    def work(cursor: Cursor) -> int:
        if ids:
            missing = []
            for event_id in ids:
                cursor.execute(statements["dead_by_id"], (event_id,))
                if not cursor.fetchone()[0]:
                    missing.append(str(event_id))
            if missing:
                raise SubsError(f"no dead event with id {', '.join(missing)}; `subs dead` lists them")
            for event_id in ids:
                cursor.execute(statements["retry_id"], (event_id,))
            count = len(ids)
        else:
            cursor.execute(statements["retry_dead"], (None if tag is None else check_tag(tag),))
            (count,) = cursor.fetchone()
        cursor.execute(statements["tags"])
        tags = cursor.fetchall()
        if tag is not None and tag not in {subscribed for subscribed, _ in tags}:  # a misspelt one, say
            raise SubsError(f"no subscription has tag {tag!r}; `subs list` shows the subscriptions")
        for subscribed, active in tags if count else []:
            if active and tag in (None, subscribed):
                wake(cursor, subscribed, requeued=True)
        return count

    return db.run(work)


_DURATION = re.compile(r"^(\d+)([smhd])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
# A longer age purges nothing more (and 2,000 years back is before any timestamp).
MAX_AGE_DAYS = 36500


def parse_age(text: str) -> float:
    """``30s``, ``15m``, ``12h``, ``7d`` as seconds."""
    match = _DURATION.match(text.strip())
    if not match:
        raise SubsError(f"age {text!r} is not valid; write a number and a unit s, m, h or d, e.g. 7d")
    seconds = int(match[1]) * _UNITS[match[2]]
    if seconds > MAX_AGE_DAYS * _UNITS["d"]:
        raise SubsError(f"age {text!r} is more than {MAX_AGE_DAYS}d (100 years); give a shorter one")
    return seconds


def purge(db: Database, older_than: float) -> tuple[int, int]:
    """Delete dead events that died more than ``older_than`` seconds ago, and
    removed subscriptions left without events; returns both counts."""
    statements = sql.load("repair")

    def work(cursor: Cursor) -> tuple[int, int]:
        cursor.execute(statements["purge_dead"], (int(older_than * 1000),))
        (events,) = cursor.fetchone()
        cursor.execute(statements["purge_removed_subscriptions"])
        subscriptions = cursor.affected_rows
        cursor.execute(statements["purge_orphan_leases"])
        cursor.execute(statements["purge_orphan_spans"])
        return events, subscriptions

    return db.run(work)
