"""Rebuilding the claim index, which deleting events in order leaves full of
empty pages (sql/housekeeping.sql): after 1,000,000 handled events a claim
took 3x as long as on a fresh log.

The rebuild is one transaction (deactivate, activate, commit), so the index
is never left inactive, and it holds EVENT_LOG for protected write from its
start: the engine builds the new index at the commit, and a commit it
refuses because another transaction writes the table leaves the index
active in the catalogue but gone, and every claim reading the whole log. So
a rebuild is given up, without touching the index, while any other
transaction has written to EVENT_LOG (an application's transaction whose
trigger logged an event, a claim), and skipped while the log is long, since
writers wait for it (the capture trigger of a NO WAIT transaction writes
again, for up to 2 s: sql/capture.sql). An index found gone
(``queue_index_usable``; left so by a refused rebuild of an earlier subs) is
rebuilt whatever the log's length, waiting up to REPAIR_WAIT seconds for the
writers.
"""

from __future__ import annotations

import logging

from firebird.driver import DatabaseError

from subscriptions.db import sql
from subscriptions.db.connection import Database, protected_write_tpb, read_only_tpb
from subscriptions.db.errors import CONFLICT_CODES, OBJECT_IN_USE, QUEUE_INDEX, codes, index_was_rebuilt

log = logging.getLogger("subs.housekeeping")

REBUILD_EVERY = 50_000  # events handled between rebuilds
MAX_LIVE_EVENTS = 10_000  # a longer log is not rebuilt: writers would wait for it
REPAIR_WAIT = 5  # seconds a repair of a lost index waits for EVENT_LOG's writers


def queue_index_usable(db: Database) -> bool:
    """Whether the engine can use the claim index: false when it is gone
    from the table (see above). A probe that fails to prepare because
    another listener is rebuilding the index at this moment (Firebird 3:
    "there is no index") counts as usable: that rebuild builds it."""
    statements = sql.load("housekeeping")
    try:
        with db.transaction(read_only_tpb()) as cursor:
            statement = cursor.prepare(statements["queue_index_probe"])
            try:
                return QUEUE_INDEX in statement.plan
            finally:
                statement.free()
    except DatabaseError as exc:
        if index_was_rebuilt(exc):
            return True
        raise


def rebuild_queue_index(db: Database, max_live: int = MAX_LIVE_EVENTS) -> bool:
    """Rebuild IX_EVENT_LOG_QUEUE if that can be done now; True if it was."""
    statements = sql.load("housekeeping")
    lost = not queue_index_usable(db)
    if not lost and db.fetch_value(statements["live_events"], max_live + 1) > max_live:
        log.debug("claim index not rebuilt: more than %s live events", max_live)
        return False
    try:
        with db.transaction(protected_write_tpb("EVENT_LOG", REPAIR_WAIT if lost else 0)) as cursor:
            cursor.execute(statements["deactivate_queue_index"])
            cursor.execute(statements["activate_queue_index"])
    except DatabaseError as exc:
        if not ({OBJECT_IN_USE} | CONFLICT_CODES) & codes(exc):
            raise
        if lost:
            log.warning(
                "the claim index %s is unusable and EVENT_LOG is in use: claims read the whole log "
                "until housekeeping can rebuild it",
                QUEUE_INDEX,
            )
        else:
            log.debug("claim index not rebuilt: EVENT_LOG is in use")
        return False
    if lost:
        log.warning("the claim index %s was unusable (claims read the whole log); rebuilt it", QUEUE_INDEX)
    else:
        log.info("rebuilt the claim index %s", QUEUE_INDEX)
    return True
