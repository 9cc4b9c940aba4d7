"""Delivering the rows already in a table (`subs backfill TABLE TAG`).

Each existing row becomes one insert event (``old`` None, ``new`` the row)
of the table's insert subscription for the tag, logged exactly as its
trigger logs an insert. The rows are read in primary-key order, a chunk per
short transaction; each chunk locks the rows it reads, so an application
write to one of them waits for the chunk's commit and its own event comes
after the snapshot: the last event of every row carries its current state.
EVENT_BACKFILL records after each chunk where the run stands, in the
chunk's transaction, so a killed run goes on from there.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from firebird.driver import Cursor, DatabaseError, Isolation, tpb

from subscriptions.capture.metadata import Table, load_table
from subscriptions.capture.names import check_condition, check_tag
from subscriptions.capture.values import decode
from subscriptions.db import sql
from subscriptions.db.connection import Database, fetch_all, read_text
from subscriptions.db.errors import first_line, is_conflict, is_connection_lost
from subscriptions.db.retry import Backoff
from subscriptions.errors import SubsError

# Seconds a chunk waits for a writer that holds one of its rows.
LOCK_TIMEOUT = 10


@dataclass(frozen=True)
class Progress:
    """Where a run stands after a chunk: ``rows_done`` of ``rows_total``
    (counted when the backfill started; rows inserted since are done too)."""

    table: str
    tag: str
    rows_done: int
    rows_total: int
    events: int
    rows_this_run: int
    seconds: float
    finished: bool
    resumed: bool
    done_before: bool = False  # an earlier run with the same --where did it all: nothing done


@dataclass(frozen=True)
class _Plan:
    sub_id: int
    table: Table
    tag: str
    shape: tuple[Any, ...]
    first_chunk: str
    next_chunk: str
    last_key: bytes | None
    rows_done: int
    events: int
    rows_total: int
    resumed: bool
    done_before: bool = False


@functools.cache
def chunk_tpb() -> bytes:
    """READ COMMITTED, waiting a while for a row a writer holds."""
    return cast(bytes, tpb(Isolation.READ_COMMITTED_RECORD_VERSION, lock_timeout=LOCK_TIMEOUT))


def backfill(
    db: Database,
    table_typed: str,
    tag: str,
    *,
    where: str | None = None,
    chunk: int = 1000,
    restart: bool = False,
    progress: Callable[[Progress], None] = lambda _: None,
    stop_requested: Callable[[], bool] = lambda: False,
) -> Progress:
    """Deliver ``table_typed``'s rows (those ``where`` selects) to its
    insert subscription for ``tag``; resumes an unfinished run of the same
    ``where`` unless ``restart``, and does nothing when a run with that
    ``where`` is done (``done_before``: the same command again, a cron job,
    would deliver every row again). Calls ``progress`` after every chunk, and
    stops between two chunks when ``stop_requested()``. Follows the
    application's DDL and changes of the subscription's --when condition
    from the next chunk on."""
    check_tag(tag)
    condition = check_condition(where, "--where", "the table's columns") if where is not None else None
    plan = _plan(db, table_typed, tag, condition, restart)
    if plan.done_before:
        total = max(plan.rows_total, plan.rows_done)
        return Progress(plan.table.name, tag, plan.rows_done, total, plan.events, 0, 0.0, True, False, True)
    _mark_running(db, plan.sub_id)
    try:
        return _chunks(db, plan, table_typed, condition, chunk, progress, stop_requested)
    finally:
        with contextlib.suppress(DatabaseError):  # a lost connection took the mark with it
            _mark_running(db, None)


def _chunks(
    db: Database,
    plan: _Plan,
    table_typed: str,
    condition: str | None,
    chunk: int,
    progress: Callable[[Progress], None],
    stop_requested: Callable[[], bool],
) -> Progress:
    """The run's chunks up to the last, made again from where the run
    stands whenever the table or the subscription changed shape."""
    tag = plan.tag
    state = Progress(plan.table.name, tag, plan.rows_done, plan.rows_total, plan.events, 0, 0.0, False, plan.resumed)
    started = time.monotonic()
    last_key = plan.last_key
    while not state.finished:
        if stop_requested():
            raise SubsError(
                f"the backfill of {plan.table.name} for {tag} stopped at {state.rows_done:,} of "
                f"{state.rows_total:,} rows: run the same command again to go on"
            )
        text, parameters = (
            (plan.first_chunk, [chunk]) if last_key is None else (plan.next_chunk, [chunk, *_key(plan, last_key)])
        )
        try:
            outcome = _run_chunk(db, plan, state.rows_done, text, parameters, chunk)
            if outcome is None:  # the table or the subscription changed: make the chunk statements again
                plan = _plan(db, table_typed, tag, condition, restart=False, going_on_at=state.rows_done)
                continue
        except DatabaseError as exc:
            if not is_connection_lost(exc):
                raise
            raise SubsError(  # the chunk in flight may have committed: "after", not "at"
                f"the backfill of {plan.table.name} for {tag} lost its connection ({first_line(exc)}) after "
                f"{state.rows_done:,} of {state.rows_total:,} rows: run the same command again to go on"
            ) from None
        rows, events, key = outcome
        last_key = key if key is not None else last_key
        state = Progress(
            plan.table.name,
            tag,
            state.rows_done + rows,
            max(plan.rows_total, state.rows_done + rows),
            state.events + events,
            state.rows_this_run + rows,
            time.monotonic() - started,
            rows < chunk,
            plan.resumed,
        )
        progress(state)
    return state


def _mark_running(db: Database, sub_id: int | None) -> None:
    with db.transaction() as cursor:
        cursor.execute(sql.load("backfill")["mark_running"], (None if sub_id is None else str(sub_id),))
        cursor.fetchone()


def _run_chunk(
    db: Database, plan: _Plan, rows_done: int, text: str, parameters: list[Any], chunk: int
) -> tuple[int, int, bytes | None] | None:
    """One chunk and its bookkeeping in one transaction, tried again from
    scratch when it meets a conflict; refused when another run of the same
    backfill has moved it on since this run's last chunk (both would log
    every row they share twice). None, with nothing done, when the table or
    the subscription changed shape since ``plan``. The chunk's statement is
    prepared in its transaction: one kept prepared between chunks would
    hold the table's primary key index, and an application's migration
    that drops it would wait for the end of the backfill."""
    statements = sql.load("backfill")
    sub_id = plan.sub_id

    def shape(cursor: Cursor) -> tuple[Any, ...]:
        cursor.execute(statements["shape"], (sub_id,))
        found = fetch_all(cursor)
        if not found or not found[0][0]:
            raise SubsError(
                f"the insert subscription of {plan.table.name} for {plan.tag} was removed while this backfill "
                f"ran; it stopped at {rows_done:,} of {plan.rows_total:,} rows"
            )
        return found[0]

    def once(cursor: Cursor) -> tuple[int, int, bytes | None] | None:
        if shape(cursor) != plan.shape:
            return None
        cursor.execute(text, parameters)
        rows, events, key = cursor.fetchone()
        cursor.execute(statements["chunk_done"], (key, rows, events, sub_id, rows_done))
        if not cursor.affected_rows:
            shape(cursor)  # a remove meanwhile
            raise _moved_on(plan.table.name)
        if rows < chunk:
            cursor.execute(statements["finish"], (sub_id,))
        return int(rows), int(events), key

    return db.run(once, tpb=chunk_tpb(), backoff=Backoff(0.1, 2.0))


def _moved_on(table: str) -> SubsError:
    return SubsError(
        f"this backfill of {table} changed under this run (another run or a --restart moved it "
        "on); this run stops: `subs status` shows where it stands"
    )


def _key(plan: _Plan, last_key: bytes) -> list[Any]:
    """The last row done's key values, in the order of the key's columns."""
    values = decode(last_key) or {}
    return [values[name] for name in plan.table.primary_key]


def _plan(
    db: Database, table_typed: str, tag: str, condition: str | None, restart: bool, going_on_at: int | None = None
) -> _Plan:
    """Check everything and record the start (or find the run to resume), in
    one transaction: any error leaves the database as it was. ``going_on_at``:
    this run's rows done, when it makes its statements again mid-run; only
    the backfill still standing there is resumed."""
    statements = sql.load("backfill")

    def work(cursor: Cursor) -> _Plan:
        table = load_table(cursor, table_typed)
        sub_id = _insert_subscription(cursor, table.name, tag)
        cursor.execute(statements["state"], (sub_id,))
        state = cursor.fetchone()
        resume = state is not None and state[5] is None and not restart
        if going_on_at is not None and not (resume and state[2] == going_on_at):
            raise _moved_on(table.name)  # another run finished it too
        if state is not None and state[5] is not None and not restart and read_text(state[0]) == condition:
            _, last_key, rows_done, events, recorded_total, _ = state
            return _Plan(sub_id, table, tag, (), "", "", last_key, rows_done, events, int(recorded_total), False, True)
        if resume and read_text(state[0]) != condition:
            shown = f"--where {read_text(state[0])!r}" if state[0] is not None else "no --where"
            raise SubsError(
                f"an unfinished backfill of {table.name} for {tag} has {shown}: run it again with that to "
                "go on, or add --restart to start over"
            )
        cursor.execute(statements["shape"], (sub_id,))
        (shape,) = fetch_all(cursor)
        cursor.execute(statements["source"], (sub_id, condition))
        ((first_text, next_text, count_rows, reason),) = fetch_all(cursor)
        if reason is not None:
            raise SubsError(f"cannot backfill {table.name}: {reason}")
        try:
            cursor.prepare(first_text).free()
            if not resume:  # a resumed run keeps its count: a count of a big table takes a while
                cursor.execute(count_rows)
                (rows_total,) = cursor.fetchone()
        except DatabaseError as exc:
            if is_conflict(exc):
                raise
            raise SubsError(f"--where rejected by the database: {first_line(exc)}") from None
        if not resume:
            cursor.execute(statements["start"], (sub_id, condition, rows_total))
            return _Plan(sub_id, table, tag, shape, first_text, next_text, None, 0, 0, int(rows_total), False)
        _, last_key, rows_done, events, recorded_total, _ = state
        if last_key is not None and tuple(decode(last_key) or {}) != table.primary_key:
            raise SubsError(
                f"the primary key of {table.name} changed during its backfill for {tag}: add --restart to start over"
            )
        return _Plan(
            sub_id, table, tag, shape, first_text, next_text, last_key, rows_done, events, int(recorded_total), True
        )

    try:
        return db.run(work)
    except DatabaseError as exc:
        if not is_conflict(exc):
            raise
        # A chunk of a running backfill was committing where it stands (--restart would reset it).
        raise SubsError(
            f"another run of this backfill of {table_typed} for {tag} is going on; let it end, or stop it, "
            "then run this again"
        ) from None


def _insert_subscription(cursor: Cursor, table: str, tag: str) -> int:
    cursor.execute(sql.load("backfill")["insert_subscription"], (table, tag))
    rows = cursor.fetchall()
    if not rows:
        raise SubsError(
            f"{table} has no subscription for tag {tag}; `subs add {table} I {tag}` first (`subs list` shows them)"
        )
    inserts = [sub_id for sub_id, action in rows if action == "I"]
    if not inserts:
        raise SubsError(
            f"backfill delivers rows as insert events, and {table} has no insert subscription for {tag} "
            f"(only {''.join(sorted(action for _, action in rows))}): `subs add {table} I {tag}` first"
        )
    return int(inserts[0])
