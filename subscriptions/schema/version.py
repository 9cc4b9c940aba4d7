"""Which schema version a database has, and refusing to work on an old one."""

from __future__ import annotations

import re

from firebird.driver import Cursor, DatabaseError

from subscriptions.db import sql
from subscriptions.db.connection import Database, read_text
from subscriptions.db.errors import NO_PRIVILEGE, codes, first_line
from subscriptions.errors import SubsError

LATEST = 26
CHECK_EVERY = 5.0  # seconds between a running listener's or console's looks at the recorded version
_RECORDED = re.compile(r"RETURN\s+(\d+)")


def installed_version(db: Database) -> int:
    """0 for a database without subs; refuses tables of the same name that are
    not ours, and a database of SQL dialect 1."""
    statements = sql.load("schema_version")
    with db.transaction() as cursor:
        cursor.execute(statements["version_function_exists"])
        if cursor.fetchone()[0]:
            try:
                cursor.execute(statements["version"])
            except DatabaseError as exc:
                if NO_PRIVILEGE in codes(exc):
                    raise _no_rights(db, exc) from None
                raise
            return int(cursor.fetchone()[0])
        cursor.execute(statements["existing_tables"])
        clashes = sorted(row[0] for row in cursor.fetchall())
    if clashes:
        raise SubsError(
            f"{db.settings.dsn} already has table(s) {', '.join(clashes)} that subs did not "
            "create; rename them or use another database"
        )
    dialect = db.connection.info.sql_dialect
    if dialect != 3:
        # Dialect 1 has no BIGINT and reads "quoted names" as strings.
        raise SubsError(
            f"{db.settings.dsn} is a SQL dialect {dialect} database and subs needs dialect 3; "
            "migrate the database to dialect 3 (gfix -sql_dialect 3, once the application is ready for it)"
        )
    return 0


def _no_rights(db: Database, exc: DatabaseError) -> SubsError:
    """Every user of subs's tables may run EVENT_SCHEMA_VERSION, so one who
    may not was given no rights at all: say how to give them."""
    user = db.settings.effective_user
    return SubsError(
        f"user {user!r} has no rights on subs's tables in {db.settings.dsn} ({first_line(exc)}); "
        f"as their owner, give it a listener's rights with `subs grant {user}`, "
        "or give them to a role it connects with (`subs grant --to-role ROLE`, then --role ROLE)"
    )


def recorded_version(cursor: Cursor) -> int:
    """The version EVENT_SCHEMA_VERSION() returns, read from its source as the
    transaction's snapshot sees it (0 if it does not exist): calling it would
    run the body this attachment compiled, which a concurrent `subs init` may
    have replaced since."""
    cursor.execute(sql.load("schema_version")["version_source"])
    row = cursor.fetchone()
    match = _RECORDED.search(read_text(row[0]) or "") if row else None
    return int(match.group(1)) if match else 0


def changed_since_start(db: Database, process: str) -> str | None:
    """Why a running ``process`` (listener, console) must stop, if the schema
    is no longer the one this subs runs: `subs init` of another release
    changed it meanwhile, and a listener left running would fail (and in the
    end kill) the events captured the new way. None while it is unchanged."""
    with db.transaction() as cursor:
        version = recorded_version(cursor)
    if version == LATEST:
        return None
    return f"{db.settings.dsn} now has subs schema version {version} and this {process} runs {LATEST}; " + (
        f"start the {process} of the subs release that upgraded it"
        if version > LATEST
        else f"run `subs init` of this release and start the {process} again"
    )


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
