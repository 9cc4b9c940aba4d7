"""Reproduces a Firebird race without subs (docs/FIREBIRD-BUGS.md, 1): a
transaction adds a column and makes a trigger read it; an attachment made
while that transaction commits can load the new trigger with the table's old
shape, and its INSERT, which does not name the column, fails with "column C<n>
is not defined in table T".

    .venv/bin/python docs/add_column_race.py /tmp/race.fdb            # embedded
    .venv/bin/python docs/add_column_race.py 127.0.0.1:/var/lib/firebird/race.fdb \\
        --user SYSDBA --password-env ISC_PASSWORD                      # a server

It creates the database (delete it afterwards), runs two writer processes that
attach, insert one row and detach in a loop, and commits ROUNDS migrations of
ALTER TABLE T ADD C<n> plus a trigger reading NEW.C<n>, 0.3 s apart. It prints
each writer's inserts and failures; exit status 1 when an insert failed.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time
from collections import Counter
from multiprocessing.synchronize import Event

from firebird.driver import Connection

from subscriptions.db.connection import open_connection
from subscriptions.db.settings import ConnectionSettings


def _attach(settings: ConnectionSettings, *, create: bool = False) -> Connection:
    return open_connection(settings, create=create)


def _writer(settings: ConnectionSettings, stop: Event, results: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    """Inserts until told to stop, or until the main process is gone."""
    parent = os.getppid()
    inserted = 0
    failures: Counter[str] = Counter()
    while not stop.is_set() and os.getppid() == parent:
        try:
            with _attach(settings) as connection:
                connection.cursor().execute("INSERT INTO T (ID) VALUES (NEXT VALUE FOR T_ID)")
                connection.commit()
            inserted += 1
        except Exception as exc:  # the race's error is a DatabaseError; count whatever comes
            failures[str(exc).splitlines()[-1]] += 1
    results.put((inserted, dict(failures)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dsn", help="a new database: a path (embedded) or host:path (server)")
    parser.add_argument("--user")
    parser.add_argument("--password-env", help="environment variable holding the password")
    parser.add_argument("--rounds", type=int, default=100)
    args = parser.parse_args()
    password = os.environ[args.password_env] if args.password_env else None
    settings = ConnectionSettings(args.dsn, args.user, password)

    with _attach(settings, create=True) as connection:
        cursor = connection.cursor()
        for statement in (
            "CREATE TABLE T (ID BIGINT NOT NULL PRIMARY KEY)",
            "CREATE SEQUENCE T_ID",
            "CREATE TABLE T_SEEN (ID BIGINT)",
            "CREATE TRIGGER T_COPY FOR T AFTER INSERT AS BEGIN INSERT INTO T_SEEN VALUES (NEW.ID); END",
        ):
            cursor.execute(statement)
            connection.commit()

    stop = multiprocessing.Event()
    results: multiprocessing.Queue = multiprocessing.Queue()  # type: ignore[type-arg]
    writers = [multiprocessing.Process(target=_writer, args=(settings, stop, results), daemon=True) for _ in range(2)]
    for writer in writers:
        writer.start()
    time.sleep(2)
    with _attach(settings) as connection:
        cursor = connection.cursor()
        for n in range(1, args.rounds + 1):
            cursor.execute(f"ALTER TABLE T ADD C{n} INTEGER")
            cursor.execute(
                "CREATE OR ALTER TRIGGER T_COPY FOR T AFTER INSERT AS DECLARE seen INTEGER; "
                f"BEGIN seen = NEW.C{n}; INSERT INTO T_SEEN VALUES (NEW.ID); END"
            )
            connection.commit()
            time.sleep(0.3)
        print(f"{connection.info.firebird_version}, {args.rounds} migrations")
    time.sleep(1)
    stop.set()
    failed = 0
    for number, writer in enumerate(writers, 1):
        inserted, failures = results.get()
        writer.join()
        failed += sum(failures.values())
        print(f"writer {number}: {inserted} inserts, failures: {failures or 'none'}")
    return 1 if failed else 0


if __name__ == "__main__":
    multiprocessing.set_start_method("spawn")
    sys.exit(main())
