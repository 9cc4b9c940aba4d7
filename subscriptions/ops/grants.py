"""Rights for a listener that runs as its own database user, or takes them
from a role it connects with (`subs grant`)."""

from __future__ import annotations

from firebird.driver import Cursor

from subscriptions.db import sql
from subscriptions.db.connection import Database
from subscriptions.db.settings import stored_name
from subscriptions.errors import SubsError

# RDB$USER_PRIVILEGES.RDB$USER_TYPE of a grantee.
_KIND_OF_TYPE = {8: "USER", 13: "ROLE"}


def grant_listener(db: Database, typed: str, *, to_role: bool = False) -> str:
    """Grant the user (or the role) ``typed`` what `subs listen` needs;
    returns its name."""
    kind = "ROLE" if to_role else "USER"
    name = stored_name(typed, kind.lower())

    def grant(cursor: Cursor) -> None:
        if to_role:
            cursor.execute(sql.load("metadata")["role_exists"], (name,))
            if not cursor.fetchone()[0]:
                raise SubsError(
                    f"there is no role {name} in this database: create it first (CREATE ROLE), then grant it to "
                    "the users the listener connects as"
                )
        _grant(cursor, kind, name)

    db.run(grant)
    return name


def regrant_listeners(db: Database) -> list[str]:
    """Grant this version's rights again to every user and role an earlier
    `subs grant` made a listener (after an upgrade): a version that adds a
    table (EVENT_STATS, EVENT_CAPTURE_RIGHT) would otherwise leave them
    without it. Returns their names, roles as ``role NAME``."""

    def regrant(cursor: Cursor) -> list[str]:
        cursor.execute(sql.load("metadata")["granted_listeners"])
        grantees = [(_KIND_OF_TYPE[int(kind)], str(name)) for name, kind in cursor.fetchall()]
        for kind, name in grantees:
            _grant(cursor, kind, name)
        return [name if kind == "USER" else f"role {name}" for kind, name in grantees]

    return db.run(regrant)


def _grant(cursor: Cursor, kind: str, name: str) -> None:
    cursor.execute(sql.load("floors")["id_generator"])
    (generator,) = cursor.fetchone()
    for statement in sql.load("grants").values():
        cursor.execute(sql.with_identifiers(sql.with_grantee(statement, kind, name), generator=generator))
