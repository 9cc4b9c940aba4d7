"""Watching the database's oldest active transaction.

While a transaction stays open (a report, a tool's session, an application
that never commits), the engine cannot collect what later transactions
deleted: every event handled since it started stays in EVENT_LOG as
garbage, and the walks of the log that cannot start past it (counts, and
claims where no floor may rise: floors.py) pass over more of it with every
event handled. Before the floors, an ordered drain on embedded Firebird 5
ran at a quarter of its rate once 100,000 events had been handled behind
an idle transaction (benchmarks, W14), and nothing said why. The supervisor looks every
stats.BACKLOG_INTERVAL; once the same transaction has been the oldest active
one for OLD_AFTER seconds, with BEHIND transactions or more started since
(what it keeps grows with them), it warns, again each time that doubled,
and says when it ended. The numbers come from the database's header (no
MON$ query, no rights needed); MON$TRANSACTIONS names its attachment. The
embedded engine's header can lag: in a fresh database another process saw
the oldest active transaction as 1 until about 100 had started, which
BEHIND keeps from being reported.
"""

from __future__ import annotations

import logging
import time

from subscriptions.db.connection import Database

log = logging.getLogger("subs.listener")

OLD_AFTER = 600.0
BEHIND = 1_000


class OldestTransactionWatch:
    """Since when one transaction has been the oldest active one."""

    def __init__(self) -> None:
        self.after = OLD_AFTER
        self._oldest: int | None = None
        self._behind = 0  # transactions started since the oldest active one
        self._since = 0.0
        self._report_at = self.after  # more once reported: each report doubles it

    def observe(self, db: Database) -> None:
        """Look at the oldest active transaction now; warn or say it ended."""
        oldest = db.connection.info.oat
        self._behind = db.connection.info.next_transaction - oldest
        now = time.monotonic()
        if oldest != self._oldest:
            if self._report_at > self.after:
                log.info(
                    "transaction %s, the oldest active one for %s, ended: EVENT_LOG's garbage can be collected",
                    self._oldest,
                    _minutes(now - self._since),
                )
            self._oldest, self._since, self._report_at = oldest, now, self.after
            return
        held = now - self._since
        if held >= self._report_at and self._behind >= BEHIND:
            self._report_at = 2 * held
            log.warning(
                "transaction %s has been the oldest active one for %s or more, %s transactions ago: while it stays "
                "open, the events handled since it started stay in EVENT_LOG as garbage the engine cannot collect, "
                "and the log grows with them; commit or roll it back (MON$TRANSACTIONS names its attachment: "
                "MON$TRANSACTION_ID = %s)",
                oldest,
                _minutes(held),
                f"{self._behind:,}",
                oldest,
            )

    def held_for(self) -> float:
        """Seconds the oldest active transaction has been it, as far as seen;
        0 while fewer than BEHIND transactions started since."""
        if self._oldest is None or self._behind < BEHIND:
            return 0.0
        return time.monotonic() - self._since


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 60 else f"{seconds:.0f} s"
