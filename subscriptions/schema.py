"""Installing and upgrading subs's own tables (``subs init``).

Each schema version is one ``sql/schema_vN.sql`` file whose blocks run in a
single transaction, ending with ``EVENT_SCHEMA_VERSION()`` returning N; so the
version recorded is always the version actually installed.
"""

from __future__ import annotations

from firebird.driver import DatabaseError

from . import queries
from .db import Database
from .errors import SubsError

MIGRATIONS = ("schema_v1",)
LATEST = len(MIGRATIONS)


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


def upgrade(db: Database) -> tuple[int, int]:
    """Bring the schema to ``LATEST``; returns (version before, version after)."""
    before = installed_version(db)
    if before > LATEST:
        raise SubsError(
            f"{db.settings.dsn} has subs schema version {before}, newer than this subs "
            f"understands ({LATEST}); upgrade subs"
        )
    for version in range(before + 1, LATEST + 1):
        try:
            with db.transaction() as cursor:
                for statement in queries.load(MIGRATIONS[version - 1]).values():
                    cursor.execute(statement)
        except DatabaseError:
            # A concurrent `subs init` may have installed this version first.
            if installed_version(db) < version:
                raise
    return before, LATEST


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
