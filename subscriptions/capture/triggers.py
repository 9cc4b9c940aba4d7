"""Generates the one trigger per subscribed table from catalogue metadata.

The trigger has the SUB_IDs of the table's active subscriptions compiled in,
so a change costs one EVENT_LOG insert per matching subscription and no
lookup at all. Key and values are captured once per row, and only when some
subscription matches.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from subscriptions.db.sql import literal, quote

from .metadata import Table
from .names import ACTION_NAMES, ACTIONS
from .values import row_expression

EVENT_PREFIX = "subs:"
TRIGGER_PREFIX = "SUBS$"
# Run after the application's own AFTER triggers.
TRIGGER_POSITION = 32000
# EVENT_LOG.ROW_KEY's width: `subs add` refuses tables whose key can be longer.
MAX_KEY_CHARS = 1000
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
        changed = " OR ".join(f"NEW.{quote(c)} IS DISTINCT FROM OLD.{quote(c)}" for c in subscription.columns)
        parts.append(f"({changed})")
    if subscription.when:
        parts.append(f"({subscription.when})")
    return " AND ".join(parts) or None


def _capture(table: Table, action: str) -> list[str]:
    key_context = "OLD" if action == "D" else "NEW"
    lines = [f"row_key = {row_expression(table.key_columns, key_context)};"]
    if action in "UD":
        lines.append(f"old_values = {row_expression(table.columns, 'OLD')};")
    if action in "IU":
        lines.append(f"new_values = {row_expression(table.columns, 'NEW')};")
    return lines


def _matched(subscription: Subscription) -> str:
    return f"matched_{int(subscription.sub_id)}"


def _evaluate(condition: str) -> str:
    """IIF makes the engine refuse a non-boolean condition when it compiles the
    trigger (a plain assignment to a BOOLEAN would accept ``NEW.NAME`` and then
    fail every write converting it), and turns NULL into FALSE: no event."""
    return f"IIF({condition}, TRUE, FALSE)"


def key_hash(subscription: Subscription) -> str:
    """The event's ordering group for ``--key-order``: table, tag and key.
    Version 2 backfilled the same hash for older events (sql/migrations/v2.sql)."""
    return f"HASH({literal(subscription.table + '|' + subscription.tag + '|')} || :row_key)"


def _log(subscription: Subscription) -> list[str]:
    return [
        "INSERT INTO EVENT_LOG (SUB_ID, ROW_KEY, KEY_HASH, OLD_VALUES, NEW_VALUES)",
        f"VALUES ({int(subscription.sub_id)}, :row_key, {key_hash(subscription)}, :old_values, :new_values);",
        f"POST_EVENT {literal(event_name(subscription.tag))};",
    ]


def _action_block(table: Table, action: str, subscriptions: list[Subscription]) -> list[str]:
    """Evaluate each condition once, capture the row once if anything matched,
    then log one event per matching subscription."""
    conditions = {s: condition for s in subscriptions if (condition := _condition(s))}
    conditional = list(conditions)
    lines = [f"{_matched(s)} = {_evaluate(condition)};" for s, condition in conditions.items()]
    capture = _capture(table, action)
    if len(conditional) == len(subscriptions):
        any_match = " OR ".join(f"{_matched(s)} IS TRUE" for s in conditional)
        lines += [f"IF ({any_match}) THEN", "BEGIN", *_indent(capture), "END"]
    else:
        lines += capture
    for subscription in subscriptions:
        lines.append(f"-- subscription {int(subscription.sub_id)}: {subscription.tag}")
        if subscription in conditional:
            condition = f"{_matched(subscription)} IS TRUE"
            lines += [f"IF ({condition}) THEN", "BEGIN", *_indent(_log(subscription)), "END"]
        else:
            lines += _log(subscription)
    return lines


def _indent(lines: list[str], depth: int = 1) -> list[str]:
    return ["    " * depth + line for line in lines]


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
        f"DECLARE row_key VARCHAR({MAX_KEY_CHARS}) CHARACTER SET UTF8;",
        "DECLARE old_values BLOB SUB_TYPE TEXT CHARACTER SET UTF8;",
        "DECLARE new_values BLOB SUB_TYPE TEXT CHARACTER SET UTF8;",
        *(f"DECLARE {_matched(s)} BOOLEAN;" for s in active if _condition(s)),
        "BEGIN",
    ]
    for action in actions:
        block = _action_block(table, action, [s for s in active if s.action == action])
        lines += _indent([f"IF ({_CONTEXT_FLAG[action]}) THEN", "BEGIN", *_indent(block), "END"])
    lines.append("END")
    return "\n".join(lines)


def probe(table: Table, subscription: Subscription, name: str) -> str:
    """An inactive trigger evaluating ``subscription``'s condition for its
    action alone. In the table's trigger, which may fire on several actions,
    the engine accepts NEW and OLD everywhere; in a trigger of one action it
    refuses NEW for deletes and OLD for inserts, which have no such row."""
    return "\n".join(
        [
            f"CREATE TRIGGER {quote(name)} FOR {quote(table.name)}",
            f"INACTIVE AFTER {ACTION_NAMES[subscription.action].upper()} POSITION {TRIGGER_POSITION}",
            "AS",
            "DECLARE matched BOOLEAN;",
            "BEGIN",
            f"    matched = {_evaluate(_condition(subscription) or 'TRUE')};",
            "END",
        ]
    )
