"""Reproduces a client-library behaviour without subs's own code paths
(docs/FIREBIRD-BUGS.md, 11): a SIGTERM that comes while a process attaches
for the first time can crash it (SIGSEGV in the attach) or leave it hung.
The library takes SIGINT and SIGTERM over at the first attach and, on
either, shuts its engine down from a thread of its own, under the attach.

    .venv/bin/python docs/sigterm_during_attach.py /tmp/sigterm.fdb --runs 150

It creates the database (delete it afterwards). Each run starts a process
that loads the engine, sets a SIGTERM handler that does nothing (so that
only the library acts on the signal) and attaches a few times; the parent
sends SIGTERM at a random moment of those attaches. Prints how the
processes ended (their exit status, -11 for SIGSEGV, "hung" for one that
had not ended 20 s later) and exits 1 when any crashed or hung.
"""

from __future__ import annotations

import argparse
import collections
import random
import subprocess
import sys
import time

from subscriptions.db.connection import open_connection
from subscriptions.db.settings import ConnectionSettings

CHILD = """
import signal, sys
signal.signal(signal.SIGTERM, lambda *_: None)
from subscriptions.db.connection import open_connection
from subscriptions.db.runtime import load
from subscriptions.db.settings import ConnectionSettings
load()
print("loaded", flush=True)
for _ in range(3):
    try:
        open_connection(ConnectionSettings(sys.argv[1])).close()
    except Exception:
        pass
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("database", help="a database file to create")
    parser.add_argument("--runs", type=int, default=150)
    arguments = parser.parse_args()
    open_connection(ConnectionSettings(arguments.database), create=True).close()
    ended: collections.Counter[str] = collections.Counter()
    for _ in range(arguments.runs):
        command = [sys.executable, "-c", CHILD, arguments.database]
        child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        assert child.stdout is not None
        child.stdout.readline()
        time.sleep(random.uniform(0.0, 0.15))
        child.terminate()
        try:
            ended[str(child.wait(20))] += 1
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
            ended["hung"] += 1
    print(dict(ended))
    return 1 if ended["-11"] or ended["hung"] else 0


if __name__ == "__main__":
    sys.exit(main())
