"""Rights for a listener that runs as its own database user (`subs grant`)."""

from __future__ import annotations

import re

from firebird.driver import Cursor

from subscriptions.db import sql
from subscriptions.db.connection import Database
from subscriptions.errors import SubsError

_UNQUOTED = re.compile(r"[A-Za-z][A-Za-z0-9_$]*")
_QUOTED = re.compile(r'"((?:[^"]|"")+)"')
MAX_USER_CHARS = 63


def user_name(typed: str) -> str:
    """The user name as Firebird stores it: ``listener`` is LISTENER, a name
    in double quotes is exact."""
    text = typed.strip()
    if _UNQUOTED.fullmatch(text):
        name = text.upper()
    elif quoted := _QUOTED.fullmatch(text):
        name = quoted.group(1).replace('""', '"')
    else:
        raise SubsError(
            f"{typed!r} is not a user name: use letters, digits, _ and $ starting with a letter, "
            'or put the exact name in double quotes ("app user")'
        )
    if len(name) > MAX_USER_CHARS or any(ord(c) < 32 for c in name):
        raise SubsError(f"{typed!r} is not a user name: at most {MAX_USER_CHARS} printable characters")
    return name


def grant_listener(db: Database, typed: str) -> str:
    """Grant ``typed`` what `subs listen` needs; returns the user's name."""
    name = user_name(typed)
    db.run(lambda cursor: _grant(cursor, name))
    return name


def regrant_listeners(db: Database) -> list[str]:
    """Grant this version's rights again to every user an earlier `subs
    grant` made a listener (after an upgrade): a version that adds a table
    (EVENT_STATS, EVENT_CAPTURE_RIGHT) would otherwise leave them without
    it. Returns their names."""

    def regrant(cursor: Cursor) -> list[str]:
        cursor.execute(sql.load("metadata")["granted_listeners"])
        names = [str(row[0]) for row in cursor.fetchall()]
        for name in names:
            _grant(cursor, name)
        return names

    return db.run(regrant)


def _grant(cursor: Cursor, name: str) -> None:
    for statement in sql.load("grants").values():
        cursor.execute(sql.with_identifiers(statement, user=name))
