"""Claiming events from EVENT_LOG and settling them (ack, fail, release).

Two claim strategies, chosen by engine version:

- Firebird 5: ``UPDATE ... SKIP LOCKED RETURNING``: concurrent claimers get
  disjoint rows without waiting.
- Firebird 3/4 have no SKIP LOCKED: a PSQL block tries each candidate in a
  NO WAIT transaction and catches the conflict per row, so no claimer ever sees
  a lock conflict either.

Every claim is a short READ COMMITTED NO WAIT transaction of its own; handlers
never run inside it. A claim is one statement that returns the claimed events
themselves; it is prepared once per attachment, and a batch is settled with
one statement: with a no-op handler, preparing and executing per event cost
more than the engine's work.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from firebird.driver import Cursor, DatabaseError, Statement

from . import queries
from .capture import decode
from .db import Database, is_conflict, nowait_tpb, read_text
from .events import Event

MAX_ERROR_LENGTH = 2000
NO_CURRENT_RECORD = 335544348
# Ids per IN (...) list when settling a batch; Firebird 3 allows 1,500.
SETTLE_CHUNK = 500
# Prepared claim statements kept per attachment (one per set of targets seen).
MAX_PREPARED = 32


@dataclass(frozen=True)
class Target:
    """A subscription this listener consumes."""

    sub_id: int
    table: str
    action: str
    tag: str


def supports_skip_locked(engine_version: tuple[int, ...]) -> bool:
    return engine_version[0] >= 5


def load_targets(db: Database) -> list[Target]:
    with db.transaction() as cursor:
        cursor.execute(queries.load("claims")["subscriptions"])
        return [Target(*row) for row in cursor.fetchall()]


class Claimer:
    """Claims and settles events for one owner (a worker process)."""

    def __init__(self, db: Database, owner: str, lease_seconds: float, key_order: bool = False) -> None:
        self.db = db
        self.owner = owner
        self.lease_ms = int(lease_seconds * 1000)
        self.key_order = key_order
        self.skip_locked = supports_skip_locked(db.engine_version)
        self.conflicts = 0
        self._sql = queries.load("claims")
        self._prepared: dict[str, Statement] = {}
        self._claim_head = self._claim_sql("claim_head")

    def _claim_sql(self, name: str, **fields: str) -> str:
        """Claim statement ``name`` with the claimed columns filled in."""
        sql = self._sql
        return sql[name].format(
            not_leased=sql["not_leased"],
            claimed_columns=sql["claimed_columns"],
            claimed_outputs=sql["claimed_outputs"],
            claimed_variables=sql["claimed_variables"],
            **fields,
        )

    def _execute(self, cursor: Cursor, sql: str, params: tuple) -> None:
        """Execute ``sql`` prepared once per attachment rather than per call."""
        statement = self._prepared.get(sql)
        if statement is None:
            if len(self._prepared) >= MAX_PREPARED:  # the targets changed many times
                for stale in self._prepared.values():
                    stale.free()
                self._prepared.clear()
            statement = self._prepared[sql] = cursor.prepare(sql)
        cursor.execute(statement, params)

    @staticmethod
    def _events(rows: list[tuple], targets: dict[int, Target]) -> list[Event]:
        """Claimed rows (the columns of claimed_columns) as events."""
        events = []
        for event_id, sub_id, pk_key, old, long_old, new, long_new, created_at, attempts in rows:
            target = targets[sub_id]
            events.append(
                Event(
                    id=event_id,
                    table=target.table,
                    action=target.action,
                    tag=target.tag,
                    pk=decode(pk_key) or {},
                    old=decode(old if long_old is None else read_text(long_old)),
                    new=decode(new if long_new is None else read_text(long_new)),
                    attempt=attempts,
                    created_at=created_at,
                    subscription_id=sub_id,
                )
            )
        return events

    def _claim(self, sql: str, params: tuple, targets: dict[int, Target]) -> list[Event]:
        try:
            with self.db.transaction(nowait_tpb()) as cursor:
                self._execute(cursor, sql, params)
                # BLOB values are read before the transaction ends.
                return self._events(cursor.fetchall(), targets)
        except DatabaseError as exc:
            # Firebird 5.0.3/5.0.4 SuperClassic can report a false update
            # conflict (engine issue #9017), and a multi-row UPDATE ... SKIP
            # LOCKED RETURNING "no current record for fetch" when a row it was
            # about to return was just acknowledged by another worker. Either
            # way nothing was claimed: try again later.
            if not is_conflict(exc) and NO_CURRENT_RECORD not in (exc.gds_codes or ()):
                raise
            self.conflicts += 1
            return []

    def claim(self, targets: dict[int, Target], limit: int) -> list[Event]:
        """Up to ``limit`` claimable events of ``targets``, oldest first; with
        ``key_order``, only events with no earlier live event of their key."""
        sub_ids = ", ".join(str(int(sub_id)) for sub_id in targets)
        name = "claim_skip_locked" if self.skip_locked else "claim_fallback"
        key_order = self._sql["key_order"] if self.key_order else ""
        sql = self._claim_sql(name, sub_ids=sub_ids, key_order=key_order)
        return self._claim(sql, (self.owner, self.lease_ms, limit), targets)

    def claim_head(self, target: Target, limit: int) -> list[Event]:
        """The first events of one subscription, if the first one is available,
        under the subscription's lease: settle them with ``settle_head``."""
        params = (self.owner, self.lease_ms, limit, target.sub_id)
        return self._claim(self._claim_head, params, {target.sub_id: target})

    def _claimant(self, held: bool) -> str | None:
        """CLAIMED_BY of our events: NULL for those held under a subscription's lease."""
        return None if held else self.owner

    def ack(self, event_ids: Sequence[int]) -> int:
        """Delete handled events we still own; returns how many we did.

        Settling is retried on a conflict, like every write here: the
        heartbeat may have renewed the same rows a moment earlier."""
        ids = _sorted_ids(event_ids)
        return self.db.run(lambda cursor: self._settle(cursor, "ack", ids, self.owner)) if ids else 0

    def settle_head(self, sub_id: int, done: Sequence[int]) -> int:
        """Delete the handled events of a claim_head batch and give the
        subscription's lease back, together; the events not handled are then
        pending again. Returns how many were deleted."""
        ids = _sorted_ids(done)

        def work(cursor: Cursor) -> int:
            deleted = self._settle(cursor, "ack", ids, None)
            cursor.execute(self._sql["release_lease"], (sub_id, self.owner))
            return deleted

        return self.db.run(work)

    def ack_in(self, cursor: Cursor, event_id: int, *, held: bool) -> None:
        """Acknowledge inside the caller's transaction (transactional handlers)."""
        cursor.execute(self._sql["ack"].format(event_ids=int(event_id)), (self._claimant(held),))

    def fail(self, event_id: int, error: str, retry_in_seconds: float, dead: bool, *, held: bool) -> None:
        """Record a failed attempt; ``held``: of a claim_head batch, whose claim
        did not count the attempt."""
        params = (error[:MAX_ERROR_LENGTH], int(held), int(retry_in_seconds * 1000), int(dead), int(dead),
                  event_id, self._claimant(held))
        self.db.run(lambda cursor: self._execute(cursor, self._sql["fail"], params))

    def release(self, event_ids: Iterable[int]) -> int:
        """Give back claimed events that were never started."""
        ids = _sorted_ids(event_ids)
        return self.db.run(lambda cursor: self._settle(cursor, "release", ids, self.owner)) if ids else 0

    def extend(self, event_ids: Iterable[int]) -> int:
        """Renew the leases of events still being handled and of the
        subscriptions whose batch we hold (the heartbeat)."""

        ids = _sorted_ids(event_ids)

        def work(cursor: Cursor) -> int:
            renewed = self._settle(cursor, "extend", ids, self.lease_ms, self.owner)
            cursor.execute(self._sql["extend_leases"], (self.lease_ms, self.owner))
            return renewed + cursor.affected_rows

        return self.db.run(work)

    def _settle(self, cursor: Cursor, name: str, ids: list[int], *params: object) -> int:
        """Run statement ``name`` over ``ids``, one statement per SETTLE_CHUNK
        ids. Not kept prepared: the text changes with the ids."""
        done = 0
        for start in range(0, len(ids), SETTLE_CHUNK):
            chunk = ", ".join(map(str, ids[start : start + SETTLE_CHUNK]))
            cursor.execute(self._sql[name].format(event_ids=chunk), params)
            done += cursor.affected_rows
        return done


def _sorted_ids(event_ids: Iterable[int]) -> list[int]:
    return sorted(int(event_id) for event_id in event_ids)
