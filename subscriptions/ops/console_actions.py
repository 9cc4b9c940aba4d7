"""What the console's buttons do (`subs web`): retry, discard, retry a
subscription's dead events, pause and resume. Each action is one NO WAIT
transaction, which gives way to whatever holds the rows, and returns what
it did in a sentence."""

from __future__ import annotations

from collections.abc import Callable

from firebird.driver import Cursor, DatabaseError

from subscriptions.capture import subscribers
from subscriptions.db import sql
from subscriptions.db.connection import Database, nowait_tpb
from subscriptions.db.errors import is_conflict
from subscriptions.errors import SubsError

from .console import LoggedEvent, event, subscription


def _act(db: Database, work: Callable[[Cursor], str]) -> str:
    """Run an action in one NO WAIT transaction: rows that another
    transaction holds (a worker claiming or settling them, or a session that
    changed them and has not ended) make it give way with a message."""
    try:
        with db.transaction(nowait_tpb()) as cursor:
            return work(cursor)
    except DatabaseError as exc:
        if is_conflict(exc):
            raise SubsError(
                "another transaction holds these rows right now (a listener at work on them, "
                "or a session that has not committed); try again in a moment"
            ) from None
        raise


def _on_failed_event(
    db: Database,
    event_id: int,
    verb: str,
    statement: Callable[[LoggedEvent], str],
    then: Callable[[Cursor, LoggedEvent], str],
) -> str:
    """Run the statement named by ``statement(event)`` on one failed or dead
    event that no worker holds (the statement checks that again, in case the
    event moved on meanwhile), then ``then``, which says what was done."""

    def work(cursor: Cursor) -> str:
        current = event(cursor, event_id)
        if current.in_flight:
            raise SubsError(f"event {event_id} is being handled right now; it can be {verb} if it fails")
        if current.state == "pending":
            raise SubsError(f"event {event_id} has not failed: only failed and dead events can be {verb}")
        cursor.execute(sql.load("console")[statement(current)], (event_id,))
        if not cursor.affected_rows:
            raise SubsError(f"event {event_id} changed meanwhile; look at it again")
        return then(cursor, current)

    return _act(db, work)


def retry(db: Database, event_id: int) -> str:
    """A dead event is queued again (attempts start from 1); a failed one is
    made due now. Either way its listeners are woken."""

    def then(cursor: Cursor, current: LoggedEvent) -> str:
        subscribers.wake(cursor, subscription(cursor, current.subscription).tag, requeued=current.state == "dead")
        if current.state == "dead":
            return f"event {event_id} is queued again; its attempts start again from 1"
        return f"event {event_id} is due for its next attempt now"

    def statement(current: LoggedEvent) -> str:
        return "retry_dead" if current.state == "dead" else "retry_failed"

    return _on_failed_event(db, event_id, "retried", statement, then)


def discard(db: Database, event_id: int) -> str:
    """Delete a failed or dead event: it will never be delivered."""

    def then(cursor: Cursor, current: LoggedEvent) -> str:
        return f"event {event_id} is discarded; it will not be delivered"

    return _on_failed_event(db, event_id, "discarded", lambda _: "discard", then)


def retry_dead(db: Database, sub_id: int) -> str:
    """Queue every dead event of a subscription again."""

    def work(cursor: Cursor) -> str:
        tag = subscription(cursor, sub_id).tag
        cursor.execute(sql.load("console")["retry_dead_of_subscription"], (sub_id,))
        count = cursor.affected_rows
        if count:
            subscribers.wake(cursor, tag, requeued=True)
        return f"{count:,} dead event(s) of subscription {sub_id} queued again"

    return _act(db, work)


def set_paused(db: Database, sub_id: int, paused: bool) -> str:
    """Pause or resume one subscription (see capture/subscribers.set_paused)."""

    def work(cursor: Cursor) -> str:
        subscription(cursor, sub_id)  # NotFound for an unknown one
        change = subscribers.set_paused_in(cursor, sub_id, paused)
        target = change.subscription
        name = f"subscription {sub_id} ({target.table} {target.action} {target.tag})"
        if change.outcome == "unchanged":
            return f"{name} was already {'paused' if paused else 'running'}"
        return f"{name} is {change.outcome}"

    return _act(db, work)
