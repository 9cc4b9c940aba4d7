"""Whether each subscribed table is captured as its subscriptions say: the
table and its trigger exist, the trigger is active, may write EVENT_LOG and
use what its --when conditions read or call, and is what the generator makes
of the table now. `subs list` and `subs status` show it; `subs status
--check` fails on anything else than ``OK``."""

from __future__ import annotations

from firebird.driver import Cursor

from subscriptions.db import sql
from subscriptions.db.connection import read_text

OK = "ok"
# What EVENT_CAPTURE_SOURCE's REASON means for an operator.
_REASONS = {
    "no table": "table missing",
    "no primary key": "table has no primary key",
    "key too long": "primary key too long to capture",
    "no subscription": "no active subscription",
}


def capture_state(cursor: Cursor, table: str) -> str:
    """``OK``, or what is wrong with the capture of ``table``."""
    statements = sql.load("metadata")
    cursor.execute(statements["capture_source"], (table,))
    name, source, reason = cursor.fetchone()
    if reason is not None:
        return _REASONS.get(reason, str(reason))
    generated = read_text(source) or ""
    cursor.execute(statements["capture_trigger_state"], (name,))
    row = cursor.fetchone()
    if row is None:
        return "trigger missing"
    stored, inactive, may_write = row
    if inactive:
        return "trigger inactive"
    # The catalogue keeps a trigger's text from its AS on.
    if (read_text(stored) or "").strip() != generated[generated.index("\nAS\n") + 1 :].strip():
        return "trigger stale"
    if not may_write:
        return "trigger may not write EVENT_LOG"
    cursor.execute(statements["capture_trigger_missing_rights"], (name,))
    lacking = sorted(str(row[0]) for row in cursor.fetchall())
    if lacking:
        return f"trigger may not use {', '.join(lacking)}"
    return OK


def capture_states(cursor: Cursor, tables: set[str]) -> dict[str, str]:
    return {table: capture_state(cursor, table) for table in sorted(tables)}
