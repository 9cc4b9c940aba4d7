"""What Python knows of the capture trigger: the subscriptions compiled into
it, the event name it posts, and the probe that checks a ``--when``
condition. The trigger itself is generated in the database
(EVENT_CAPTURE_SOURCE in sql/capture.sql), so that the application's DDL can
regenerate it in its own transaction.
"""

from __future__ import annotations

from dataclasses import dataclass

from subscriptions.db.sql import quote

from .metadata import Table
from .names import ACTION_NAMES

EVENT_PREFIX = "subs:"
# Posted when dead events are queued again (with their old ids): no tag
# makes this name, as a tag has no space.
REQUEUED_EVENT = "subs requeued"
# Run after the application's own AFTER triggers (as the generated trigger does).
TRIGGER_POSITION = 32000


@dataclass(frozen=True)
class Subscription:
    sub_id: int
    table: str
    action: str
    tag: str
    columns: tuple[str, ...] = ()
    when: str | None = None
    active: bool = True
    paused: bool = False


def event_name(tag: str) -> str:
    """The POST_EVENT name for a tag, so a listener can wait for just its tags."""
    return EVENT_PREFIX + tag


def _evaluate(condition: str) -> str:
    """As the generated trigger evaluates it: IIF makes the engine refuse a
    non-boolean condition when it compiles the trigger (a plain assignment to
    a BOOLEAN would accept ``NEW.NAME`` and then fail every write converting
    it), and turns NULL into FALSE: no event."""
    return f"IIF({condition}, TRUE, FALSE)"


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
            f"    matched = {_evaluate(subscription.when or 'TRUE')};",
            "END",
        ]
    )
