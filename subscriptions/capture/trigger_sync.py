"""Keeping each subscribed table's generated trigger in step with its
subscriptions (EVENT_SUBSCRIBER), and making every attachment use it."""

from __future__ import annotations

import functools
import json
from typing import Any

from firebird.driver import Cursor

from subscriptions.db import sql
from subscriptions.db.connection import Database

from .metadata import Table, find_table, load_table
from .names import check_condition
from .triggers import Subscription, generate, trigger_name


def subscription_from_row(row: tuple[Any, ...]) -> Subscription:
    """An EVENT_SUBSCRIBER row as read by the ``for_table`` and ``list`` blocks."""
    sub_id, table, action, tag, columns, when, active = row[:7]
    return Subscription(sub_id, table, action, tag, tuple(json.loads(columns)) if columns else (), when, active)


def for_table(cursor: Cursor, table: str) -> list[Subscription]:
    cursor.execute(sql.load("subscribers")["for_table"], (table,))
    return [subscription_from_row(row) for row in cursor.fetchall()]


def subscribed_tables(cursor: Cursor) -> list[str]:
    cursor.execute(sql.load("subscribers")["subscribed_tables"])
    return [row[0] for row in cursor.fetchall()]


def table_trigger_name(db: Database, table: str) -> str:
    max_chars, max_bytes = (31, 31) if db.engine_version[0] < 4 else (63, 252)
    return trigger_name(table, max_chars, max_bytes)


def _trigger_exists(cursor: Cursor, name: str) -> bool:
    cursor.execute(sql.load("metadata")["trigger_exists"], (name,))
    return bool(cursor.fetchone()[0])


def sync_trigger(db: Database, cursor: Cursor, table: Table) -> None:
    """Regenerate the table's trigger from its active subscriptions, or switch
    it off when none is left (``settle_trigger`` then drops it)."""
    statements = sql.load("subscribers")
    name = table_trigger_name(db, table.name)
    active = [s for s in for_table(cursor, table.name) if s.active]
    if active:
        for subscription in active:
            if subscription.when:
                check_condition(subscription.when)
        cursor.execute(generate(table, active, name))
        cursor.execute(sql.with_identifiers(statements["grant_insert"], trigger=name))
    elif _trigger_exists(cursor, name):
        cursor.execute(sql.with_identifiers(statements["deactivate_trigger"], trigger=name))


def settle_trigger(db: Database, cursor: Cursor, table: str) -> None:
    """Make every attachment reload the table's triggers once more.

    Under SuperClassic an attachment that reloads a table's triggers while the
    DDL transaction is still committing can keep the old ones indefinitely
    (seen in about 1 of 3 tries with a writer inserting during `subs add`).
    One more metadata change, made after the first has committed, reaches it
    again; so when `subs add/remove` returns, every writer uses the new trigger.
    """
    statements = sql.load("subscribers")
    name = table_trigger_name(db, table)
    if not _trigger_exists(cursor, name):
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
            sync_trigger(db, cursor, load_table(cursor, sql.quote(name)))
        return tables

    tables = db.run(regenerate)
    for name in tables:
        db.run(functools.partial(settle_trigger, db, table=name))
    return tables
