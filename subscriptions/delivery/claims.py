"""Claiming events from EVENT_LOG and settling them (ack, fail, release).

No claim writes the events it claims; each leases them as a range, the
same way on every Firebird version:

- parallel mode (``claim``): runs of each subscription's events, one
  EVENT_SPAN row per run, taken while the claim holds the row lock on the
  subscription's EVENT_LEASE row. A subscription another claimer holds at
  that moment is passed over, as ``UPDATE ... SKIP LOCKED`` passes over
  rows: concurrent claimers get disjoint events without waiting. Writing
  every claimed event (what SKIP LOCKED needs) cost more than everything
  else a no-op handler's event costs;
- ordered mode (``claim_head``, ``claim_next``): a stream's batch, recorded
  in the EVENT_LEASE rows of its subscriptions.

Every claim is a short READ COMMITTED NO WAIT transaction of its own; handlers
never run inside it. A claim is one statement that returns the claimed events
themselves; it is prepared once per attachment, and a batch is settled with
one statement per 400 events: with a no-op handler, preparing and executing
per event cost more than the engine's work.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import math
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from firebird.driver import Cursor, DatabaseError, Statement

from subscriptions.db import sql
from subscriptions.db.connection import Database, fetch_all, nowait_tpb, waiting_tpb
from subscriptions.db.errors import index_was_rebuilt, is_conflict, is_connection_lost
from subscriptions.db.retry import Backoff, retrying

from .claimed import Claimed
from .floors import Floors
from .lockouts import Lockouts

MAX_ERROR_LENGTH = 2000
# Ids per settling statement: what its list of ids holds. The list is a
# VARCHAR(32000) parameter, but an attachment in UTF8 passes at most 8,191
# characters (32,765 bytes / 4); BIGINTs have up to 19 digits and a comma.
MAX_IDS = 400
# Subscriptions per parallel claim statement: what its IDS list (INTEGER ids,
# up to 11 characters each) and AFTERS list (BIGINT ids, up to 20) hold in
# their VARCHAR(8000) parameters. More take one statement after another.
MAX_CLAIM_TARGETS = 300
# Prepared statements kept per attachment (claims: one per set of targets seen).
MAX_PREPARED = 32
# Tries to read or make the database's id while another claimer makes it.
IDENTIFY_ATTEMPTS = 3
# Seconds a parallel claimer may resume its walks where its claims stopped
# before it walks each subscription from its floor (floors.py) again.
WALK_ALL_EVERY = 1.0


STREAM_HELD = "EVENT_STREAM_HELD"
# Seconds a settlement waits for a row another transaction holds before
# its caller hears of it (and tries again).
SETTLE_LOCK_WAIT = 1
T = TypeVar("T")


@dataclass(frozen=True)
class Target:
    """A subscription this listener consumes."""

    sub_id: int
    table: str
    action: str
    tag: str

    def __str__(self) -> str:
        return f"subscription {self.sub_id} ({self.table} {self.action} {self.tag})"


Stream = tuple[str, str]  # (table, tag): what ordered mode keeps in log order


@dataclass(frozen=True)
class Settlement:
    """A claim_head batch's handled events (``done``), to delete; with
    ``release``, its stream's lease is given back too."""

    stream: Stream
    done: Sequence[int]
    release: bool


def stream_of(subscription: Target) -> Stream:
    return subscription.table, subscription.tag


def streams(targets: Iterable[Target]) -> dict[Stream, list[Target]]:
    """Targets grouped by stream."""
    grouped: dict[Stream, list[Target]] = {}
    for target in targets:
        grouped.setdefault(stream_of(target), []).append(target)
    return grouped


def load_targets(db: Database) -> list[Target]:
    with db.transaction() as cursor:
        cursor.execute(sql.load("claims")["subscriptions"])
        return [Target(*row) for row in cursor.fetchall()]


class Claimer:
    """Claims and settles events for one owner (a worker process)."""

    def __init__(
        self, db: Database, owner: str, lease_seconds: float, key_order: bool = False, floors: Floors | None = None
    ) -> None:
        """``floors``: where walks start, raised by the caller's looks
        (floors.keep_raising); without them, from each first entry."""
        self.db = db
        self.owner = owner
        self.lease_ms = int(lease_seconds * 1000)
        self.key_order = key_order
        self.conflicts = 0
        self.lockouts = Lockouts()
        self._turns = 0  # claims so far: where the next one starts
        # Parallel claims: per subscription, the last event claimed by a walk
        # that took every available event before it; whether the last claim
        # took all it asked for; when the walks last started at the first event.
        self._claimed_up_to: dict[int, int] = {}
        self._last_claim_full = False
        self._walked_all_at = -math.inf
        self.floors = floors or Floors()
        self._sql = sql.load("claims")
        self._max_bytes = int(self._sql["max_claim_bytes"])
        self._prepared: dict[str, Statement] = {}
        # Set when the claim index was rebuilt under one of our statements:
        # a statement prepared before then can fail the same way for good.
        self._prepared_stale = False
        self.database_id = database_id(db)

    def _execute(self, cursor: Cursor, statement: str, params: Sequence[Any]) -> None:
        """Execute ``statement`` prepared once per attachment rather than per call."""
        if self._prepared_stale:
            self._prepared_stale = False
            self.free_statements()
        prepared = self._prepared.get(statement)
        if prepared is None:
            if len(self._prepared) >= MAX_PREPARED:  # the targets changed many times
                self.free_statements()
            prepared = self._prepared[statement] = cursor.prepare(statement)
        cursor.execute(prepared, params)

    @contextlib.contextmanager
    def _noticing_a_rebuilt_index(self) -> Iterator[None]:
        try:
            yield
        except DatabaseError as exc:
            if index_was_rebuilt(exc):
                self._prepared_stale = True
            raise

    def _run(self, work: Callable[[Cursor], T], tpb: bytes | None = None) -> T:
        """``work`` through ``Database.run`` (retried on conflicts), with our
        statements prepared again after the claim index was rebuilt."""

        def once(cursor: Cursor) -> T:
            with self._noticing_a_rebuilt_index():
                return work(cursor)

        return self.db.run(once, tpb=tpb)

    def _settle(self, work: Callable[[Cursor], T]) -> T:
        """``work``, a settlement, tried once: a conflict, or a row another
        transaction held for SETTLE_LOCK_WAIT, is the caller's to try again
        (Dispatcher._settle), so that a long wait shows."""
        with self._noticing_a_rebuilt_index(), self.db.transaction(waiting_tpb(SETTLE_LOCK_WAIT)) as cursor:
            return work(cursor)

    def free_statements(self) -> None:
        """Free the statements prepared on our attachment; before it closes,
        or the driver reports each one it frees afterwards on stderr."""
        for statement in self._prepared.values():
            statement.free()
        self._prepared.clear()

    def _claimed(self, rows: list[tuple[Any, ...]], targets: dict[int, Target]) -> list[Claimed]:
        """Claimed rows (the columns of claimed_columns, and a parallel
        claim's SPAN_ID, long values read by fetch_all), their values left
        encoded."""
        claimed = []
        for event_id, sub_id, row_key, old, long_old, new, long_new, created_at, attempts, *span in rows:
            target = targets[sub_id]
            claimed.append(
                Claimed(
                    id=event_id,
                    table=target.table,
                    action=target.action,
                    tag=target.tag,
                    subscription_id=sub_id,
                    attempt=attempts,
                    created_at=dt.datetime.fromisoformat(created_at),
                    database_id=self.database_id,
                    row_key=row_key,
                    old=old if long_old is None else long_old,
                    new=new if long_new is None else long_new,
                    span=span[0] if span else None,
                )
            )
        return claimed

    def _claim(
        self, claim: Callable[[Cursor], list[tuple[Any, ...]]], targets: dict[int, Target], stream: Stream | None = None
    ) -> list[Claimed]:
        """Run ``claim`` in a NO WAIT transaction. An ordered claim tells
        ``lockouts`` whether it met a lock on its ``stream``'s lease rows."""
        tried = [] if stream is None else [stream]
        try:
            with self._noticing_a_rebuilt_index(), self.db.transaction(nowait_tpb()) as cursor:
                claimed = self._claimed(claim(cursor), targets)
        except DatabaseError as exc:
            # A lock another transaction holds; or, on Firebird 5.0.3/5.0.4
            # SuperClassic, a false update conflict (engine issue #9017). An
            # ordered claim whose stream another consumer leased meanwhile
            # (EVENT_STREAM_HELD) undid itself. Either way nothing was
            # claimed: try again later.
            locked = is_conflict(exc)
            if not locked and STREAM_HELD not in str(exc):
                raise
            self.conflicts += 1
            if locked:
                self.lockouts.observe(tried, locked=tried)
            return []
        self.lockouts.observe(tried, locked=())
        return claimed

    def claim(self, targets: dict[int, Target], limit: int, resume: bool = False) -> list[Claimed]:
        """Up to ``limit`` available events of ``targets``, fewer once they
        carry max_claim_bytes (claims.sql), each subscription's in log
        order, from one subscription after another,
        starting with the next one each time (no subscription waits behind
        another's backlog); with ``key_order``, only events with no earlier
        live event of their row. Each comes with its span; settle with
        ``ack``. A subscription another claimer holds is passed over and
        counted in ``conflicts`` and ``lockouts``. Beyond MAX_CLAIM_TARGETS subscriptions,
        one claim statement (and transaction) follows another until
        ``limit`` events are claimed.

        ``resume``: the caller knows of no event that became available
        again behind its claims (no retry fell due, nothing was given
        back). While it works through a backlog (its last claim was full),
        each walk then starts after what its claims took, except once per
        WALK_ALL_EVERY, when walks start at each subscription's floor
        (floors.py) again and find what came back that the caller cannot
        know of (a transaction that committed late with lower event ids, the
        spans of a claimer that died or gave events back)."""
        sub_ids = sorted(targets)
        turn = self._turns % len(sub_ids) if sub_ids else 0
        self._turns += 1
        order = sub_ids[turn:] + sub_ids[:turn]
        walk_all = (
            not resume
            or self.key_order  # a handled event frees the later events of its row
            or not self._last_claim_full
            or time.monotonic() - self._walked_all_at >= WALK_ALL_EVERY
        )
        if walk_all:
            self._walked_all_at = time.monotonic()
            self._claimed_up_to.clear()
        claimed: list[Claimed] = []
        for start in range(0, len(order), MAX_CLAIM_TARGETS):
            window = order[start : start + MAX_CLAIM_TARGETS]
            floors = self.floors.each_after(window)
            afters = [
                floor if walk_all else max(floor, self._claimed_up_to.get(sub_id, 0))
                for sub_id, floor in zip(window, floors)
            ]
            claimed += self._claim(self._runs(window, afters, limit - len(claimed)), targets)
            if len(claimed) >= limit or sum(event.size for event in claimed) >= self._max_bytes:
                break
        self._last_claim_full = len(claimed) >= limit
        for event in claimed:
            self._claimed_up_to[event.subscription_id] = event.id
        return claimed

    def _runs(self, sub_ids: list[int], afters: list[int], limit: int) -> Callable[[Cursor], list[tuple[Any, ...]]]:
        """The claim statement over ``sub_ids`` (at most MAX_CLAIM_TARGETS),
        each walked from its entry in ``afters``."""

        def runs(cursor: Cursor) -> list[tuple[Any, ...]]:
            params = (self.owner, self.lease_ms, limit, self.key_order, sql.id_list(sub_ids), sql.id_list(afters))
            self._execute(cursor, self._sql["claim"], params)
            rows = fetch_all(cursor)
            locked = {row[1] for row in rows if row[0] is None}
            self.conflicts += len(locked)
            self.lockouts.observe(sub_ids, locked)
            return [row for row in rows if row[0] is not None]

        return runs

    def ready(self, among: Sequence[int]) -> set[int]:
        """The subscriptions of ``among`` whose first live event could be
        claimed now: the streams an ordered drain claims (claim_head
        decides)."""
        sub_ids = sorted(among)

        def probe(cursor: Cursor) -> set[int]:
            found: set[int] = set()
            for start in range(0, len(sub_ids), MAX_CLAIM_TARGETS):
                chunk = sub_ids[start : start + MAX_CLAIM_TARGETS]
                params = (sql.id_list(chunk), sql.id_list(self.floors.each_after(chunk)))
                self._execute(cursor, self._sql["ready"], params)
                found.update(row[0] for row in cursor.fetchall())
            return found

        return self._run(probe, tpb=nowait_tpb())

    def claim_head(self, stream: Sequence[Target], limit: int) -> list[Claimed]:
        """The first events of one stream (the targets of one table and tag),
        in log order, if the first one is available, under the stream's
        lease: up to ``limit`` of each subscription's, and up to where they
        carry max_claim_bytes (claims.sql). Settle them with ``settle_head``."""
        table, tag = stream_of(stream[0])
        known = {target.sub_id: target for target in stream}
        after = self.floors.after(known)

        def head(cursor: Cursor) -> list[tuple[Any, ...]]:
            self._execute(cursor, self._sql["claim_head"], (self.owner, self.lease_ms, limit, table, tag, after))
            return self._in_log_order(cursor, known)

        return self._claim(head, known, stream=(table, tag))

    def claim_next(self, stream: Sequence[Target], after: int, holding: int, limit: int) -> list[Claimed]:
        """The batch that follows one we hold of the stream (``after`` is its
        last event, ``holding`` how many of the stream's events up to it we
        hold: that batch and earlier ones handled but not deleted yet),
        claimed while it runs and held under the same lease; nothing if the
        stream's log up to ``after`` is no longer just those events (one
        committed late among them goes first, through claim_head). Settle
        the held batches with ``settle_head``, releasing the lease with the
        last."""
        table, tag = stream_of(stream[0])
        known = {target.sub_id: target for target in stream}
        floor_after = self.floors.after(known)

        def following(cursor: Cursor) -> list[tuple[Any, ...]]:
            params = (self.owner, self.lease_ms, limit, table, tag, after, holding, floor_after)
            self._execute(cursor, self._sql["claim_next"], params)
            return self._in_log_order(cursor, known)

        return self._claim(following, known)

    def _in_log_order(self, cursor: Cursor, known: dict[int, Target]) -> list[tuple[Any, ...]]:
        """A stream claim's rows in log order; ``known`` learns the
        subscriptions added to the stream since the targets were read."""
        rows = sorted(fetch_all(cursor), key=lambda row: int(row[0]))
        if any(row[1] not in known for row in rows):
            cursor.execute(self._sql["subscriptions"])
            known.update((row[0], Target(*row)) for row in cursor.fetchall())
        return rows

    def ack(self, event_ids: Sequence[int], spans: Iterable[int] = ()) -> int:
        """Delete handled events and give back the spans whose events are all
        settled, together (a span given back first would let its handled
        events be claimed again); returns how many events were deleted.

        A conflict is the caller's to retry (``_settle``): the heartbeat may
        have renewed the same spans a moment earlier."""
        ids, released = _sorted_ids(event_ids), _sorted_ids(spans)

        def work(cursor: Cursor) -> int:
            deleted = self._delete(cursor, ids)
            for chunk in _id_lists(released):
                cursor.execute(self._sql["release_spans"], (self.owner, chunk))
            return deleted

        return self._settle(work) if ids or released else 0

    def settle_head(self, stream: Stream, done: Sequence[int], *, release: bool = True) -> int:
        """Delete the handled events of a claim_head batch and give the
        stream's lease back, together; the events not handled are then
        pending again. Not ``release``: a batch claimed by claim_next follows
        it, and the lease stays. Returns how many were deleted."""
        return self.settle_heads([Settlement(stream, done, release)])

    def settle_heads(self, settlements: Sequence[Settlement]) -> int:
        """``settle_head`` for the batches of several streams, in one
        transaction: with many busy streams the commit (one forced write
        per changed page) is most of a settlement's cost."""
        ids = _sorted_ids([event_id for settlement in settlements for event_id in settlement.done])
        released = list(dict.fromkeys(settlement.stream for settlement in settlements if settlement.release))

        def work(cursor: Cursor) -> int:
            deleted = self._delete(cursor, ids)
            for stream in released:
                cursor.execute(self._sql["release_lease"], (self.owner, *stream))
            return deleted

        return self._settle(work)

    def ack_in(self, cursor: Cursor, event_id: int) -> None:
        """Acknowledge inside the caller's transaction (transactional handlers)."""
        cursor.execute(self._sql["ack"], (str(int(event_id)),))
        cursor.fetchall()  # the block runs as its result is fetched

    def fail(self, event_id: int, error: str, retry_in_seconds: float, dead: bool) -> None:
        """Record a failed attempt (the claim did not count it), due again
        after ``retry_in_seconds`` or ``dead``."""
        params = (error[:MAX_ERROR_LENGTH], int(retry_in_seconds * 1000), int(dead), int(dead), event_id)
        self._settle(lambda cursor: self._execute(cursor, self._sql["fail"], params))

    def count_attempts(self, event_ids: Sequence[int]) -> None:
        """Count an attempt of events that were handled (or failed) by a
        handler process that died before it reported them: they come again
        once their claim is given back, as their next attempt."""
        ids = _sorted_ids(event_ids)
        statement = sql.with_parameters(self._sql["count_attempts"], len(ids))
        self._settle(lambda cursor: cursor.execute(statement, ids))

    def extend(self) -> int:
        """Renew every lease we hold, spans and streams (the heartbeat);
        returns how many."""

        def work(cursor: Cursor) -> int:
            cursor.execute(self._sql["extend_leases"], (self.lease_ms, self.owner))
            ((renewed,),) = cursor.fetchall()
            return int(renewed)

        return self._run(work)

    def _delete(self, cursor: Cursor, ids: list[int]) -> int:
        """Delete the events ``ids``, MAX_IDS per statement; returns how many were."""
        done = 0
        for chunk in _id_lists(ids):
            cursor.execute(self._sql["ack"], (chunk,))
            ((deleted,),) = cursor.fetchall()
            done += int(deleted)
        return done


def database_id(db: Database) -> str:
    """The database's id for events' idempotency keys; made on first use."""
    return str(
        retrying(
            lambda: db.fetch_value(sql.load("claims")["database_id"]),
            attempts=IDENTIFY_ATTEMPTS,
            retry_on=lambda exc: isinstance(exc, DatabaseError) and not is_connection_lost(exc),
            sleep=time.sleep,
            backoff=Backoff(0.05, 0.5),
        )
    )


def _id_lists(ids: Sequence[int]) -> Iterator[str]:
    """``ids`` as id lists of at most MAX_IDS each, one per settling statement."""
    for start in range(0, len(ids), MAX_IDS):
        yield sql.id_list(ids[start : start + MAX_IDS])


def _sorted_ids(event_ids: Iterable[int]) -> list[int]:
    return sorted(int(event_id) for event_id in event_ids)
