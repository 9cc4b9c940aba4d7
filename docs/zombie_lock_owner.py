"""Reproduces an embedded-engine behaviour without subs (docs/FIREBIRD-BUGS.md,
10): a SIGKILLed process that its parent has not reaped yet (a zombie) still
counts as a live lock owner, because the engine asks ``kill(pid, 0)``, which
succeeds on a zombie. Another process's statement waits for the zombie's
locks until the zombie is reaped and the lock manager next looks
(``DeadlockTimeout``, 10 s).

    .venv/bin/python docs/zombie_lock_owner.py /tmp/zombie.fdb

It creates the database (delete it afterwards). Each round starts a busy
process (one thread updates rows, one reads MON$ATTACHMENTS), SIGKILLs it,
and times a fresh process's MON$ query: once with the killed process reaped
at once, once with it left a zombie for ``--zombie-seconds``. Exit status 1
when the zombie made the query wait longer than the reaped process did.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import threading
import time

from subscriptions.db.connection import open_connection
from subscriptions.db.settings import ConnectionSettings

MONITORING = "SELECT COUNT(*) FROM MON$ATTACHMENTS"


def busy(settings: ConnectionSettings) -> None:
    """Update rows in one thread and read the monitoring tables in another, for ever."""

    def update() -> None:
        with open_connection(settings) as connection:
            cursor = connection.cursor()
            while True:
                cursor.execute("UPDATE T SET N = N + 1 WHERE ID = ?", (random.randint(1, 20),))
                connection.commit()

    def monitor() -> None:
        with open_connection(settings) as connection:
            cursor = connection.cursor()
            while True:
                cursor.execute(MONITORING)
                cursor.fetchall()
                connection.commit()

    for work in (update, monitor):
        threading.Thread(target=work, daemon=True).start()
    time.sleep(0.5)
    print("busy", flush=True)
    time.sleep(3600)


def query(settings: ConnectionSettings) -> None:
    with open_connection(settings) as connection:
        connection.cursor().execute(MONITORING).fetchall()


def round_trip(dsn: str, zombie_seconds: float) -> float:
    """Seconds a fresh process's MON$ query took after a busy process's SIGKILL."""
    holder = subprocess.Popen([sys.executable, __file__, dsn, "--busy"], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None
    holder.stdout.readline()
    os.kill(holder.pid, signal.SIGKILL)
    if not zombie_seconds:
        holder.wait()
    started = time.monotonic()
    fresh = subprocess.Popen([sys.executable, __file__, dsn, "--query"])
    if zombie_seconds:
        time.sleep(zombie_seconds)
        holder.wait()
    fresh.wait()
    return time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dsn", help="a new embedded database: a path")
    parser.add_argument("--zombie-seconds", type=float, default=3.0)
    parser.add_argument("--busy", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--query", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    settings = ConnectionSettings(args.dsn, None, None)
    if args.busy:
        busy(settings)
        return 0
    if args.query:
        query(settings)
        return 0

    with open_connection(settings, create=True) as connection:
        cursor = connection.cursor()
        cursor.execute("CREATE TABLE T (ID INTEGER NOT NULL PRIMARY KEY, N INTEGER)")
        connection.commit()
        cursor.executemany("INSERT INTO T VALUES (?, 0)", [(key,) for key in range(1, 21)])
        connection.commit()
        print(connection.info.firebird_version)
    reaped = round_trip(args.dsn, 0)
    zombie = round_trip(args.dsn, args.zombie_seconds)
    print(f"reaped at once: the query took {reaped:.1f} s")
    print(f"left a zombie for {args.zombie_seconds:g} s: the query took {zombie:.1f} s")
    return 1 if zombie > reaped + args.zombie_seconds / 2 else 0


if __name__ == "__main__":
    sys.exit(main())
