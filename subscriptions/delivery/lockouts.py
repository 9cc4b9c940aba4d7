"""Subscriptions (parallel mode) and streams (ordered mode) whose claims keep
meeting another transaction's lock.

A live claimer locks a subscription's EVENT_LEASE row for the milliseconds
its claim transaction lasts. Claims that meet that lock for LOCKED_OUT_AFTER
seconds in a row meet a transaction that is not finishing: the attachment of
a dead process that a Firebird server kept (tests/SOAK-NOTES.md, finding 6),
or a session left open after writing to subs's tables. Nothing else shows
it: their events just wait. So the worker warns (again after
twice the time, and so on) and reaps (reaper.py), and says when claims go
through again.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Hashable, Iterable

LOCKED_OUT_AFTER = 10.0


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

    def ended(self) -> list[Hashable]:
        """The reported lockouts that ended since the last call."""
        ended, self._ended = self._ended, []
        return ended
