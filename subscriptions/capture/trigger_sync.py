"""Keeping each subscribed table's generated trigger in step with its
subscriptions (EVENT_SUBSCRIBER), and making every attachment use it."""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable
from typing import Any

from firebird.driver import Cursor, DatabaseError

from subscriptions.db import sql
from subscriptions.db.connection import Database
from subscriptions.db.errors import NO_PRIVILEGE, codes, first_line

from .metadata import Table, find_table, load_table
from .triggers import Subscription

log = logging.getLogger("subs.capture")

# EVENT_LOG.PK_ROW's width: a longer captured key is left out (`subs add` refuses it).
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


def sync_trigger(cursor: Cursor, table: Table) -> str | None:
    """Regenerate the table's trigger from its active subscriptions with the
    database's generator, or leave an empty inactive one when none is left
    (``settle_trigger`` then drops it). Returns the generator's REASON: 'no
    primary key' and 'key too long' mean changes are captured with an empty
    key (see sql/capture.sql)."""
    cursor.execute(sql.load("subscribers")["sync_trigger"], (table.name,))
    _, reason = cursor.fetchone()
    return None if reason is None else str(reason)


def settle_trigger(cursor: Cursor, table: str) -> None:
    """Make every attachment reload the table's triggers once more.

    Under SuperClassic an attachment that reloads a table's triggers while the
    DDL transaction is still committing can keep the old ones indefinitely
    (seen in about 1 of 3 tries with a writer inserting during `subs add`).
    One more metadata change, made after the first has committed, reaches it
    again; so when `subs add/remove` returns, every writer uses the new trigger.
    It comes after the trigger's commit, as the rights its conditions need do
    (``grant_condition_rights``); a trigger left without subscriptions goes.
    """
    active = any(s.active for s in for_table(cursor, table))
    if not active:
        cursor.execute(sql.load("subscribers")["forget_rights"], (table,))
    name = capture_trigger(cursor, table)
    if name is None:
        return
    if active:
        _grant_and_touch(cursor, name, table)
    else:
        cursor.execute(sql.with_identifiers(sql.load("subscribers")["drop_trigger"], trigger=name))


def condition_rights(cursor: Cursor, trigger: str) -> list[tuple[str, str, bool]]:
    """What the trigger's --when conditions read or call, as (object, kind,
    held): kind is select, procedure, function or package; held says whether
    the trigger holds the right to."""
    cursor.execute(sql.load("metadata")["capture_trigger_rights"], (trigger,))
    return [(str(name), str(kind), bool(held)) for name, kind, held in cursor.fetchall()]


def grant_condition_rights(cursor: Cursor, trigger: str, table: str) -> None:
    """Grant the trigger what its --when conditions read or call, as it is
    granted INSERT on EVENT_LOG: a writer without such a right of its own
    would have its write refused ("no permission for SELECT access"), which
    no WHEN handler inside the trigger can catch. The engine records what a
    trigger uses only when it commits, so this runs after. A right this user
    may not give is a warning (and `subs status` shows the trigger drifted).
    The rights are remembered for EVENT_CAPTURE_SYNC, which gives them to
    the trigger it makes when the application drops the table and creates
    it again (the engine drops a trigger's rights with it)."""
    statements = sql.load("subscribers")
    rights = condition_rights(cursor, trigger)
    _remember_rights(cursor, table, {(name, kind) for name, kind, _ in rights})
    for name, kind, held in rights:
        if held:
            continue
        grant = sql.with_identifiers(statements[f"grant_{kind}_to_trigger"], object=name, trigger=trigger)
        try:
            cursor.execute(grant)
        except DatabaseError as exc:
            log.warning(
                "the capture trigger of %s could not be granted %s on %s (%s): writers without that right "
                "will have their writes refused; run %s as a user who may grant it",
                table,
                "SELECT" if kind == "select" else "EXECUTE",
                name,
                first_line(exc),
                grant,
            )


def _remember_rights(cursor: Cursor, table: str, rights: set[tuple[str, str]]) -> None:
    statements = sql.load("subscribers")
    try:
        cursor.execute(statements["remembered_rights"], (table,))
        if {(str(name), str(kind)) for name, kind in cursor.fetchall()} == rights:
            return
        cursor.execute(statements["forget_rights"], (table,))
        for name, kind in sorted(rights):
            cursor.execute(statements["remember_right"], (table, name, kind))
    except DatabaseError as exc:
        log.warning(
            "could not record what the capture trigger of %s needs (%s): if the application drops and "
            "creates the table again, writers may be refused until a listener settles it%s",
            table,
            first_line(exc),
            "; run `subs grant` for this user again" if NO_PRIVILEGE in codes(exc) else "",
        )


def _grant_and_touch(cursor: Cursor, trigger: str, table: str) -> None:
    grant_condition_rights(cursor, trigger, table)
    cursor.execute(sql.with_identifiers(sql.load("subscribers")["touch_trigger"], trigger=trigger))


def refresh(db: Database, choose: Callable[[Cursor, list[str]], list[str]] = lambda _, tables: tables) -> list[str]:
    """Regenerate and settle, with this version's generator, the trigger of
    every subscribed table that exists (after a schema upgrade), or of those
    ``choose`` picks of them in the same transaction; returns the tables."""

    def regenerate(cursor: Cursor) -> list[str]:
        existing = [name for name in subscribed_tables(cursor) if find_table(cursor, sql.quote(name)) is not None]
        tables = choose(cursor, existing)
        for name in tables:
            sync_trigger(cursor, load_table(cursor, sql.quote(name)))
        return tables

    tables = db.run(regenerate)
    for name in tables:
        db.run(functools.partial(settle_trigger, table=name))
    return tables


class ChangedTriggerSettler:
    """Settles the capture triggers the application's DDL regenerated (the
    commit trigger of sql/capture.sql), as ``settle_trigger`` does after
    `subs add/remove`: on embedded Firebird 5 a writer process went on
    capturing a dropped column for over 30 s after the DROP had committed,
    until a touch of the trigger ended it within 0.1 s. The listener's
    housekeeping calls ``settle`` whenever it connects."""

    def __init__(self) -> None:
        self._seen: dict[str, tuple[int, int]] | None = None
        self._allowed = True

    def settle(self, db: Database) -> list[str]:
        """Touch every capture trigger whose text or state changed since the
        last call, and every new one (none on the first call); returns their
        tables. Without the right to alter them, warns once and stops."""
        if not self._allowed:
            return []

        def versions(cursor: Cursor) -> list[tuple[str, str, int, int]]:
            cursor.execute(sql.load("metadata")["capture_trigger_versions"])
            return [(str(trigger), str(table), int(text), int(state)) for trigger, table, text, state in cursor]

        current = db.run(versions)
        seen, self._seen = self._seen, {trigger: (text, state) for trigger, _, text, state in current}
        if seen is None:
            log.info("watching %s capture trigger(s) for the application's DDL", len(current))
            return []
        settled: list[str] = []
        for trigger, table, text, state in current:
            if seen.get(trigger) == (text, state):
                continue
            try:
                db.run(functools.partial(_grant_and_touch, trigger=trigger, table=table))
            except DatabaseError as exc:
                if NO_PRIVILEGE in codes(exc):
                    self._allowed = False
                    log.warning(
                        "cannot settle capture triggers after the application's DDL (%s): grant this "
                        "user ALTER ANY TABLE, or writer processes of an embedded database may "
                        "capture a table's old shape until they reconnect",
                        first_line(exc),
                    )
                    return settled
                self._seen.pop(trigger)  # touched at the next call
                log.warning("could not settle the capture trigger of %s: %s", table, first_line(exc))
                continue
            settled.append(table)
            log.info("settled the capture trigger of %s after a schema change", table)
        return settled
