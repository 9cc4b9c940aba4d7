"""The database seam (db/connection.py): when its attachment is lost under
it, no crash, no traceback, and a clear error for whatever comes next; and
its attachments keep subs's time zone whatever their process's."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from firebird.driver import connect

from subscriptions.db import connection, runtime
from subscriptions.db.connection import Database

from conftest import Subs, credentials, events, execute, query

LOSE_AN_OPEN_RESULT_SET = """
import gc, os, sys
from subscriptions.db.connection import Database
from subscriptions.db.errors import is_connection_lost
from subscriptions.db.settings import ConnectionSettings

settings = ConnectionSettings(sys.argv[1], os.environ["ISC_USER"], os.environ["ISC_PASSWORD"] or None)
for _ in range(3):
    db = Database(settings)
    try:
        with db.transaction() as cursor:
            cursor.execute("SELECT RDB$RELATION_NAME FROM RDB$RELATIONS")
            cursor.fetchone()  # a result set left open, as a failing read leaves it
            with Database(settings) as killer, killer.transaction() as other:
                other.execute("DELETE FROM MON$ATTACHMENTS WHERE MON$ATTACHMENT_ID = ?", (db.connection.info.id,))
            cursor.fetchall()
    except Exception as exc:
        assert is_connection_lost(exc), exc
    else:
        raise AssertionError("the killed attachment went on reading")
    try:
        with db.transaction():
            pass
    except Exception as exc:
        assert is_connection_lost(exc), exc
    else:
        raise AssertionError("a lost attachment began a transaction")
    db.close()
    del db
    gc.collect()
print("done")
"""


def run_script(script: str, settings) -> tuple[int, str, str]:
    """``script`` run with the database's path as its argument, in a process
    of its own (a crash there is a failure, not the end of the tests):
    its exit code, output and errors."""
    run = subprocess.run(
        [sys.executable, "-c", script, settings.dsn],
        env={**os.environ, **credentials(settings)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    return run.returncode, run.stdout, run.stderr


def test_a_lost_attachment_with_an_open_result_set_leaves_no_crash_behind(settings):
    """firebird-driver freed a lost attachment while a cursor still held its
    result set: on the embedded engines the garbage collector's close of the
    cursor then died of SIGSEGV (FIREBIRD-BUGS 9; a listener's supervisor
    did when its queue-metrics read was cut off). The seam leaves such an
    attachment alone, and raises what lost it for whatever comes next."""
    assert run_script(LOSE_AN_OPEN_RESULT_SET, settings) == (0, "done\n", "")


LOSE_IT_INSIDE_EXECUTE_STATEMENT = """
import os, sys, threading, time
from subscriptions.db.connection import Database
from subscriptions.db.errors import first_line, is_connection_lost
from subscriptions.db.settings import ConnectionSettings

settings = ConnectionSettings(sys.argv[1], os.environ["ISC_USER"], os.environ["ISC_PASSWORD"] or None)


def kill(victim):
    time.sleep(0.3)
    with Database(settings) as killer, killer.transaction() as other:
        other.execute("DELETE FROM MON$ATTACHMENTS WHERE MON$ATTACHMENT_ID = ?", (victim,))


for _ in range(30):  # the kill lands inside the inner statement about every other time
    db = Database(settings)
    threading.Thread(target=kill, args=(db.connection.info.id,)).start()
    try:
        with db.transaction() as cursor:
            cursor.execute(
                "EXECUTE BLOCK RETURNS (X INTEGER) AS BEGIN "
                "WHILE (1 = 1) DO EXECUTE STATEMENT 'SELECT 1 FROM RDB$DATABASE' INTO :X; SUSPEND; END"
            )
            cursor.fetchone()
    except Exception as exc:
        assert is_connection_lost(exc), first_line(exc)
        if first_line(exc).startswith("Execute statement error"):
            print("lost inside EXECUTE STATEMENT")
            break
    finally:
        db.close()
"""


def test_a_connection_lost_inside_execute_statement_is_a_lost_connection(settings):
    """A statement run through EXECUTE STATEMENT (each attachment's time
    zone set-up, sql/engine.sql) that loses its attachment fails with the
    engine's "Execute statement error", which gives "connection shutdown"
    in its text only: a listener stopped while it attached said `Error:
    database error: ...` instead of that it stopped."""
    assert run_script(LOSE_IT_INSIDE_EXECUTE_STATEMENT, settings) == (0, "lost inside EXECUTE STATEMENT\n", "")


def test_subs_in_a_process_of_another_time_zone_keeps_subs_time(settings, engine):
    """An embedded engine gives a session its process's time zone (TZ), and
    every LOCALTIMESTAMP of subs's SQL is that zone's wall time. Until
    version 22 `subs purge --older-than 1h` from a shell in Asia/Tokyo
    deleted events that had died a moment ago in a database whose events
    are stamped in UTC, and its `subs status` aged fresh events 9 hours
    (leases and retry times were misread the same way)."""
    if engine == "fb3":
        pytest.skip("Firebird 3 has no session time zones")
    execute(settings, "CREATE TABLE PLACES (ID INTEGER NOT NULL PRIMARY KEY, N INTEGER)")
    Subs(settings).ok("add", "places", "I", "audit")
    Subs(settings).ok("add", "places", "I", "strict", "--when", "1 / NEW.n > 0")
    execute(settings, "INSERT INTO PLACES VALUES (1, 0)")
    [(subs_zone,)] = query(settings, "SELECT EVENT_TIME_ZONE() FROM RDB$DATABASE")
    zone = "America/New_York" if subs_zone == "Asia/Tokyo" else "Asia/Tokyo"

    def subs_in_zone(*args: str) -> str:
        run = subprocess.run(
            [sys.executable, "-m", "subscriptions", "-d", settings.dsn, *args],
            env={**os.environ, **credentials(settings), "TZ": zone},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert run.returncode == 0, run.stderr
        return run.stdout

    audit, strict = json.loads(subs_in_zone("status", "--json"))
    assert 0 <= audit["oldest_pending_age"] < 60 and strict["dead"] == 1
    assert subs_in_zone("purge", "--older-than", "1h").startswith("deleted 0 dead event(s)")
    assert query(settings, "SELECT COUNT(*) FROM EVENT_LOG WHERE DEAD") == [(1,)]


def test_a_time_zone_the_engine_does_not_know_leaves_subs_and_the_application_working(settings, engine, caplog):
    """A database restored on an engine with older time zone data may record
    a zone that engine lacks (Europe/Kyiv): every attachment failed setting
    it ("Invalid time zone region"), and a trigger generated there compiled
    and then failed every write from another zone. Now the sessions keep
    their zone and say so once, and the trigger stamps as on Firebird 3."""
    if engine == "fb3":
        pytest.skip("Firebird 3 has no session time zones")
    execute(settings, "CREATE TABLE PLACES (ID INTEGER NOT NULL PRIMARY KEY)")
    execute(
        settings,
        "CREATE OR ALTER FUNCTION EVENT_TIME_ZONE RETURNS VARCHAR(63) CHARACTER SET UTF8 "
        "AS BEGIN RETURN 'Mars/Olympus'; END",
    )
    connection._warn_of_unknown_zone.cache_clear()
    Database(settings).close()
    Database(settings).close()
    assert [r.getMessage() for r in caplog.records if "Mars/Olympus" in r.getMessage()] == [
        "this Firebird does not know subs's time zone 'Mars/Olympus' (EVENT_TIME_ZONE(), recorded where the "
        "database was installed): subs reads and stamps times in each session's own zone; update this engine, "
        "whose time zone data is older"
    ]
    Subs(settings).ok("add", "places", "I", "audit")
    runtime.load()
    writer = connect(
        settings.target, user=settings.effective_user, password=settings.password, session_time_zone="Asia/Tokyo"
    )
    try:
        writer.cursor().execute("INSERT INTO PLACES VALUES (1)")
        writer.commit()
    finally:
        writer.close()
    assert [event["pk"] for event in events(settings)] == [{"ID": 1}]
    assert Subs(settings).ok("status", "--check").startswith("all 1 subscription(s) are captured")
