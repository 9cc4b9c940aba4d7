"""Generates the one trigger per subscribed table from catalogue metadata.

The trigger has the SUB_IDs of the table's active subscriptions compiled in,
so a change costs one EVENT_LOG insert per matching subscription and no
lookup at all. Key and values are captured once per row, and only when some
subscription matches.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from .capture import row_expression
from .identifiers import ACTION_NAMES, ACTIONS, literal, quote
from .metadata import Table

EVENT_PREFIX = "subs:"
TRIGGER_PREFIX = "SUBS$"
# Run after the application's own AFTER triggers.
TRIGGER_POSITION = 32000
_CONTEXT_FLAG = {"I": "INSERTING", "U": "UPDATING", "D": "DELETING"}


@dataclass(frozen=True)
class Subscription:
    sub_id: int
    table: str
    action: str
    tag: str
    columns: tuple[str, ...] = ()
    when: str | None = None
    active: bool = True


def event_name(tag: str) -> str:
    """The POST_EVENT name for a tag, so a listener can wait for just its tags."""
    return EVENT_PREFIX + tag


def trigger_name(table: str, max_chars: int, max_bytes: int) -> str:
    """``SUBS$<table>``, shortened with a hash when the engine's limit requires."""
    name = TRIGGER_PREFIX + table
    if len(name) <= max_chars and len(name.encode()) <= max_bytes:
        return name
    digest = "$" + hashlib.sha1(table.encode()).hexdigest()[:8]
    head = TRIGGER_PREFIX + table
    while len(head + digest) > max_chars or len((head + digest).encode()) > max_bytes:
        head = head[:-1]
    return head + digest


def _condition(subscription: Subscription) -> str | None:
    parts = []
    if subscription.action == "U" and subscription.columns:
        changed = " OR ".join(
            f"NEW.{quote(c)} IS DISTINCT FROM OLD.{quote(c)}" for c in subscription.columns
        )
        parts.append(f"({changed})")
    if subscription.when:
        parts.append(f"({subscription.when})")
    return " AND ".join(parts) or None


def _capture(table: Table, action: str) -> list[str]:
    key_context = "OLD" if action == "D" else "NEW"
    lines = [f"pk_key = {row_expression(table.key_columns, key_context)};"]
    if action in "UD":
        lines.append(f"old_values = {row_expression(table.columns, 'OLD')};")
    if action in "IU":
        lines.append(f"new_values = {row_expression(table.columns, 'NEW')};")
    lines.append("captured = TRUE;")
    return lines


def _subscription_block(table: Table, subscription: Subscription) -> list[str]:
    body = [
        "IF (NOT captured) THEN",
        "BEGIN",
        *("    " + line for line in _capture(table, subscription.action)),
        "END",
        "INSERT INTO EVENT_LOG (SUB_ID, PK_KEY, OLD_VALUES, NEW_VALUES)",
        f"VALUES ({int(subscription.sub_id)}, :pk_key, :old_values, :new_values);",
        f"POST_EVENT {literal(event_name(subscription.tag))};",
    ]
    condition = _condition(subscription)
    header = f"-- subscription {int(subscription.sub_id)}: {subscription.tag}"
    if condition is None:
        return [header, *body]
    return [header, f"IF ({condition}) THEN", "BEGIN", *("    " + line for line in body), "END"]


def generate(table: Table, subscriptions: list[Subscription], name: str) -> str:
    """CREATE OR ALTER TRIGGER text for ``table`` and its active subscriptions."""
    active = sorted((s for s in subscriptions if s.active), key=lambda s: s.sub_id)
    actions = [a for a in ACTIONS if any(s.action == a for s in active)]
    if not actions:
        raise ValueError(f"no active subscriptions for {table.name}")
    events = " OR ".join(ACTION_NAMES[a].upper() for a in actions)
    lines = [
        f"CREATE OR ALTER TRIGGER {quote(name)} FOR {quote(table.name)}",
        f"ACTIVE AFTER {events} POSITION {TRIGGER_POSITION}",
        "AS",
        "DECLARE pk_key VARCHAR(4000) CHARACTER SET UTF8;",
        "DECLARE old_values BLOB SUB_TYPE TEXT CHARACTER SET UTF8;",
        "DECLARE new_values BLOB SUB_TYPE TEXT CHARACTER SET UTF8;",
        "DECLARE captured BOOLEAN = FALSE;",
        "BEGIN",
    ]
    for action in actions:
        lines += [f"    IF ({_CONTEXT_FLAG[action]}) THEN", "    BEGIN"]
        for subscription in (s for s in active if s.action == action):
            lines += ["        " + line for line in _subscription_block(table, subscription)]
        lines.append("    END")
    lines.append("END")
    return "\n".join(lines)
