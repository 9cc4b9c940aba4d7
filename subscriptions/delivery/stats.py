"""Recording per-minute delivery statistics for the console (EVENT_STATS).

Workers count outcomes per subscription and minute of their own clock
(Metrics.observe) and send them to the supervisor with their other deltas;
its housekeeping thread adds them to the listener's own rows every
RECORD_INTERVAL, and samples each subscription's backlog (its live events,
counted up to MAX_COUNTED) every BACKLOG_INTERVAL. A minute is written as the database server's minute: the
listener's host and the server may disagree about the time of day.
"""

from __future__ import annotations

import datetime as dt

from subscriptions.db import sql
from subscriptions.db.connection import Database, nowait_tpb

from .metrics import MAX_COUNTED

RECORD_INTERVAL = 5.0  # seconds between writes while events are handled
BACKLOG_INTERVAL = 60.0  # seconds between samples of the backlog
KEEP_MINUTES = 24 * 60  # housekeeping deletes older rows
PRUNE_INTERVAL = 3600.0

Minutes = dict[tuple[int, int], list[int]]  # (sub_id, minute since the epoch) -> [handled, failed, dead]


def record(db: Database, recorder: str, minutes: Minutes) -> None:
    """Add ``minutes`` to ``recorder``'s rows, in one transaction. NO WAIT:
    only this listener writes its rows, and a write of its own still in
    progress (the housekeeping thread's, while the listener stops) makes
    this one fail rather than wait."""
    statements = sql.load("stats")
    with db.transaction(nowait_tpb()) as cursor:
        cursor.execute(statements["server_time"])
        offset = cursor.fetchone()[0] - dt.datetime.now()
        for (sub_id, minute), (handled, failed, dead) in sorted(minutes.items()):
            # The middle of our minute, on the server's clock, decides its minute.
            middle = dt.datetime.fromtimestamp(minute * 60 + 30) + offset
            server_minute = middle.replace(second=0, microsecond=0)
            cursor.execute(statements["add"], (server_minute, sub_id, recorder, handled, failed, dead))


def record_backlog(db: Database, recorder: str, max_counted: int = MAX_COUNTED) -> None:
    """Sample every subscription's backlog (its live events, counted up to
    ``max_counted``) into this minute's rows."""
    statements = sql.load("stats")
    with db.transaction(nowait_tpb()) as cursor:
        cursor.execute(statements["server_time"])
        minute = cursor.fetchone()[0].replace(second=0, microsecond=0)
        cursor.execute(statements["record_backlog"], (minute, recorder, max_counted))


def prune(db: Database, keep_minutes: int = KEEP_MINUTES) -> None:
    with db.transaction() as cursor:
        cursor.execute(sql.load("stats")["prune"], (-keep_minutes,))
