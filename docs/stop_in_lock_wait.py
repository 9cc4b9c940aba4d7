"""Reproduces a client-library behaviour without subs's own stop handling
(docs/FIREBIRD-BUGS.md, 13): the library's shutdown on SIGINT or SIGTERM
sometimes never comes, and a statement waiting for a lock waits on.
The library takes both signals over at a process's first attach and, on
either, shuts its engine down from a thread of its own, which ends such a
wait at once.

    PYTHONPATH=.engines/fb4 .venv/bin/python docs/stop_in_lock_wait.py /tmp/wait.fdb --runs 150

It creates the database (delete it afterwards) and holds a row. Each run
starts a process that sets SIGINT and SIGTERM handlers that do nothing (so
that only the library acts on the signal), attaches and updates that row,
with a lock wait of 10 s; 0.5 s later the parent sends the signal. Prints
how many waits the signal ended within 3 s and how many it did not, and
exits 1 when any did not. Seen only while other embedded processes started,
were stopped and killed beside it (docs/FIREBIRD-BUGS.md, 13).
"""

from __future__ import annotations

import argparse
import collections
import signal
import subprocess
import sys
import time

from subscriptions.db.connection import open_connection
from subscriptions.db.settings import ConnectionSettings

CHILD = """
import signal, sys, time
signal.signal(signal.SIGINT, lambda *_: None)
signal.signal(signal.SIGTERM, lambda *_: None)
from subscriptions.db.connection import open_connection, waiting_tpb
from subscriptions.db.settings import ConnectionSettings
attachment = open_connection(ConnectionSettings(sys.argv[1]))
attachment.begin(waiting_tpb(10))
print("waiting", flush=True)
began = time.monotonic()
try:
    attachment.cursor().execute("UPDATE T SET V = V + 1 WHERE ID = 1")
except Exception:
    pass
print(time.monotonic() - began, flush=True)
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("database", help="a database file to create")
    parser.add_argument("--runs", type=int, default=150)
    parser.add_argument("--signal", choices=["INT", "TERM"], default="INT")
    arguments = parser.parse_args()
    stop = signal.Signals[f"SIG{arguments.signal}"]
    created = open_connection(ConnectionSettings(arguments.database), create=True)
    created.execute_immediate("CREATE TABLE T (ID INTEGER PRIMARY KEY, V INTEGER)")
    created.commit()
    created.begin()
    created.cursor().execute("INSERT INTO T VALUES (1, 0)")
    created.commit()
    created.begin()
    created.cursor().execute("UPDATE T SET V = V + 1 WHERE ID = 1")
    ended: collections.Counter[str] = collections.Counter()
    for _ in range(arguments.runs):
        command = [sys.executable, "-c", CHILD, arguments.database]
        child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert child.stdout is not None and child.stderr is not None
        child.stdout.readline()
        time.sleep(0.5)
        child.send_signal(stop)
        waited = child.stdout.readline()
        if not waited:  # stderr only then: after a shutdown the driver's objects print tracebacks at exit
            raise SystemExit(f"a run failed (exit {child.wait()}):\n{child.stderr.read()}")
        child.wait()
        ended["ended" if float(waited) < 3 else "waited on"] += 1
    created.rollback()
    created.close()
    print(dict(ended))
    return 1 if ended["waited on"] else 0


if __name__ == "__main__":
    sys.exit(main())
