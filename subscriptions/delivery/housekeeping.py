"""Rebuilding the claim index, which deleting events in order leaves full of
empty pages (sql/housekeeping.sql): after 1,000,000 handled events a claim
took 3x as long as on a fresh log.

The rebuild is one transaction (deactivate, activate, commit), so the index
is never left inactive. It needs the table to itself for a moment: it is tried
with NO WAIT and given up while any other transaction has written to
EVENT_LOG (an application's transaction whose trigger logged an event, a
claim), and skipped while the log is long, since writers wait for it.
"""

from __future__ import annotations

import logging

from firebird.driver import DatabaseError

from subscriptions.db import sql
from subscriptions.db.connection import Database, nowait_tpb
from subscriptions.db.errors import CONFLICT_CODES, OBJECT_IN_USE, codes

log = logging.getLogger("subs.housekeeping")

REBUILD_EVERY = 50_000  # events handled between rebuilds
MAX_LIVE_EVENTS = 10_000  # a longer log is not rebuilt: writers would wait for it


def rebuild_queue_index(db: Database, max_live: int = MAX_LIVE_EVENTS) -> bool:
    """Rebuild IX_EVENT_LOG_QUEUE if that can be done now; True if it was."""
    statements = sql.load("housekeeping")
    if db.fetch_value(statements["live_events"], max_live + 1) > max_live:
        log.debug("claim index not rebuilt: more than %s live events", max_live)
        return False
    try:
        with db.transaction(nowait_tpb()) as cursor:
            cursor.execute(statements["deactivate_queue_index"])
            cursor.execute(statements["activate_queue_index"])
    except DatabaseError as exc:
        if OBJECT_IN_USE in codes(exc) or CONFLICT_CODES & codes(exc):
            log.debug("claim index not rebuilt: EVENT_LOG is in use")
            return False
        raise
    log.info("rebuilt the claim index IX_EVENT_LOG_QUEUE")
    return True
