"""Adding, removing and listing subscriptions, and keeping each table's
generated trigger in step with them.

Every change runs in one SNAPSHOT transaction together with the trigger DDL:
a bad ``--when`` or any other error leaves the database as it was, and two
concurrent changes to one table conflict on the trigger and are retried from
a fresh snapshot instead of overwriting each other's trigger. A second short
transaction then settles the trigger (see ``_settle_trigger``).
"""

from __future__ import annotations

import datetime as dt
import json
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from firebird.driver import Cursor, DatabaseError

from . import queries
from .capture import is_captured, key_capacity
from .db import Database, first_line, is_conflict
from .errors import SubsError
from .identifiers import (
    ACTION_NAMES,
    check_condition,
    check_tag,
    lookup_names,
    parse_actions,
    quote,
    split_names,
)
from .metadata import Table, find_table, load_table
from .triggers import KEY_COLUMN, MAX_KEY_CHARS, TRIGGER_POSITION, Subscription, generate, probe, trigger_name

PROBE_SAVEPOINT = "SUBS_WHEN_PROBE"
_COLUMN_UNKNOWN = 335544578  # engine status code (isc_dsql_field_err)
_MISSING_ROW = {"I": "; an insert has no OLD row", "U": "", "D": "; a delete has no NEW row"}


@dataclass(frozen=True)
class Change:
    """What one command did to one (table, action, tag)."""

    outcome: str  # added | updated | unchanged | removed | deactivated
    subscription: Subscription
    events: int = 0


@dataclass(frozen=True)
class Listing:
    subscription: Subscription
    created_at: dt.datetime
    pending: int
    dead: int

    def as_dict(self) -> dict[str, object]:
        s = self.subscription
        return {
            "id": s.sub_id,
            "table": s.table,
            "action": s.action,
            "tag": s.tag,
            "columns": list(s.columns),
            "when": s.when,
            "active": s.active,
            "created_at": self.created_at.isoformat(),
            "pending": self.pending,
            "dead": self.dead,
        }


def _subscription(row: tuple) -> Subscription:
    sub_id, table, action, tag, columns, when, active = row[:7]
    return Subscription(
        sub_id, table, action, tag, tuple(json.loads(columns)) if columns else (), when, active
    )


def _for_table(cursor: Cursor, table: str) -> list[Subscription]:
    cursor.execute(queries.load("subscribers")["for_table"], (table,))
    return [_subscription(row) for row in cursor.fetchall()]


def _trigger_name(db: Database, table: str) -> str:
    max_chars, max_bytes = (31, 31) if db.engine_version[0] < 4 else (63, 252)
    return trigger_name(table, max_chars, max_bytes)


def _trigger_exists(cursor: Cursor, name: str) -> bool:
    cursor.execute(queries.load("metadata")["trigger_exists"], (name,))
    return bool(cursor.fetchone()[0])


def _sync_trigger(db: Database, cursor: Cursor, table: Table, key_column: str = KEY_COLUMN) -> None:
    """Regenerate the table's trigger from its active subscriptions, or switch
    it off when none is left (``_settle_trigger`` drops it)."""
    sql = queries.load("subscribers")
    name = quote(_trigger_name(db, table.name))
    active = [s for s in _for_table(cursor, table.name) if s.active]
    if active:
        for subscription in active:
            if subscription.when:
                check_condition(subscription.when)
        cursor.execute(generate(table, active, _trigger_name(db, table.name), key_column))
        cursor.execute(sql["grant_insert"].format(trigger=name))
    elif _trigger_exists(cursor, _trigger_name(db, table.name)):
        cursor.execute(sql["deactivate_trigger"].format(trigger=name))


def _settle_trigger(db: Database, cursor: Cursor, table: str) -> None:
    """Make every attachment reload the table's triggers once more.

    Under SuperClassic an attachment that reloads a table's triggers while the
    DDL transaction is still committing can keep the old ones indefinitely
    (seen in about 1 of 3 tries with a writer inserting during `subs add`).
    One more metadata change, made after the first has committed, reaches it
    again; so when `subs add/remove` returns, every writer uses the new trigger.
    """
    sql = queries.load("subscribers")
    name = _trigger_name(db, table)
    if not _trigger_exists(cursor, name):
        return
    if any(s.active for s in _for_table(cursor, table)):
        statement = sql["touch_trigger"].format(trigger=quote(name), position=TRIGGER_POSITION)
    else:
        statement = sql["drop_trigger"].format(trigger=quote(name))
    cursor.execute(statement)


def regenerate_triggers(db: Database, cursor: Cursor, key_column: str) -> None:
    """Rewrite the trigger of every subscribed table (a schema upgrade changed
    what triggers write); runs in the upgrade's transaction."""
    for name in _subscribed_tables(cursor):
        if find_table(cursor, quote(name)) is not None:
            _sync_trigger(db, cursor, load_table(cursor, quote(name)), key_column)


def check_keys_fit(cursor: Cursor) -> None:
    """Refuse a schema upgrade that would leave a subscribed table whose keys
    can be longer than EVENT_LOG.ROW_KEY holds (its writers' inserts would fail)."""
    for name in _subscribed_tables(cursor):
        if not any(s.active for s in _for_table(cursor, name)) or find_table(cursor, quote(name)) is None:
            continue
        table = load_table(cursor, quote(name))
        if _key_too_long(table):
            raise SubsError(
                f"the primary key of {table.name} can be longer than {MAX_KEY_CHARS} characters, "
                "more than this version of subs logs; `subs remove` its subscriptions, "
                "then run `subs init` again"
            )


def settle_all_triggers(db: Database) -> None:
    with db.transaction() as cursor:
        names = _subscribed_tables(cursor)
    for name in names:
        db.run(lambda cursor, table=name: _settle_trigger(db, cursor, table))


def _subscribed_tables(cursor: Cursor) -> list[str]:
    cursor.execute(queries.load("subscribers")["subscribed_tables"])
    return [row[0] for row in cursor.fetchall()]


def _apply(db: Database, work: Callable[[Cursor], tuple[list[Change], str | None]]) -> list[Change]:
    """Run a subscription change, then settle the trigger of the table it touched."""
    changes, table = db.run(work)
    if table is not None:
        db.run(lambda cursor: _settle_trigger(db, cursor, table))
    return changes


def add(
    db: Database,
    table_typed: str,
    actions_typed: str,
    tag: str,
    columns_typed: str | None = None,
    when: str | None = None,
) -> list[Change]:
    """Subscribe ``tag`` to ``actions`` on a table; idempotent per (table, action, tag)."""
    actions = parse_actions(actions_typed)
    check_tag(tag)
    condition = check_condition(when) if when is not None else None
    if columns_typed is not None and "U" not in actions:
        raise SubsError("--columns only filters updates; include U in ACTIONS or drop --columns")
    sql = queries.load("subscribers")

    def work(cursor: Cursor) -> tuple[list[Change], str | None]:
        table = load_table(cursor, table_typed)
        _check_key(table)
        columns = (
            tuple(dict.fromkeys(table.resolve_column(c) for c in split_names(columns_typed)))
            if columns_typed is not None
            else ()
        )
        existing = {(s.action, s.tag): s for s in _for_table(cursor, table.name)}
        changes = []
        for action in actions:
            wanted = columns if action == "U" else ()
            encoded = json.dumps(list(wanted)) if wanted else None
            current = existing.get((action, tag))
            if current is None:
                cursor.execute(sql["insert"], (table.name, action, tag, encoded, condition))
                sub_id = cursor.fetchone()[0]
                outcome = "added"
            elif current.active and current.columns == wanted and current.when == condition:
                changes.append(Change("unchanged", current))
                continue
            else:
                cursor.execute(sql["update"], (encoded, condition, current.sub_id))
                sub_id = current.sub_id
                outcome = "updated"
            changes.append(
                Change(outcome, Subscription(sub_id, table.name, action, tag, wanted, condition))
            )
        if all(change.outcome == "unchanged" for change in changes):
            return changes, None
        _check_when(cursor, table, [c.subscription for c in changes if c.outcome != "unchanged"])
        _sync_trigger(db, cursor, table)
        return changes, table.name

    return _apply(db, work)


def _check_when(cursor: Cursor, table: Table, subscriptions: list[Subscription]) -> None:
    """Let the database judge each condition for its own action (see
    ``triggers.probe``), whatever else the table's trigger fires on; the probe
    trigger is undone with its savepoint, so it never outlives the check."""
    for subscription in subscriptions:
        if not subscription.when:
            continue
        cursor.transaction.savepoint(PROBE_SAVEPOINT)
        try:
            cursor.execute(probe(table, subscription, f"SUBS_PROBE${secrets.token_hex(6).upper()}"))
        except DatabaseError as exc:
            if is_conflict(exc):
                raise
            action = subscription.action
            hint = _MISSING_ROW[action] if _COLUMN_UNKNOWN in (exc.gds_codes or ()) else ""
            raise SubsError(
                f"--when condition rejected by the database for {ACTION_NAMES[action]}s: {first_line(exc)}{hint}"
            ) from None
        cursor.transaction.rollback(savepoint=PROBE_SAVEPOINT)


def _check_key(table: Table) -> None:
    uncaptured = [c.name for c in table.key_columns if not is_captured(c)]
    if uncaptured:
        raise SubsError(
            f"primary key column(s) {', '.join(uncaptured)} of {table.name} have a type subs "
            "cannot capture (binary BLOB or binary string not 16 bytes long)"
        )
    if _key_too_long(table):
        raise SubsError(
            f"the primary key of {table.name} is too long to capture "
            f"(more than {MAX_KEY_CHARS} characters)"
        )


def _key_too_long(table: Table) -> bool:
    """Its captured key can be longer than EVENT_LOG.ROW_KEY holds."""
    return key_capacity(table.key_columns) > MAX_KEY_CHARS


def _subscribed_table(cursor: Cursor, typed: str) -> str | None:
    """The table name as stored in EVENT_SUBSCRIBER (the table itself may be gone)."""
    sql = queries.load("subscribers")
    for candidate in lookup_names(typed):
        cursor.execute(sql["table_names"], (candidate,))
        row = cursor.fetchone()
        if row:
            return row[0]
    return None


def remove(
    db: Database, table_typed: str, actions_typed: str, tag: str, *, purge: bool = False
) -> list[Change]:
    """Unsubscribe; pending events stay (and are still delivered) unless ``purge``."""
    actions = parse_actions(actions_typed)
    check_tag(tag)
    sql = queries.load("subscribers")

    def work(cursor: Cursor) -> tuple[list[Change], str | None]:
        name = _subscribed_table(cursor, table_typed)
        current = {
            (s.action, s.tag): s for s in (_for_table(cursor, name) if name else []) if s.active
        }
        missing = [a for a in actions if (a, tag) not in current]
        if missing:
            raise SubsError(
                f"{name or table_typed} {''.join(missing)} {tag} is not subscribed; "
                "`subs list` shows the subscriptions"
            )
        changes = []
        for action in actions:
            subscription = current[(action, tag)]
            cursor.execute(sql["count_events"], (subscription.sub_id,))
            events = cursor.fetchone()[0]
            if purge and events:
                cursor.execute(sql["delete_events"], (subscription.sub_id,))
            if events and not purge:
                cursor.execute(sql["deactivate"], (subscription.sub_id,))
                changes.append(Change("deactivated", subscription, events))
            else:
                cursor.execute(sql["delete"], (subscription.sub_id,))
                cursor.execute(sql["delete_lease"], (subscription.sub_id,))
                changes.append(Change("removed", subscription, events))
        if find_table(cursor, quote(name)) is None:
            return changes, None
        _sync_trigger(db, cursor, load_table(cursor, quote(name)))
        return changes, name

    return _apply(db, work)


def listing(db: Database) -> list[Listing]:
    with db.transaction() as cursor:
        cursor.execute(queries.load("subscribers")["list"])
        return [Listing(_subscription(row), row[7], row[8], row[9]) for row in cursor.fetchall()]
