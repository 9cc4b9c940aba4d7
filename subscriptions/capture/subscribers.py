"""Adding, removing and listing subscriptions.

Every change runs in one SNAPSHOT transaction together with the trigger DDL:
a bad ``--when`` or any other error leaves the database as it was, and two
concurrent changes to one table conflict on the trigger and are retried from
a fresh snapshot instead of overwriting each other's trigger. A second short
transaction then settles the trigger (``trigger_sync.settle_trigger``).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from firebird.driver import Cursor, DatabaseError

from subscriptions.db import sql
from subscriptions.db.connection import Database
from subscriptions.db.errors import COLUMN_UNKNOWN, codes, first_line, is_conflict
from subscriptions.errors import SubsError

from .drift import KEYLESS_STATES, OK, capture_state, capture_states
from .metadata import Table, find_table, load_table
from .names import (
    ACTION_NAMES,
    MAX_STORED_CHARS,
    check_condition,
    check_tag,
    lookup_names,
    parse_actions,
    split_names,
)
from .trigger_sync import MAX_KEY_BYTES, for_table, settle_trigger, subscription_from_row, sync_trigger
from .triggers import REQUEUED_EVENT, Subscription, event_name, probe

PROBE_SAVEPOINT = "SUBS_WHEN_PROBE"
# The row an action lacks, as the engine names an unknown column of it.
_MISSING_ROW = {"I": ("OLD.", "; an insert has no OLD row"), "D": ("NEW.", "; a delete has no NEW row")}


@dataclass(frozen=True)
class Change:
    """What one command did to one (table, action, tag)."""

    outcome: str  # added | updated | unchanged | repaired | removed | deactivated | paused | resumed
    subscription: Subscription
    events: int = 0
    before: Subscription | None = None  # updated: what it was


@dataclass(frozen=True)
class Listing:
    subscription: Subscription
    created_at: dt.datetime
    pending: int
    dead: int
    capture: str  # drift.OK, or what is wrong with the table's capture

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
            "capture": self.capture,
            "paused": s.paused,
        }


def _apply(db: Database, work: Callable[[Cursor], tuple[list[Change], str | None]]) -> list[Change]:
    """Run a subscription change, then settle the trigger of the table it touched."""
    changes, table = db.run(work)
    if table is not None:
        db.run(lambda cursor: settle_trigger(cursor, table))
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
    statements = sql.load("subscribers")

    def work(cursor: Cursor) -> tuple[list[Change], str | None]:
        table = load_table(cursor, table_typed)
        columns = (
            tuple(dict.fromkeys(table.resolve_column(c) for c in split_names(columns_typed)))
            if columns_typed is not None
            else ()
        )
        existing = {(s.action, s.tag): s for s in for_table(cursor, table.name)}
        changes = []
        for action in actions:
            wanted = columns if action == "U" else ()
            encoded = json.dumps(list(wanted), ensure_ascii=False) if wanted else None
            if encoded is not None and len(encoded) > MAX_STORED_CHARS:
                raise SubsError(
                    f"--columns names {len(wanted)} columns, more than subs can store ({MAX_STORED_CHARS:,} "
                    "characters of names); watch fewer, or drop --columns to get every update"
                )
            current = existing.get((action, tag))
            if current is None:
                cursor.execute(statements["insert"], (table.name, action, tag, encoded, condition))
                sub_id = cursor.fetchone()[0]
                outcome = "added"
            elif current.active and current.columns == wanted and current.when == condition:
                changes.append(Change("unchanged", current))
                continue
            else:
                cursor.execute(statements["update"], (encoded, condition, current.sub_id))
                sub_id = current.sub_id
                outcome = "updated"
            after = Subscription(sub_id, table.name, action, tag, wanted, condition)
            changes.append(Change(outcome, after, before=current))
        if all(change.outcome == "unchanged" for change in changes):
            state = capture_state(cursor, table.name)
            if state == OK or state in KEYLESS_STATES:
                return changes, None
            # Subscribed already, but the trigger drifted: make it again.
            changes = [Change("repaired", change.subscription) for change in changes]
        _check_when(cursor, table, [c.subscription for c in changes if c.outcome != "unchanged"])
        if sync_trigger(cursor, table) == "key too long" and any(c.outcome == "added" for c in changes):
            raise SubsError(
                f"the primary key of {table.name} is too long to capture (more than {MAX_KEY_BYTES} bytes "
                "of captured key); subscribe to a table with a shorter key"
            )
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
            context, hint = _MISSING_ROW.get(action, ("", ""))
            if COLUMN_UNKNOWN not in codes(exc) or context not in str(exc):
                hint = ""
            raise SubsError(
                f"--when condition rejected by the database for {ACTION_NAMES[action]}s: {first_line(exc)}{hint}"
            ) from None
        cursor.transaction.rollback(savepoint=PROBE_SAVEPOINT)


def _subscribed(
    cursor: Cursor, table_typed: str, actions: str, tag: str, *, removed_too: bool = False
) -> tuple[str, list[Subscription]]:
    """The table's name and its subscriptions of ``actions`` for ``tag``, one
    per action; refuses any that does not exist, and, unless ``removed_too``,
    one that was removed (it stays while it has events to deliver)."""
    name = _subscribed_table(cursor, table_typed)
    current = {(s.action, s.tag): s for s in (for_table(cursor, name) if name else [])}
    missing = [a for a in actions if (a, tag) not in current]
    if name is None or missing:
        raise SubsError(
            f"{name or table_typed} {''.join(missing or actions)} {tag} is not subscribed; "
            "`subs list` shows the subscriptions"
        )
    removed = "".join(a for a in actions if not current[(a, tag)].active)
    if removed and not removed_too:
        raise SubsError(
            f"{name} {removed} {tag} was removed; `subs list` shows the events it still delivers, "
            f"`subs add` subscribes it again"
        )
    return name, [current[(action, tag)] for action in actions]


def _subscribed_table(cursor: Cursor, typed: str) -> str | None:
    """The table name as stored in EVENT_SUBSCRIBER (the table itself may be gone)."""
    statements = sql.load("subscribers")
    for candidate in lookup_names(typed):
        cursor.execute(statements["table_names"], (candidate,))
        row = cursor.fetchone()
        if row:
            return str(row[0])
    return None


def remove(db: Database, table_typed: str, actions_typed: str, tag: str, *, purge: bool = False) -> list[Change]:
    """Unsubscribe; pending events stay (and are still delivered) unless
    ``purge``. A subscription removed with its events kept is deleted by a
    later remove with ``purge``, or without once its events are gone."""
    actions = parse_actions(actions_typed)
    check_tag(tag)
    statements = sql.load("subscribers")
    backfilled = db.run(
        lambda cursor: [
            s.sub_id for s in _subscribed(cursor, table_typed, actions, tag, removed_too=True)[1] if s.action == "I"
        ]
    )

    def work(cursor: Cursor) -> tuple[list[Change], str | None]:
        # First: a backfill's chunk commits every few milliseconds, and one
        # that committed since this transaction began would be a conflict.
        for sub_id in backfilled:
            cursor.execute(statements["hold_backfill"], (sub_id,))
        name, subscribed = _subscribed(cursor, table_typed, actions, tag, removed_too=True)
        changes = []
        for subscription in subscribed:
            cursor.execute(statements["count_events"], (subscription.sub_id,))
            events = cursor.fetchone()[0]
            if events and not purge and not subscription.active:
                raise SubsError(
                    f"{name} {subscription.action} {tag} was already removed and keeps {events} event(s), "
                    f"still delivered; `subs remove {table_typed} {subscription.action} {tag} --purge` deletes them"
                )
            if purge and events:
                cursor.execute(statements["delete_events"], (subscription.sub_id,))
            if events and not purge:
                cursor.execute(statements["deactivate"], (subscription.sub_id,))
                changes.append(Change("deactivated", subscription, events))
            else:
                cursor.execute(statements["delete"], (subscription.sub_id,))
                cursor.execute(statements["delete_lease"], (subscription.sub_id,))
                cursor.execute(statements["delete_spans"], (subscription.sub_id,))
                cursor.execute(statements["delete_backfill"], (subscription.sub_id,))
                changes.append(Change("removed", subscription, events))
        if find_table(cursor, sql.quote(name)) is None:
            return changes, None
        sync_trigger(cursor, load_table(cursor, sql.quote(name)))
        return changes, name

    return _apply(db, work)


def set_paused(db: Database, table_typed: str, actions_typed: str, tag: str, paused: bool) -> list[Change]:
    """Pause (or resume) subscriptions: their changes are still captured, but
    no listener claims their events until they are resumed. Outcomes:
    ``paused``, ``resumed``, or ``unchanged`` when already so."""
    actions = parse_actions(actions_typed)
    check_tag(tag)

    def work(cursor: Cursor) -> list[Change]:
        _, subscribed = _subscribed(cursor, table_typed, actions, tag)
        return [_set_paused(cursor, subscription, paused) for subscription in subscribed]

    return db.run(work)


def set_paused_in(cursor: Cursor, sub_id: int, paused: bool) -> Change:
    """``set_paused`` for the active subscription ``sub_id``, in the caller's transaction."""
    cursor.execute(sql.load("subscribers")["by_id"], (sub_id,))
    row = cursor.fetchone()
    if row is None or not row[6]:
        raise SubsError(f"there is no active subscription {sub_id}; `subs list` shows the subscriptions")
    return _set_paused(cursor, subscription_from_row(row), paused)


def _set_paused(cursor: Cursor, subscription: Subscription, paused: bool) -> Change:
    """A resumed subscription's listeners are woken: its events wait no poll."""
    if subscription.paused == paused:
        return Change("unchanged", subscription)
    statements = sql.load("subscribers")
    cursor.execute(statements["set_paused"], (paused, subscription.sub_id))
    if not paused:
        wake(cursor, subscription.tag)
    return Change("paused" if paused else "resumed", dataclasses.replace(subscription, paused=paused))


def wake(cursor: Cursor, tag: str, *, requeued: bool = False) -> None:
    """Have the listeners of ``tag`` claim at once (when the transaction
    commits) rather than at their next poll; ``requeued``: this transaction
    queues dead events again, below the listeners' claim floors."""
    post = sql.load("subscribers")["post"]
    cursor.execute(post, (event_name(tag),))
    if requeued:
        cursor.execute(post, (REQUEUED_EVENT,))


def listing(db: Database) -> list[Listing]:
    with db.transaction() as cursor:
        cursor.execute(sql.load("subscribers")["list"])
        rows = cursor.fetchall()
        subscriptions = [subscription_from_row(row) for row in rows]
        states = capture_states(cursor, {s.table for s in subscriptions if s.active})
    return [
        Listing(s, row[7], row[8], row[9], states[s.table] if s.active else "removed")
        for s, row in zip(subscriptions, rows)
    ]
