"""Keeping each subscribed table's generated trigger in step with its
subscriptions (EVENT_SUBSCRIBER), and making every attachment use it."""

from __future__ import annotations

import functools
import json
from typing import Any

from firebird.driver import Cursor

from subscriptions.db import sql
from subscriptions.db.connection import Database
from subscriptions.errors import SubsError

from .metadata import Table, find_table, load_table
from .triggers import Subscription

# EVENT_LOG.PK_ROW's width: the generator refuses a longer captured key.
MAX_KEY_BYTES = 1000


def subscription_from_row(row: tuple[Any, ...]) -> Subscription:
    """An EVENT_SUBSCRIBER row as read by the ``for_table`` and ``list`` blocks
    (PAUSED last in both)."""
    sub_id, table, action, tag, columns, when, active = row[:7]
    watched = tuple(json.loads(columns)) if columns else ()
    return Subscription(sub_id, table, action, tag, watched, when, active, bool(row[-1]))


def for_table(cursor: Cursor, table: str) -> list[Subscription]:
    cursor.execute(sql.load("subscribers")["for_table"], (table,))
    return [subscription_from_row(row) for row in cursor.fetchall()]


def subscribed_tables(cursor: Cursor) -> list[str]:
    cursor.execute(sql.load("subscribers")["subscribed_tables"])
    return [row[0] for row in cursor.fetchall()]


def capture_trigger(cursor: Cursor, table: str) -> str | None:
    """The name of the table's capture trigger, if it has one."""
    cursor.execute(sql.load("metadata")["capture_trigger"], (table,))
    row = cursor.fetchone()
    return None if row is None else str(row[0])


def sync_trigger(cursor: Cursor, table: Table) -> None:
    """Regenerate the table's trigger from its active subscriptions with the
    database's generator, or leave an empty inactive one when none is left
    (``settle_trigger`` then drops it)."""
    cursor.execute(sql.load("subscribers")["sync_trigger"], (table.name,))
    _, reason = cursor.fetchone()
    if reason == "key too long":
        raise SubsError(
            f"the primary key of {table.name} is too long to capture (more than {MAX_KEY_BYTES} bytes "
            "of captured key); subscribe to a table with a shorter key"
        )


def settle_trigger(cursor: Cursor, table: str) -> None:
    """Make every attachment reload the table's triggers once more.

    Under SuperClassic an attachment that reloads a table's triggers while the
    DDL transaction is still committing can keep the old ones indefinitely
    (seen in about 1 of 3 tries with a writer inserting during `subs add`).
    One more metadata change, made after the first has committed, reaches it
    again; so when `subs add/remove` returns, every writer uses the new trigger.
    """
    statements = sql.load("subscribers")
    name = capture_trigger(cursor, table)
    if name is None:
        return
    block = "touch_trigger" if any(s.active for s in for_table(cursor, table)) else "drop_trigger"
    cursor.execute(sql.with_identifiers(statements[block], trigger=name))


def refresh_all(db: Database) -> list[str]:
    """Regenerate and settle the trigger of every subscribed table that
    exists, with this version's generator (after a schema upgrade); returns
    the tables."""

    def regenerate(cursor: Cursor) -> list[str]:
        tables = [name for name in subscribed_tables(cursor) if find_table(cursor, sql.quote(name)) is not None]
        for name in tables:
            sync_trigger(cursor, load_table(cursor, sql.quote(name)))
        return tables

    tables = db.run(regenerate)
    for name in tables:
        db.run(functools.partial(settle_trigger, table=name))
    return tables
