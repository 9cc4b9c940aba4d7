"""Installing and upgrading subs's own tables (``subs init``).

A database without subs gets ``sql/schema.sql``, the current schema, in one
transaction. A database of an older version is brought up one version at a
time by ``sql/migrations/vN.sql``: frozen SQL, written when version N was
new and never changed since, so an upgrade does today what it did then. The
names of a migration's blocks say how they run:

- ``refuse/...``: a query that returns a message when the upgrade must not
  start (nothing has been changed then);
- ``wait/older_transactions``: wait until every transaction older than the
  upgrade has ended (the query returns the oldest active transaction, this
  one, and whether anything can depend on them at all);
- ``before/...``: idempotent DDL later blocks depend on, each in its own
  transaction (Firebird cannot use a column in the transaction that added it);
- the other blocks: one transaction ending with ``record_version``, so the
  version recorded is always the version installed. It first reads the
  recorded version itself: two `subs init` at once must not record an older
  version over a newer one;
- ``after/...``: each in its own transaction once that one has committed.

``migrations/v1.sql`` is where the history starts; only tests build
databases of old versions with it.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from typing import TypeVar

from firebird.driver import Cursor, DatabaseError

from subscriptions.db import sql
from subscriptions.db.connection import Database
from subscriptions.db.errors import is_connection_lost
from subscriptions.db.retry import Backoff, retrying
from subscriptions.errors import SubsError

from .version import LATEST, installed_version, recorded_version

logger = logging.getLogger(__name__)
T = TypeVar("T")

# Tries of a step that failed while a concurrent `subs init` ran.
ATTEMPTS = 5
# How long an upgrade waits for transactions older than it to end.
OLDER_TRANSACTIONS_WAIT = 60.0
_REFUSE, _WAIT, _BEFORE, _AFTER = "refuse/", "wait/older_transactions", "before/", "after/"


def upgrade(db: Database, target: int = LATEST) -> tuple[int, int]:
    """Bring the schema to ``target`` (an older one only for tests of
    upgrades); returns (version before, version after)."""
    before = installed_version(db)
    if before > LATEST:
        raise SubsError(
            f"{db.settings.dsn} has subs schema version {before}, newer than this subs "
            f"understands ({LATEST}); upgrade subs"
        )
    if before == 0 and target == LATEST:
        return before, _run_in_one_transaction(db, fresh_install(), LATEST)
    version = before
    while version < target:
        # A concurrent `subs init` may be ahead of us: go on from where it is.
        version = _migrate(db, version + 1)
    return before, max(before, target)


def fresh_install() -> dict[str, str]:
    """The current schema's blocks: schema.sql's tables, then capture.sql's
    generator and DDL triggers, then the version record."""
    tables = dict(sql.load("schema"))
    record = tables.pop("record_version")
    return {**tables, **sql.load("capture"), "record_version": record}


def _migrate(db: Database, version: int) -> int:
    """Install ``version`` from its migration; returns the version installed
    now, which is higher when a concurrent `subs init` got further first."""
    blocks = sql.load(f"migrations/v{version}")
    for name, statement in blocks.items():
        if name.startswith(_REFUSE):
            _refuse_if_needed(db, version, statement)
    if _WAIT in blocks:
        _wait_for_older_transactions(db, blocks[_WAIT])
    for name, statement in blocks.items():
        if name.startswith(_BEFORE):
            _retry_while_concurrent(functools.partial(_execute_alone, db, statement))
    main = {name: statement for name, statement in blocks.items() if "/" not in name}
    installed = _run_in_one_transaction(db, main, version)
    for name, statement in blocks.items():
        if name.startswith(_AFTER):
            _retry_while_concurrent(functools.partial(_execute_alone, db, statement))
    return installed


def _run_in_one_transaction(db: Database, blocks: dict[str, str], version: int) -> int:
    """Run ``blocks`` (the last one records ``version``) in one transaction,
    unless the recorded version is already there; returns the recorded one."""

    def install(cursor: Cursor) -> int:
        recorded = recorded_version(cursor)
        if recorded >= version:
            return recorded
        for statement in blocks.values():
            cursor.execute(statement)
        return version

    def once() -> int:
        with db.transaction() as cursor:
            return install(cursor)

    return _retry_while_concurrent(once)


def _retry_while_concurrent(work: Callable[[], T]) -> T:
    """A concurrent `subs init` may be running the same step (its new objects
    clash with ours, or it committed after our transaction began): wait, then
    try again; the step then finds its work done."""
    return retrying(
        work,
        attempts=ATTEMPTS,
        retry_on=lambda exc: isinstance(exc, DatabaseError) and not is_connection_lost(exc),
        sleep=time.sleep,
        backoff=Backoff(0.1, 1.0),
    )


def _execute_alone(db: Database, statement: str) -> None:
    with db.transaction() as cursor:
        cursor.execute(statement)


def _refuse_if_needed(db: Database, version: int, query: str) -> None:
    with db.transaction() as cursor:
        if recorded_version(cursor) >= version:
            return
        cursor.execute(query)
        row = cursor.fetchone()
    if row is not None:
        raise SubsError(str(row[0]))


def _wait_for_older_transactions(db: Database, query: str) -> None:
    """Wait until every transaction that began before now has ended: it may
    have logged events through a trigger of the previous version that the
    next steps cannot see yet (uncommitted). Transactions that begin later
    use the triggers already settled."""
    with db.transaction() as cursor:
        cursor.execute(query)
        oldest, marker, relevant = cursor.fetchone()
    if not relevant:
        return
    deadline = time.monotonic() + OLDER_TRANSACTIONS_WAIT
    logged = None
    while oldest < marker:
        if time.monotonic() > deadline:
            raise SubsError(
                f"transaction {oldest} began before this upgrade and is still open after "
                f"{OLDER_TRANSACTIONS_WAIT:.0f} s; end it (or the application holding it), "
                "then run `subs init` again"
            )
        if oldest != logged:
            logger.info("waiting for transaction %d, older than the upgrade, to end", oldest)
            logged = oldest
        time.sleep(0.05)
        with db.transaction() as cursor:
            cursor.execute(query)
            oldest = cursor.fetchone()[0]
