"""Whether each subscribed table is captured as its subscriptions say: the
table and its trigger exist, the trigger is active, may write EVENT_LOG and
use what its --when conditions read or call, and is what the generator makes
of the table now. `subs list` and `subs status` show it; `subs status
--check` fails on anything else than ``OK``."""

from __future__ import annotations

from firebird.driver import Cursor

from subscriptions.db import sql
from subscriptions.db.connection import read_text

from .trigger_sync import condition_rights

OK = "ok"
# The trigger is not the text the generator makes now: DDL that skipped the
# database triggers, or a database restored on a later Firebird, whose
# generator makes another text (BLOB_APPEND on 4.0.2 and later).
STALE = "trigger stale"
# A table whose subscriptions were all removed: nothing to capture.
NOT_SUBSCRIBED = "no active subscription"
# What EVENT_CAPTURE_SOURCE's REASON means for an operator.
_REASONS = {
    "no table": "table missing",
    "no subscription": NOT_SUBSCRIBED,
}
# A table without a primary key (a migration between dropping one and
# adding the next) or with one too long for EVENT_LOG is still captured,
# with an empty key: drift all the same.
_KEYLESS = {
    "no primary key": "table has no primary key: captured with an empty key",
    "key too long": "primary key too long to capture: captured with an empty key",
}
# States a trigger made again would not change.
KEYLESS_STATES = frozenset(_KEYLESS.values())


def capture_state(cursor: Cursor, table: str) -> str:
    """``OK``, or what is wrong with the capture of ``table``."""
    return capture_states(cursor, {table})[table]


def capture_states(cursor: Cursor, tables: set[str]) -> dict[str, str]:
    """``capture_state`` of each table, statement by statement over all of
    them rather than table by table: a cursor prepares a statement again
    unless it is the one it ran last (firebird-driver), and three statements
    prepared for each of 300 tables cost `subs status` 0.4 s more."""
    statements = sql.load("metadata")
    generated: dict[str, tuple[str, str, str]] = {}  # table: (trigger, text, reason)
    states: dict[str, str] = {}
    for table in sorted(tables):
        cursor.execute(statements["capture_source"], (table,))
        name, source, reason = cursor.fetchone()
        if source is None:
            states[table] = _REASONS.get(reason, str(reason))
        else:
            generated[table] = (name, read_text(source) or "", reason)
    for table, (name, text, _) in generated.items():
        cursor.execute(statements["capture_trigger_state"], (name,))
        states[table] = _trigger_state(cursor.fetchone(), text)
    for table, (name, _, reason) in generated.items():
        if states[table] != OK:
            continue
        lacking = sorted(object_name for object_name, _, held in condition_rights(cursor, name) if not held)
        if lacking:
            states[table] = f"trigger may not use {', '.join(lacking)}"
        elif reason in _KEYLESS:
            states[table] = _KEYLESS[reason]
    return {table: states[table] for table in sorted(tables)}


def _trigger_state(row: tuple[object, bool, bool] | None, generated: str) -> str:
    """What the catalogue's row of the trigger (capture_trigger_state) says
    against the text the generator makes now, short of the rights its
    conditions need."""
    if row is None:
        return "trigger missing"
    stored, inactive, may_write = row
    if inactive:
        return "trigger inactive"
    # The catalogue keeps a trigger's text from its AS on.
    if not _same_text((read_text(stored) or "").strip(), generated[generated.index("\nAS\n") + 1 :].strip()):
        return STALE
    if not may_write:
        return "trigger may not write EVENT_LOG"
    return OK


def _same_text(stored: str, generated: str) -> bool:
    """Whether the catalogue's text is the generated one, as the attachment
    that compiled it stored it. The application's DDL regenerates the trigger
    in its own attachment, and one in character set NONE stores a '?' for
    each byte beyond ASCII (a name like STRAßE): what it compiled is the
    generated text all the same, and it captures as such."""
    if stored == generated:
        return True
    return stored == "".join(char if char.isascii() else "?" * len(char.encode()) for char in generated)
