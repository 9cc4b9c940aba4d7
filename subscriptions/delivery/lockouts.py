"""Subscriptions (parallel mode) and streams (ordered mode) whose claims keep
meeting another transaction's lock.

A live claimer locks a subscription's EVENT_LEASE row for the milliseconds
its claim transaction lasts. Claims that meet that lock for LOCKED_OUT_AFTER
seconds in a row meet a transaction that is not finishing: the attachment of
a dead process that a Firebird server kept (tests/SOAK-NOTES.md, finding 6),
or a session left open after writing to subs's tables. Nothing else shows
it: their events just wait. Settling (acknowledgements, failures, lease
releases) waits for such a lock as long as it lasts, and the whole listener
with it (Dispatcher._settle). So the worker reports both (again after twice
the time, and so on), reaps (reaper.py), and says when they go through
again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Hashable, Iterable, Mapping

from firebird.driver import DatabaseError

from subscriptions.db.connection import Database
from subscriptions.db.errors import first_line

from . import reaper

log = logging.getLogger("subs.worker")

LOCKED_OUT_AFTER = 10.0
# The key of settlements; claims are keyed by subscription id (parallel) or
# stream, (table, tag) (ordered).
SETTLING = "settling"


class Lockouts:
    """Per subscription or stream, since when every claim of it met another
    transaction's lock."""

    def __init__(self, after: float = LOCKED_OUT_AFTER) -> None:
        self.after = after
        self._since: dict[Hashable, float] = {}
        self._report_at: dict[Hashable, float] = {}  # how long locked out when next reported
        self._ended: list[Hashable] = []  # reported lockouts that ended since ended() was last asked

    def observe(self, tried: Iterable[Hashable], locked: Collection[Hashable]) -> None:
        """One claim tried to lock what ``tried`` names, and those in
        ``locked`` were held by another transaction."""
        now = time.monotonic()
        for key in tried:
            if key in locked:
                self._since.setdefault(key, now)
                self._report_at.setdefault(key, self.after)
                continue
            self._since.pop(key, None)
            if self._report_at.pop(key, self.after) > self.after:
                self._ended.append(key)

    def overdue(self) -> dict[Hashable, float]:
        """What is due for a report, with how long it has been locked out:
        at ``after`` seconds, then each time that doubled."""
        now = time.monotonic()
        due = {}
        for key, since in self._since.items():
            locked_for = now - since
            if locked_for >= self._report_at[key]:
                due[key] = locked_for
                self._report_at[key] = 2 * locked_for
        return due

    def locked_for(self, key: Hashable) -> float:
        """Seconds ``key`` has been locked out (0 when it is not)."""
        since = self._since.get(key)
        return 0.0 if since is None else time.monotonic() - since

    def ended(self) -> list[Hashable]:
        """The reported lockouts that ended since the last call."""
        ended, self._ended = self._ended, []
        return ended


def report(lockouts: Lockouts, db: Database, targets: Mapping[int, object]) -> None:
    """Log what has been locked out for long, disconnecting this host's dead
    workers' attachments first (on ``db``), and what goes through again.
    ``targets``: the subscriptions served, by id (their ``str`` names them)."""
    for key in lockouts.ended():
        log.info("%s go through again", _describe(key, targets)[0])
    overdue = lockouts.overdue()
    if not overdue:
        return
    try:
        reaped = reaper.reap(db)
    except DatabaseError as exc:
        log.warning("could not look for dead workers' attachments: %s", first_line(exc))
        reaped = []
    if reaped:
        remedy = f"disconnected {len(reaped)} attachment(s) of dead workers"
    else:
        remedy = (
            "no dead worker of this host holds an attachment: end the transaction that holds it "
            "(MON$TRANSACTIONS lists the open ones)"
        )
    for key, seconds in overdue.items():
        what, waits = _describe(key, targets)
        log.warning(
            "%s met another transaction's lock for %.0fs: %s until that transaction ends; %s",
            what,
            seconds,
            waits,
            remedy,
        )


def _describe(key: Hashable, targets: Mapping[int, object]) -> tuple[str, str]:
    """What a key stands for, and what waits, for the log."""
    if key == SETTLING:
        return "settlements of handled and failed events", "this listener waits"
    if isinstance(key, int) and key in targets:
        return f"claims of {targets[key]}", "its events wait"
    if isinstance(key, tuple):
        return "claims of stream {} {}".format(*key), "its events wait"
    return f"claims of subscription {key}", "its events wait"
