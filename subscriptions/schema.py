"""Installing and upgrading subs's own tables (``subs init``).

Each schema version is one ``sql/schema_vN.sql`` file. Its ``separate``
blocks (idempotent DDL that later blocks depend on) run first, each in its own
transaction; the other blocks then run in a single transaction ending with
``EVENT_SCHEMA_VERSION()`` returning N, so the version recorded is always the
version actually installed. That transaction first reads the recorded version
itself: two `subs init` at once must not record an older version over a newer
one.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass

from firebird.driver import Cursor, DatabaseError

from . import queries, subscribers
from .db import Database, read_text
from .errors import SubsError
from .triggers import MAX_KEY_CHARS

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Migration:
    file: str
    separate: tuple[str, ...] = ()
    # The trigger text changed: regenerate every table's trigger with the
    # version, logging keys into this EVENT_LOG column (PK_KEY until version
    # 6 moved them to ROW_KEY), then make every attachment reload it
    # (subscribers.settle_all_triggers).
    regenerate_triggers: str | None = None
    # Refuses the upgrade (SubsError) before anything is changed.
    check: Callable[[Cursor], None] | None = None
    # Wait until every transaction older than the upgrade has ended.
    after_older_transactions: bool = False


def _keys_fit(cursor: Cursor) -> None:
    """Version 6 narrows the key column: refuse while longer keys are logged or can be."""
    cursor.execute(queries.load("schema")["long_keys_logged"], (MAX_KEY_CHARS,))
    (count,) = cursor.fetchone()
    if count:
        raise SubsError(
            f"{count} event(s) in EVENT_LOG have a key longer than {MAX_KEY_CHARS} characters, "
            "more than this version of subs logs; let the listener handle them (`subs purge` "
            "removes dead ones), then run `subs init` again"
        )
    subscribers.check_keys_fit(cursor)


MIGRATIONS = (
    Migration("schema_v1"),
    Migration("schema_v2", separate=("add_key_hash", "index_key_hash"), regenerate_triggers="PK_KEY"),
    Migration("schema_v3", separate=("add_dead",)),
    Migration("schema_v4"),
    Migration("schema_v5", separate=("add_error_text",)),
    Migration("schema_v6", regenerate_triggers="ROW_KEY", check=_keys_fit),
    Migration("schema_v7", after_older_transactions=True),
)
LATEST = len(MIGRATIONS)
# Tries of a migration step that failed while a concurrent `subs init` ran.
ATTEMPTS = 5
# How long an upgrade waits for transactions older than it to end.
OLDER_TRANSACTIONS_WAIT = 60.0


def installed_version(db: Database) -> int:
    """0 for a database without subs; refuses tables of the same name that are not ours."""
    sql = queries.load("schema")
    with db.transaction() as cursor:
        cursor.execute(sql["version_function_exists"])
        if cursor.fetchone()[0]:
            cursor.execute(sql["version"])
            return int(cursor.fetchone()[0])
        cursor.execute(sql["existing_tables"])
        clashes = sorted(row[0] for row in cursor.fetchall())
    if clashes:
        raise SubsError(
            f"{db.settings.dsn} already has table(s) {', '.join(clashes)} that subs did not "
            "create; rename them or use another database"
        )
    return 0


def upgrade(db: Database, target: int = LATEST) -> tuple[int, int]:
    """Bring the schema to ``target`` (older targets: tests of upgrades);
    returns (version before, version after)."""
    before = installed_version(db)
    if before > LATEST:
        raise SubsError(
            f"{db.settings.dsn} has subs schema version {before}, newer than this subs "
            f"understands ({LATEST}); upgrade subs"
        )
    version = before
    while version < target:
        # A concurrent `subs init` may be ahead of us: go on from where it is.
        version = _migrate(db, version + 1, MIGRATIONS[version])
    return before, max(before, target)


def _migrate(db: Database, version: int, migration: Migration) -> int:
    """Install ``version``; returns the version installed now, which is
    higher when a concurrent `subs init` got further first."""
    blocks = queries.load(migration.file)
    if migration.check is not None:
        with db.transaction() as cursor:
            if _recorded_version(cursor) < version:
                migration.check(cursor)
    if migration.after_older_transactions:
        _wait_for_older_transactions(db)
    for name in migration.separate:
        _run_guarded(db, blocks[name])

    def in_one_transaction(cursor: Cursor) -> int:
        recorded = _recorded_version(cursor)
        if recorded >= version:
            return recorded
        for name, statement in blocks.items():
            if name not in migration.separate and name != "record_version":
                cursor.execute(statement)
        if migration.regenerate_triggers:
            subscribers.regenerate_triggers(db, cursor, migration.regenerate_triggers)
        cursor.execute(blocks["record_version"])
        return version

    for attempt in range(1, ATTEMPTS + 1):
        try:
            with db.transaction() as cursor:
                installed = in_one_transaction(cursor)
            if migration.regenerate_triggers:
                subscribers.settle_all_triggers(db)
            return installed
        except DatabaseError:
            # A concurrent `subs init` may be installing this version too (its
            # new objects clash with ours, or it committed after our
            # transaction began): wait, then see again.
            if attempt == ATTEMPTS:
                raise
            time.sleep(0.1 * attempt)
    raise AssertionError("unreachable")


_RECORDED = re.compile(r"RETURN\s+(\d+)")


def _recorded_version(cursor: Cursor) -> int:
    """The version EVENT_SCHEMA_VERSION() returns, read from its source as the
    transaction's snapshot sees it (0 if it does not exist)."""
    cursor.execute(queries.load("schema")["version_source"])
    row = cursor.fetchone()
    match = _RECORDED.search(read_text(row[0]) or "") if row else None
    return int(match.group(1)) if match else 0


def _wait_for_older_transactions(db: Database) -> None:
    """Wait until every transaction that began before now has ended.

    Such a transaction may have logged events through a trigger of the
    previous version that the next steps cannot see yet (uncommitted).
    Transactions that begin later use the triggers already settled. Without
    an active subscription no trigger logged anything: nothing to wait for."""
    sql = queries.load("schema")
    with db.transaction() as cursor:
        cursor.execute(sql["active_subscriptions"])
        if not cursor.fetchone()[0]:
            return
        cursor.execute(sql["oldest_active_transaction"])
        oldest, marker = cursor.fetchone()
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
            cursor.execute(sql["oldest_active_transaction"])
            oldest, _ = cursor.fetchone()


def _run_guarded(db: Database, statement: str) -> None:
    """Run a block that checks whether its DDL is still needed. When a
    concurrent `subs init` committed the same DDL first, ours fails; run
    again, the check then finds it done."""
    for attempt in range(1, ATTEMPTS + 1):
        try:
            with db.transaction() as cursor:
                cursor.execute(statement)
            return
        except DatabaseError:
            if attempt == ATTEMPTS:
                raise
            time.sleep(0.1 * attempt)


def require_current(db: Database) -> None:
    """Refuse to work on a database whose schema is missing or out of date."""
    version = installed_version(db)
    if version == 0:
        raise SubsError(f"{db.settings.dsn} has no subs schema; run `subs init` first")
    if version != LATEST:
        raise SubsError(
            f"{db.settings.dsn} has subs schema version {version}, this subs needs {LATEST}; "
            + ("run `subs init` to upgrade it" if version < LATEST else "upgrade subs")
        )
