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

import re
import time
from dataclasses import dataclass

from firebird.driver import Cursor, DatabaseError

from . import queries, subscribers
from .db import Database, read_text
from .errors import SubsError


@dataclass(frozen=True)
class Migration:
    file: str
    separate: tuple[str, ...] = ()
    # The trigger text changed: regenerate every table's trigger with the version.
    regenerate_triggers: bool = False


MIGRATIONS = (
    Migration("schema_v1"),
    Migration("schema_v2", separate=("add_key_hash", "index_key_hash"), regenerate_triggers=True),
    Migration("schema_v3", separate=("add_dead",)),
    Migration("schema_v4"),
    Migration("schema_v5", separate=("add_error_text",)),
)
LATEST = len(MIGRATIONS)
# Tries of a migration step that failed while a concurrent `subs init` ran.
ATTEMPTS = 5


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
    if before and any(m.regenerate_triggers for m in MIGRATIONS[before:target]):
        subscribers.settle_all_triggers(db)
    return before, max(before, target)


def _migrate(db: Database, version: int, migration: Migration) -> int:
    """Install ``version``; returns the version installed now, which is
    higher when a concurrent `subs init` got further first."""
    blocks = queries.load(migration.file)
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
            subscribers.regenerate_triggers(db, cursor)
        cursor.execute(blocks["record_version"])
        return version

    for attempt in range(1, ATTEMPTS + 1):
        try:
            with db.transaction() as cursor:
                return in_one_transaction(cursor)
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
