"""Claim floors: where each subscription's live events begin.

While a transaction stays open (a report, an idle tool session), the
engine keeps every event deleted since it started in the claim index as
garbage, and a walk from a subscription's first entry passes all of it:
after 100,000 handled events ordered claims ran at a quarter of their rate
(W14). A floor is an event id below which a subscription has no live
event and never will have one; claims and probes walk from there.

The first live event we see is not enough: events are numbered when they
are logged, not when they commit, so a transaction still open may commit
events numbered below it later. Every ``EVERY`` seconds while claims
walk (longer where a look would take more than LOOK_SHARE of the time) a
look reads the last id handed out, then MON$: the active transactions,
and whether each has written a row yet. A captured change writes the
application's row before its trigger numbers the event, so a transaction
that had not written at one look numbers its events above the id read
then, and so does one that started after it; the bound takes the id of
the look before (Bounds.after says why). The floor is then the lower of
each subscription's first live event and that bound over the
transactions that have written (a transaction left open that only read
holds nothing back).

Looks run on a thread and an attachment of their own (``keep_raising``):
on the embedded engine a MON$ query can wait in the engine for minutes
after another process of the database was killed (tests/SOAK-NOTES.md,
finding 8), and claims must not wait with it. A floor stays true however
late the next look comes, so claims go on from the last ones.

Events given back from dead (``subs retry``, the console) keep their old
ids: they post REQUEUED_EVENT, on which the worker calls ``reset``. What
no rule foresees (a transaction in limbo, an event revived by hand) waits
at most WALK_ALL_EVERY: then the refresh walks from each subscription's
first entry. Without the MON$ rights to see every transaction (SYSDBA,
the owner, RDB$ADMIN, or on Firebird 4 and later the system privilege
MONITOR_ANY_ATTACHMENT) or the right to read the event ids' generator
(`subs grant`) there are no floors, and walks start at the first entry as
before.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from firebird.driver import Cursor, DatabaseError

from subscriptions.db import sql
from subscriptions.db.connection import Database, read_only_tpb
from subscriptions.db.errors import NO_PRIVILEGE, codes, first_line
from subscriptions.errors import SubsError

from .serving import sees_every_attachment

log = logging.getLogger("subs.worker")

EVERY = 0.5  # seconds between two refreshes, at least
# At most this share of the time goes to looks: a MON$ snapshot takes
# longer the more attachments the database has.
LOOK_SHARE = 0.02
WALK_ALL_EVERY = 60.0  # seconds between two refreshes that walk from the first entry
CHUNK = 300  # subscriptions per first_live statement: its two lists' VARCHAR(8000)


@dataclass(frozen=True)
class Look:
    """One look at the database: the last event id handed out, then (in one
    monitoring snapshot) the next transaction's id and every other active
    transaction with whether it has written a row."""

    last_id: int
    next_transaction: int
    wrote: dict[int, bool]


class Bounds:
    """From one look to the next, the id above which every event that may
    still commit later is numbered."""

    def __init__(self) -> None:
        self._previous: Look | None = None
        # Per active transaction that had not written at a look: the id read
        # before an earlier look, which its events are numbered above.
        self._numbered_above: dict[int, int] = {}

    def after(self, look: Look) -> int:
        """The bound after ``look``. It lags one look behind the ids handed
        out: an insert that took its id just before last_id was read may
        show its row in the statistics only after the snapshot."""
        previous = self._previous
        if previous is None:  # nothing is known of what was numbered before
            self._previous = look
            return 0
        bound = previous.last_id
        numbered_above: dict[int, int] = {}
        for transaction, wrote in look.wrote.items():
            if not wrote:
                numbered_above[transaction] = previous.last_id
                continue
            if transaction in self._numbered_above:
                since = self._numbered_above[transaction]
            elif transaction >= previous.next_transaction:
                since = previous.last_id  # started after the previous look
            else:
                since = 0  # it wrote before we first saw it
            numbered_above[transaction] = since
            bound = min(bound, since)
        self._previous, self._numbered_above = look, numbered_above
        return bound


class Floors:
    """The floors of the subscriptions one claimer walks: read by its
    claims, raised by looks on another thread (``keep_raising``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._floors: dict[int, int] = {}
        self._known: set[int] = set()
        self._resets = 0  # a look that began before a reset leaves the floors alone
        self.wanted = threading.Event()  # a claim walked from the floors since the last look
        self._bounds = Bounds()
        self._generator: str | None = None
        self.usable: bool | None = None  # this user may see every transaction; None: not asked yet
        self._refreshed_at = -math.inf
        self._pause = EVERY
        self._walked_all_at = -math.inf

    def after(self, sub_ids: Iterable[int]) -> int:
        """The id after which walks over ``sub_ids`` start: one below the
        lowest of their floors (0: from the first entry)."""
        lowest = None
        with self._lock:
            for sub_id in sub_ids:
                self._known.add(sub_id)
                floor = self._floors.get(sub_id, 0)
                lowest = floor if lowest is None else min(lowest, floor)
        self.wanted.set()
        return max((lowest or 0) - 1, 0)

    def each_after(self, sub_ids: Sequence[int]) -> list[int]:
        """``after`` of each of ``sub_ids``."""
        return [self.after((sub_id,)) for sub_id in sub_ids]

    def reset(self) -> None:
        """Walk from the first entries again: events came back from dead
        with ids below the floors, or a look may have been missed."""
        with self._lock:
            self._floors.clear()
            self._resets += 1
            self._walked_all_at = -math.inf

    def until_due(self) -> float:
        """Seconds until the next look may start."""
        return max(self._refreshed_at + self._pause - time.monotonic(), 0.0)

    def ask_rights(self, cursor: Cursor) -> None:
        """Whether MON$ shows us every transaction (``usable``), in a
        transaction of its own: its MON$ read takes a snapshot."""
        self.usable = sees_every_attachment(cursor)
        if not self.usable:
            self.give_up(
                "this user may not see every transaction in MON$ (SYSDBA, the database's owner and RDB$ADMIN can, "
                "and on Firebird 4 and later a role with MONITOR_ANY_ATTACHMENT)"
            )

    def give_up(self, why: str) -> None:
        """No floors on this attachment, for ``why``."""
        self.usable = False
        with self._lock:
            self._floors.clear()
        log.info(
            "%s: claims walk each subscription's events from its first, and are slower behind a transaction left open",
            why,
        )

    def refresh(self, cursor: Cursor) -> None:
        """Look at the database and raise the floors, in ``cursor``'s
        transaction: READ COMMITTED and new, so that its first MON$ read
        takes the snapshot after last_id was read."""
        self._refreshed_at = time.monotonic()
        try:
            self._look(cursor)
        finally:
            self._pause = max(EVERY, (time.monotonic() - self._refreshed_at) / LOOK_SHARE)

    def _look(self, cursor: Cursor) -> None:
        statements = sql.load("floors")
        with self._lock:
            resets, sub_ids, floors = self._resets, sorted(self._known), dict(self._floors)
            walk_all = time.monotonic() - self._walked_all_at >= WALK_ALL_EVERY
        if not self.usable or not sub_ids:
            return
        if self._generator is None:
            cursor.execute(statements["id_generator"])
            self._generator = str(cursor.fetchone()[0])
        cursor.execute(sql.with_identifiers(statements["last_id"], generator=self._generator))
        last_id = int(cursor.fetchone()[0])
        cursor.execute(statements["next_transaction"])
        next_transaction = int(cursor.fetchone()[0])
        cursor.execute(statements["transactions"])
        wrote = {int(transaction): bool(written) for transaction, written in cursor.fetchall()}
        bound = self._bounds.after(Look(last_id, next_transaction, wrote))
        raised: dict[int, int] = {}
        if bound:
            for start in range(0, len(sub_ids), CHUNK):
                chunk = sub_ids[start : start + CHUNK]
                froms = [0 if walk_all else floors.get(sub_id, 0) for sub_id in chunk]
                cursor.execute(statements["first_live"], (sql.id_list(chunk), sql.id_list(froms)))
                for sub_id, first_live in cursor.fetchall():
                    raised[sub_id] = bound + 1 if first_live is None else min(int(first_live), bound + 1)
        with self._lock:
            if resets != self._resets:
                return  # what this look walked past may have come back since
            if not bound:
                # Nothing is known of some transaction's events: one that wrote
                # before our first look, or (short of a MON$ fault) one that had
                # not shown at the look before.
                if self._floors:
                    log.debug("claim floors cleared: a transaction wrote before the looks could tell which ids it took")
                self._floors.clear()
                return
            if walk_all:
                self._walked_all_at = self._refreshed_at
            moved = []
            for sub_id, floor in raised.items():
                # A floor stays true until reset (nothing is numbered below
                # it), unless a walk from the first entry finds otherwise.
                new = floor if walk_all else max(floor, self._floors.get(sub_id, 0))
                if new != self._floors.get(sub_id):
                    moved.append(f"subscription {sub_id} from event {new}")
                self._floors[sub_id] = new
        if moved:
            log.debug("claim floors: %s", ", ".join(moved))


def look(db: Database, floors: Floors) -> None:
    """One look on ``db`` at the database, asking first whether this user
    may see every transaction. A look refused the generator (`subs grant`
    gives it) gives the floors up; claims go on without them."""
    if floors.usable is None:
        db.run(floors.ask_rights, tpb=read_only_tpb())
    if not floors.usable:
        return
    try:
        db.run(floors.refresh, tpb=read_only_tpb())
    except DatabaseError as exc:
        if NO_PRIVILEGE not in codes(exc):
            raise
        floors.give_up(f"{first_line(exc)} (`subs grant` gives it)")


def keep_raising(floors: Floors, attach: Callable[[], Database], stop: threading.Event) -> None:
    """Floors thread: look every EVERY seconds or more while claims walk
    from the floors, on an attachment of its own; ends when ``stop`` is set
    or the floors are given up. A failed look is warned of once, then tried
    again on a new attachment: the floors stay as they were meanwhile."""
    db: Database | None = None
    failing = False
    while not stop.is_set() and floors.usable is not False:
        if not floors.wanted.wait(EVERY) or stop.wait(floors.until_due()):
            continue
        floors.wanted.clear()
        try:
            db = db or attach()
            look(db, floors)
            failing = False
        except (DatabaseError, SubsError) as exc:
            if not failing:
                log.warning("could not look for the claim floors: %s; trying again", first_line(exc))
            failing = True
            _close(db)
            db = None
    _close(db)


def _close(db: Database | None) -> None:
    """Close ``db``, if any, whatever state its attachment is in."""
    if db is not None:
        with contextlib.suppress(DatabaseError):
            db.close()
