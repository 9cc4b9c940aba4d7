"""One soak producer process: inserts, updates and deletes rows of the
subscribed tables in short transactions, rolls some back on purpose, and rides
through server restarts.

Every change also inserts a row into SOAK_CHANGES *in the same transaction*,
so the journal is committed exactly when the change is. That matters when a
commit fails with a network error (the server restart): the outcome is then
unknown to us, and a side file written after the commit would have to guess;
the journal simply says. The side file (JSON lines, one per transaction) still
records what this process *believes*: committed with the time the commit
returned (the ordered-mode check needs it), rolled back (those changes must
produce no event), or unknown and then resolved by reading the journal.

Each producer owns its own key range and change numbers
(``producer * 10**9 + n``), so the checks can map every event to one change.

Run by tests/soak.py: ``python soak_producer.py DSN PRODUCER QUOTA DEADLINE RATE LOG SEED``.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from dataclasses import astuple, dataclass
from pathlib import Path

from firebird.driver import DatabaseError

from subscriptions.db.connection import Database
from subscriptions.db.errors import is_conflict
from subscriptions.db.settings import ConnectionSettings
from subscriptions.errors import SubsError

TABLES = ("SOAK_A", "SOAK_B")
KEYS_PER_PRODUCER = 1_000_000
CHANGES_PER_PRODUCER = 10**9
ROLLBACK_SHARE = 0.1
LIVE_ROWS = 150  # per table: inserts stop above it, so updates and deletes keep coming


@dataclass(frozen=True)
class Change:
    no: int
    table: str
    action: str
    row: int
    prev: int | None  # CHANGE_NO of the row before an update or delete


class Producer:
    def __init__(
        self,
        settings: ConnectionSettings,
        producer: int,
        quota: int,
        deadline: float,
        rate: float,
        log: Path,
        seed: int,
    ) -> None:
        self.settings = settings
        self.producer = producer
        self.quota = quota
        self.deadline = deadline
        self.rate = rate
        self.log = log.open("a")
        self.rng = random.Random(seed * 1000 + producer)
        self.next_no = producer * CHANGES_PER_PRODUCER + 1
        self.next_row = producer * KEYS_PER_PRODUCER + 1
        self.rows: dict[tuple[str, int], int] = {}  # committed rows: (table, id) -> CHANGE_NO
        self.txn = 0
        self.committed = self.rolled_back = self.unknown = 0
        self.db: Database | None = None

    # -- connection -------------------------------------------------------------------

    def connect(self) -> None:
        """(Re)attach, retrying while the server is down, and reload our rows:
        after a lost connection our picture of them may be stale."""
        self.close()
        pause = 0.2
        while True:
            try:
                self.db = Database(self.settings)
                break
            except (DatabaseError, SubsError):
                if time.time() > self.deadline + 120:
                    raise
                time.sleep(pause)
                pause = min(pause * 2, 2.0)
        low = self.producer * KEYS_PER_PRODUCER
        with self.db.transaction() as cursor:
            self.rows = {}
            for table in TABLES:
                cursor.execute(
                    f"SELECT ID, CHANGE_NO FROM {table} WHERE ID BETWEEN ? AND ?", (low, low + KEYS_PER_PRODUCER - 1)
                )
                self.rows.update(((table, row), no) for row, no in cursor.fetchall())

    def close(self) -> None:
        if self.db is not None:
            try:
                self.db.close()
            except DatabaseError:
                pass
            self.db = None

    # -- one transaction --------------------------------------------------------------

    def plan(self) -> list[Change]:
        """One to four changes on our rows, valid against the committed state."""
        state = dict(self.rows)
        changes = []
        for _ in range(self.rng.randint(1, 4)):
            table = self.rng.choice(TABLES)
            live = [row for (t, row) in state if t == table]
            roll = self.rng.random()
            no = self.next_no
            self.next_no += 1
            if not live or (roll < 0.45 and len(live) < LIVE_ROWS):
                row, action, prev = self.next_row, "I", None
                self.next_row += 1
                state[(table, row)] = no
            else:
                row = self.rng.choice(live)
                prev = state[(table, row)]
                action = "U" if roll < 0.8 else "D"
                if action == "U":
                    state[(table, row)] = no
                else:
                    del state[(table, row)]
            changes.append(Change(no, table, action, row, prev))
        return changes

    def execute(self, cursor, change: Change) -> None:
        note = f"p{self.producer} t{self.txn}"
        if change.action == "I":
            cursor.execute(
                f"INSERT INTO {change.table} (ID, CHANGE_NO, NOTE) VALUES (?, ?, ?)", (change.row, change.no, note)
            )
        elif change.action == "U":
            cursor.execute(
                f"UPDATE {change.table} SET CHANGE_NO = ?, NOTE = ? WHERE ID = ?", (change.no, note, change.row)
            )
        else:
            cursor.execute(f"DELETE FROM {change.table} WHERE ID = ?", (change.row,))
        if change.action != "I" and cursor.affected_rows != 1:
            raise AssertionError(f"producer {self.producer}: {change} touched {cursor.affected_rows} rows")
        cursor.execute(
            "INSERT INTO SOAK_CHANGES (CHANGE_NO, TBL, ACT, ROW_ID, PREV_NO, PRODUCER, TXN) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (change.no, change.table, change.action, change.row, change.prev, self.producer, self.txn),
        )

    def transaction(self) -> int:
        """Run one transaction; returns the number of changes committed."""
        self.txn += 1
        changes = self.plan()
        deliberate = self.rng.random() < ROLLBACK_SHARE
        connection = self.db.connection
        stage = "work"
        try:
            connection.begin()
            with connection.cursor() as cursor:
                for change in changes:
                    self.execute(cursor, change)
            if deliberate:
                stage = "rollback"
                connection.rollback()
                self.record("r", changes, why="deliberate")
                return 0
            stage = "commit"
            connection.commit()
            committed_at = time.time()
        except (DatabaseError, SubsError) as exc:
            if stage == "commit":
                return self.resolve(changes, exc)
            # Never committed: whatever the error, these changes are gone.
            conflict = isinstance(exc, DatabaseError) and is_conflict(exc)
            self.record("r", changes, why="deliberate" if deliberate else ("conflict" if conflict else "error"))
            if conflict:
                try:
                    connection.rollback()
                    return 0
                except DatabaseError:
                    pass
            self.connect()
            return 0
        self.apply(changes)
        self.record("c", changes, at=committed_at)
        return len(changes)

    def resolve(self, changes: list[Change], exc: BaseException) -> int:
        """The commit failed: did it happen? Only the journal knows."""
        self.unknown += 1
        self.connect()  # reloads our rows too
        with self.db.transaction() as cursor:
            cursor.execute("SELECT COUNT(*) FROM SOAK_CHANGES WHERE CHANGE_NO = ?", (changes[0].no,))
            happened = cursor.fetchone()[0] == 1
        self.record("c" if happened else "r", changes, why=f"unknown: {str(exc).splitlines()[0][:80]}")
        return len(changes) if happened else 0

    def apply(self, changes: list[Change]) -> None:
        for change in changes:
            if change.action == "D":
                del self.rows[(change.table, change.row)]
            else:
                self.rows[(change.table, change.row)] = change.no

    def record(self, outcome: str, changes: list[Change], *, at: float | None = None, why: str = "") -> None:
        if outcome == "c":
            self.committed += len(changes)
        else:
            self.rolled_back += len(changes)
        line = {
            "p": self.producer,
            "n": self.txn,
            "o": outcome,
            "t": at,
            "why": why,
            "ch": [astuple(change) for change in changes],
        }
        self.log.write(json.dumps(line) + "\n")
        self.log.flush()

    # -- the loop ---------------------------------------------------------------------

    def run(self) -> None:
        self.connect()
        started = time.time()
        while self.committed < self.quota and time.time() < self.deadline:
            self.transaction()
            if self.rate:
                pause = started + self.committed / self.rate - time.time()
                if pause > 0:
                    time.sleep(min(pause, max(self.deadline - time.time(), 0)))
        self.close()
        self.log.close()
        print(
            json.dumps(
                {
                    "producer": self.producer,
                    "committed": self.committed,
                    "rolled_back": self.rolled_back,
                    "unknown": self.unknown,
                    "txns": self.txn,
                }
            )
        )


def main(argv: list[str]) -> None:
    dsn, producer, quota, deadline, rate, log, seed = argv
    settings = ConnectionSettings(dsn, os.environ.get("ISC_USER"), os.environ.get("ISC_PASSWORD"))
    Producer(settings, int(producer), int(quota), float(deadline), float(rate), Path(log), int(seed)).run()


if __name__ == "__main__":
    main(sys.argv[1:])
