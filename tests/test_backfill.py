"""`subs backfill`: existing rows as insert events, in key order, in chunks,
consistent with concurrent writers, resumable, and refusing bad input."""

from __future__ import annotations

import io
import json
import os
import random
import signal
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable

import pytest

from subscriptions.capture.values import decode
from subscriptions.db.connection import Database, read_blob
from subscriptions.errors import SubsError
from subscriptions.ops.backfill import backfill
from subscriptions.ops.status import PARTIAL_VIEW

from conftest import EMBEDDED, Subs, assert_one_line_error, events, execute, query, state, wait_until

ROWS = 2500
TABLE = (
    "CREATE TABLE LINES (ORDER_NO INTEGER NOT NULL, CODE VARCHAR(10) NOT NULL, "
    "QTY NUMERIC(9,2), NOTE VARCHAR(30), PRIMARY KEY (ORDER_NO, CODE))"
)


# Rows first..end-1 of LINES, row n: (n // 3, 'c' + n % 3, n / 4, 'note n'). In the
# engine: from a client each row costs a round trip (a second per 1,300 rows
# on the Firebird 3 server).
FILL = """
    EXECUTE BLOCK (FIRST_ROW INTEGER = ?, END_ROW INTEGER = ?) AS
    DECLARE n INTEGER;
    BEGIN
        n = FIRST_ROW;
        WHILE (n < END_ROW) DO
        BEGIN
            INSERT INTO LINES VALUES (:n / 3, 'c' || MOD(:n, 3), :n * 0.25, 'note ' || :n);
            n = n + 1;
        END
    END"""


def fill(settings, first: int, end: int) -> None:
    execute(settings, FILL, params=(first, end))


@pytest.fixture
def lines(settings, subs: Subs):
    execute(settings, TABLE)
    fill(settings, 0, ROWS)
    subs.ok("add", "lines", "I", "rec")
    return settings


def test_every_row_becomes_an_insert_event_in_key_order(lines, subs: Subs) -> None:
    result = subs("backfill", "lines", "rec", "--batch", "300")
    assert result.exit_code == 0, result.output + result.stderr
    assert result.stdout.startswith(f"backfilled LINES for rec: {ROWS:,} event(s) from {ROWS:,} row(s)")
    progress = result.stderr.splitlines()
    assert progress[0].startswith(f"backfill LINES rec: 300/{ROWS:,} rows")
    assert progress[-1].startswith(f"backfill LINES rec: {ROWS:,}/{ROWS:,} rows")
    logged = events(lines)
    rows = query(lines, "SELECT ORDER_NO, CODE, QTY, NOTE FROM LINES ORDER BY ORDER_NO, CODE")
    assert [(e["pk"]["ORDER_NO"], e["pk"]["CODE"]) for e in logged] == [row[:2] for row in rows]
    assert all(e["action"] == "I" and e["old"] is None for e in logged)
    assert [tuple(e["new"].values()) for e in logged] == [tuple(row) for row in rows]
    assert query(lines, "SELECT COUNT(*) FROM EVENT_LOG WHERE KEY_HASH <> HASH('LINES|rec|' || PK_ROW)") == [(0,)]


def test_a_backfilled_row_is_logged_exactly_as_its_trigger_logs_it(lines, subs: Subs) -> None:
    subs.ok("backfill", "lines", "rec")
    execute(lines, "DELETE FROM LINES WHERE ORDER_NO = 5 AND CODE = 'c1'")
    execute(lines, "INSERT INTO LINES VALUES (5, 'c1', 4, 'note 16')")
    logged = query(
        lines,
        "SELECT PK_ROW, KEY_HASH, NEW_ROW, OLD_ROW FROM EVENT_LOG WHERE PK_ROW = "
        "(SELECT FIRST 1 PK_ROW FROM EVENT_LOG ORDER BY EVENT_ID DESC) ORDER BY EVENT_ID",
    )
    snapshot, trigger = [(row[0], row[1], read_blob(row[2]), row[3]) for row in logged]
    assert snapshot == trigger


def test_rows_with_blobs_are_backfilled_as_their_trigger_captures_them(settings, subs: Subs) -> None:
    """BLOB values between other columns, NULL, empty, large and not UTF-8
    (on Firebird 3 their values follow the other columns' parts)."""
    execute(
        settings,
        "CREATE TABLE DOCS (ID INTEGER NOT NULL PRIMARY KEY, BODY BLOB SUB_TYPE TEXT CHARACTER SET NONE, "
        "TITLE VARCHAR(20), DATA BLOB SUB_TYPE BINARY, NOTE BLOB SUB_TYPE TEXT CHARACTER SET UTF8, N INTEGER)",
    )
    rows = [
        (1, b"\xff\xfe not UTF-8", "first", bytes(range(256)), "é" * 35_000, 1),
        (2, None, "second", b"", None, None),
        (3, b"", None, None, "", 3),
    ]
    for row in rows:
        execute(settings, "INSERT INTO DOCS VALUES (?, ?, ?, ?, ?, ?)", params=row)
    subs.ok("add", "docs", "I", "rec")
    subs.ok("backfill", "docs", "rec")
    execute(settings, "DELETE FROM DOCS")
    for row in rows:
        execute(settings, "INSERT INTO DOCS VALUES (?, ?, ?, ?, ?, ?)", params=row)
    columns = ("ID", "BODY", "TITLE", "DATA", "NOTE", "N")
    expected = [dict(zip(columns, row, strict=True)) for row in rows]
    expected[2]["BODY"] = ""  # NONE text that is UTF-8 arrives as text
    assert [e["new"] for e in events(settings)] == expected * 2
    with Database(settings) as db, db.transaction() as cursor:
        cursor.execute("SELECT PK_ROW, NEW_ROW FROM EVENT_LOG ORDER BY EVENT_ID")
        images = [(pk, read_blob(image)) for pk, image in cursor.fetchall()]
    assert images[:3] == images[3:]


def test_where_and_the_subscriptions_when_select_rows(lines, subs: Subs) -> None:
    subs.ok("remove", "lines", "I", "rec")
    subs.ok("add", "lines", "I", "rec", "--when", "NEW.QTY >= 100")
    subs.ok("backfill", "lines", "rec", "--where", "ORDER_NO < 200")
    logged = events(lines)
    assert {(e["pk"]["ORDER_NO"], e["pk"]["CODE"]) for e in logged} == set(
        query(lines, "SELECT ORDER_NO, CODE FROM LINES WHERE ORDER_NO < 200 AND QTY >= 100")
    )
    assert logged


def test_a_row_the_when_cannot_judge_is_logged_dead_as_the_trigger_logs_it(lines, subs: Subs) -> None:
    """A condition that raises on some rows neither stops the run nor drops them."""
    subs.ok("remove", "lines", "I", "rec")
    subs.ok("add", "lines", "I", "rec", "--when", "100 / (NEW.ORDER_NO - 5) <> 0")
    result = subs("backfill", "lines", "rec", "--where", "ORDER_NO BETWEEN 4 AND 6")
    assert result.exit_code == 0, result.output + result.stderr
    assert result.stdout.startswith("backfilled LINES for rec: 9 event(s) from 9 row(s)")
    execute(lines, "INSERT INTO LINES VALUES (5, 'c9', 1, 'new')")
    logged = query(
        lines,
        "SELECT PK_ROW, DEAD, DEAD_AT IS NOT NULL, LAST_ERROR STARTING WITH 'the --when condition raised: ' "
        "FROM EVENT_LOG ORDER BY EVENT_ID",
    )
    keys = [tuple(decode(row[0]).values()) for row in logged]
    assert keys == [(n, f"c{code}") for n in (4, 5, 6) for code in range(3)] + [(5, "c9")]
    assert [row[1:] for row in logged] == [
        (n == 5, n == 5, True if n == 5 else None) for n in (4, 4, 4, 5, 5, 5, 6, 6, 6, 5)
    ]


@pytest.mark.parametrize("engine", [EMBEDDED])  # Firebird 3 has no time zone types
def test_keys_with_time_zones_resume_from_chunk_to_chunk(settings, subs: Subs) -> None:
    """Each chunk goes on after the last key of the one before, bound back
    into the driver from its captured value: zoned times included."""
    execute(
        settings,
        "CREATE TABLE SHIFTS (STARTS TIMESTAMP WITH TIME ZONE NOT NULL, AT_DESK TIME WITH TIME ZONE NOT NULL, "
        "PRIMARY KEY (STARTS, AT_DESK))",
    )
    execute(
        settings,
        "INSERT INTO SHIFTS VALUES (TIMESTAMP '2024-01-01 10:00 Europe/Prague', TIME '09:00 Europe/Prague')",
        "INSERT INTO SHIFTS VALUES (TIMESTAMP '2024-01-01 10:00 +05:00', TIME '09:00 +05:00')",
        "INSERT INTO SHIFTS VALUES (TIMESTAMP '2024-06-01 10:00 America/New_York', TIME '23:59:59.9999 UTC')",
        "INSERT INTO SHIFTS VALUES (TIMESTAMP '2023-01-01 00:00 -03:30', TIME '00:00 -03:30')",
        "INSERT INTO SHIFTS VALUES (TIMESTAMP '2025-01-01 00:00 UTC', TIME '12:00 UTC')",
    )
    subs.ok("add", "shifts", "I", "rec")
    result = subs("backfill", "shifts", "rec", "--batch", "2")
    assert result.exit_code == 0, result.output + result.stderr
    assert result.stdout.startswith("backfilled SHIFTS for rec: 5 event(s) from 5 row(s)")
    rows = query(settings, "SELECT STARTS, AT_DESK FROM SHIFTS ORDER BY STARTS, AT_DESK")
    assert [(e["pk"]["STARTS"], e["pk"]["AT_DESK"]) for e in events(settings)] == rows


def test_a_table_whose_statements_pass_64_kb(settings, subs: Subs) -> None:
    """The backfill's statements for 700 columns come as BLOB readers, which
    the count's execute closed before they were read: a traceback."""
    columns = [f"COLUMN_NUMBER_{number}" for number in range(700)]
    execute(
        settings, f"CREATE TABLE WIDE (ID INTEGER NOT NULL PRIMARY KEY, {', '.join(f'{c} INTEGER' for c in columns)})"
    )
    execute(settings, "INSERT INTO WIDE (ID, COLUMN_NUMBER_0, COLUMN_NUMBER_699) VALUES (1, 7, 9)")
    subs.ok("add", "wide", "I", "rec")
    result = subs("backfill", "wide", "rec")
    assert result.exit_code == 0, result.output + result.stderr
    (event,) = events(settings)
    assert event["new"] == {"ID": 1, **dict.fromkeys(columns), "COLUMN_NUMBER_0": 7, "COLUMN_NUMBER_699": 9}


def test_a_killed_run_goes_on_where_it_stopped(lines, subs: Subs) -> None:
    total = 6 * ROWS  # the run is killed after 2,000 rows, long before its end
    fill(lines, ROWS, total)
    execute(lines, "DELETE FROM EVENT_LOG")  # the inserts' own events
    env = {**os.environ, "ISC_USER": lines.effective_user, "ISC_PASSWORD": lines.password or ""}
    run = subprocess.Popen(
        [sys.executable, "-m", "subscriptions", "-d", lines.dsn, "backfill", "lines", "rec", "--batch", "50"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_until(lambda: query(lines, "SELECT COALESCE(MAX(ROWS_DONE), 0) FROM EVENT_BACKFILL")[0][0] >= 2000)
    assert ", running, updated " in subs.ok("status")
    run.send_signal(signal.SIGKILL)
    run.wait(10)
    # A busy Firebird 3 server ends a killed client's attachment a moment
    # later, once it has carried out what the client sent (a chunk's commit).
    wait_until(lambda: ", stopped " in subs.ok("status"), 30, "the killed run's attachment to end")
    done = query(lines, "SELECT ROWS_DONE FROM EVENT_BACKFILL")[0][0]
    assert done < total
    assert f"{done:,}/{total:,} rows ({100 * done / total:.0f}%), stopped " in subs.ok("status")
    assert query(lines, "SELECT COUNT(*) FROM EVENT_LOG")[0][0] == done
    result = subs("backfill", "lines", "rec", "--batch", "5000")
    assert result.exit_code == 0, result.stderr
    assert "(resumed)" in result.stdout and f"from {total:,} row(s)" in result.stdout
    # Each row's captured key once (keys, not whole events: reading 15,000
    # events' blobs from the Firebird 3 server takes 10 s).
    keys = Counter(key for (key,) in query(lines, "SELECT PK_ROW FROM EVENT_LOG"))
    assert len(keys) == total and set(keys.values()) == {1}
    again = subs.ok("backfill", "lines", "rec", "--restart")
    assert "(resumed)" not in again
    assert query(lines, "SELECT COUNT(*) FROM EVENT_LOG") == [(2 * total,)]


def test_a_finished_backfill_is_not_done_again_without_restart(lines, subs: Subs) -> None:
    """The same command run again after a finished run (a nightly job under
    `timeout`, resuming until done) started over and delivered every row
    again. It now does nothing and says so; --restart starts over, and
    another --where is another backfill."""
    execute(lines, "DELETE FROM EVENT_LOG")  # the inserts' own events
    subs.ok("backfill", "lines", "rec")
    before = state(lines)
    assert subs.ok("backfill", "lines", "rec") == (
        f"the backfill of LINES for rec is done ({ROWS:,} row(s), {ROWS:,} event(s)): nothing to do; "
        "add --restart to deliver every row again\n"
    )
    assert state(lines) == before
    assert f"{ROWS:,} event(s) from" in subs.ok("backfill", "lines", "rec", "--restart")
    assert query(lines, "SELECT COUNT(*) FROM EVENT_LOG") == [(2 * ROWS,)]
    assert "backfilled LINES for rec: 30 event(s)" in subs.ok("backfill", "lines", "rec", "--where", "ORDER_NO < 10")
    assert subs.ok("backfill", "lines", "rec", "--where", "ORDER_NO < 10").startswith(
        "the backfill of LINES for rec with --where 'ORDER_NO < 10' is done (30 row(s), 30 event(s)): nothing to do"
    )


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stop_signal_ends_the_run_after_its_chunk(lines, subs: Subs, stop: signal.Signals) -> None:
    """SIGTERM (`kill`, a job's timeout) failed a run with "database error:
    connection shutdown" (the client library takes SIGTERM over and shuts
    its engine down), and Ctrl-C printed "Aborted!". Now a stop signal ends
    the run after its chunk, with one line that says where it stands."""
    total = 6 * ROWS
    fill(lines, ROWS, total)
    execute(lines, "DELETE FROM EVENT_LOG")  # the inserts' own events
    env = {**os.environ, "ISC_USER": lines.effective_user, "ISC_PASSWORD": lines.password or ""}
    command = [sys.executable, "-m", "subscriptions", "-d", lines.dsn, "backfill", "lines", "rec", "--batch", "10"]
    running = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_until(lambda: query(lines, "SELECT COALESCE(MAX(ROWS_DONE), 0) FROM EVENT_BACKFILL")[0][0] >= 100)
    running.send_signal(stop)
    _, said = running.communicate(timeout=60)
    (done,) = query(lines, "SELECT ROWS_DONE FROM EVENT_BACKFILL")[0]
    assert running.returncode == 1 and said.splitlines()[-1] == (
        f"Error: the backfill of LINES for rec stopped at {done:,} of {total:,} rows: "
        "run the same command again to go on"
    ), said
    assert query(lines, "SELECT COUNT(*) FROM EVENT_LOG") == [(done,)]
    assert f"{done:,}/{total:,} rows ({100 * done / total:.0f}%), stopped " in subs.ok("status")
    assert f"from {total:,} row(s)" in subs.ok("backfill", "lines", "rec", "--batch", "5000")
    keys = Counter(key for (key,) in query(lines, "SELECT PK_ROW FROM EVENT_LOG"))
    assert len(keys) == total and set(keys.values()) == {1}


def test_a_lost_connection_stops_the_run_saying_where_it_stands(lines, subs: Subs) -> None:
    """A server restart under a run failed it with "database error:
    connection shutdown", which said nothing of the backfill."""
    execute(lines, "DELETE FROM EVENT_LOG")  # the inserts' own events

    def cut_after_the_first_chunk(progress) -> None:
        if progress.rows_this_run == 500:
            execute(lines, "DELETE FROM MON$ATTACHMENTS WHERE MON$ATTACHMENT_ID = ?", params=(attachment,))

    with Database(lines) as db:
        attachment = db.fetch_value("SELECT CURRENT_CONNECTION FROM RDB$DATABASE")
        with pytest.raises(SubsError) as lost:
            backfill(db, "lines", "rec", chunk=500, progress=cut_after_the_first_chunk)
    said = str(lost.value)
    assert said.startswith("the backfill of LINES for rec lost its connection (") and said.endswith(
        f") after 500 of {ROWS:,} rows: run the same command again to go on"
    ), said
    assert "(resumed)" in subs.ok("backfill", "lines", "rec")
    keys = Counter(key for (key,) in query(lines, "SELECT PK_ROW FROM EVENT_LOG"))
    assert len(keys) == ROWS and set(keys.values()) == {1}


MOVED_ON = (
    "Error: this backfill of LINES changed under this run (another run or a --restart moved it on); "
    "this run stops: `subs status` shows where it stands"
)
GOING_ON = "Error: another run of this backfill of lines for rec is going on; let it end, or stop it, then run this"


@pytest.mark.parametrize("restart", [False, True], ids=["resume", "restart"])
def test_two_runs_at_once_log_each_row_once(lines, subs: Subs, restart: bool) -> None:
    """A second run started while the first goes on (a cron overlap, a second
    terminal) resumed the same backfill, and both logged every row from
    there on: 595,000 events for 300,000 rows by hand. Now one of them stops
    with one line and the other goes on to the end. A --restart takes over
    (the rows done before are logged again, as a restart does), or is
    refused when it meets a chunk of the other as it commits."""
    total = 6 * ROWS
    fill(lines, ROWS, total)
    execute(lines, "DELETE FROM EVENT_LOG")  # the inserts' own events
    env = {**os.environ, "ISC_USER": lines.effective_user, "ISC_PASSWORD": lines.password or ""}
    command = [sys.executable, "-m", "subscriptions", "-d", lines.dsn, "backfill", "lines", "rec"]
    # Small chunks: still running, some seconds later, when the second has started.
    first = subprocess.Popen([*command, "--batch", "10"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    wait_until(lambda: query(lines, "SELECT COALESCE(MAX(ROWS_DONE), 0) FROM EVENT_BACKFILL")[0][0] >= 100)
    flags = ["--restart"] if restart else []
    second = subprocess.run([*command, "--batch", "50", *flags], env=env, capture_output=True, text=True)
    _, first_err = first.communicate(timeout=300)
    outcomes = sorted([(first.returncode, first_err.decode()), (second.returncode, second.stderr)])
    (won, _), (stopped, said) = outcomes
    assert (won, stopped) == (0, 1), outcomes
    took_over = restart and second.returncode == 0
    refused_restart = restart and not took_over
    assert said.splitlines()[-1].startswith(GOING_ON if refused_restart else MOVED_ON), said
    keys = Counter(key for (key,) in query(lines, "SELECT PK_ROW FROM EVENT_LOG"))
    assert len(keys) == total and set(keys.values()) == ({1, 2} if took_over else {1})
    assert query(lines, "SELECT ROWS_DONE, FINISHED_AT IS NOT NULL FROM EVENT_BACKFILL") == [(total, True)]


@pytest.mark.parametrize("purge", [False, True], ids=["kept", "purged"])
def test_removing_the_subscription_stops_its_backfill(lines, subs: Subs, purge: bool) -> None:
    """A backfill went on logging every row for a subscription removed
    while it ran (269,000 events after `subs remove` by hand). Now it stops
    at its next chunk; re-added, the subscription's backfill goes on from
    there (or, purged, starts over), and each row is logged once."""
    execute(lines, "DELETE FROM EVENT_LOG")  # the inserts' own events

    def remove_after_the_first_chunk(progress) -> None:
        if progress.rows_this_run == 500:
            subs.ok("remove", "lines", "I", "rec", *(["--purge"] if purge else []))

    with Database(lines) as db:
        with pytest.raises(SubsError) as stopped:
            backfill(db, "lines", "rec", chunk=500, progress=remove_after_the_first_chunk)
        if not purge:  # its attachment, still open, no longer runs it
            assert "500/2,500 rows (20%), stopped " in subs.ok("status")
    assert str(stopped.value) == (
        "the insert subscription of LINES for rec was removed while this backfill ran; "
        f"it stopped at 500 of {ROWS:,} rows"
    )
    assert query(lines, "SELECT COUNT(*) FROM EVENT_LOG") == [(0 if purge else 500,)]
    subs.ok("add", "lines", "I", "rec")
    text = subs.ok("backfill", "lines", "rec")
    assert ("(resumed)" in text) is not purge
    keys = Counter(key for (key,) in query(lines, "SELECT PK_ROW FROM EVENT_LOG"))
    assert len(keys) == ROWS and set(keys.values()) == {1}


@pytest.mark.parametrize("purge", [False, True], ids=["kept", "purged"])
def test_a_remove_meanwhile_stops_a_running_backfill_and_counts_its_events(lines, subs: Subs, purge: bool) -> None:
    """`remove --purge` during a backfill waited for the backfill's end (22 s
    for 300,000 rows), then purged; a remove that kept the events counted
    them before the chunk in flight committed its own. Now the remove holds
    the backfill first: the running chunk waits for it, and stops."""
    fill(lines, ROWS, 6 * ROWS)
    execute(lines, "DELETE FROM EVENT_LOG")  # the inserts' own events
    env = {**os.environ, "ISC_USER": lines.effective_user, "ISC_PASSWORD": lines.password or ""}
    command = [sys.executable, "-m", "subscriptions", "-d", lines.dsn, "backfill", "lines", "rec", "--batch", "10"]
    running = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_until(lambda: query(lines, "SELECT COALESCE(MAX(ROWS_DONE), 0) FROM EVENT_BACKFILL")[0][0] >= 100)
    said = subs.ok("remove", "lines", "I", "rec", *(["--purge"] if purge else []))
    _, stopped = running.communicate(timeout=300)
    assert running.returncode == 1, stopped
    assert "was removed while this backfill ran; it stopped at" in stopped.splitlines()[-1], stopped
    (logged,) = query(lines, "SELECT COUNT(*) FROM EVENT_LOG")[0]
    if purge:
        assert logged == 0 and query(lines, "SELECT COUNT(*) FROM EVENT_BACKFILL") == [(0,)]
        assert said.startswith("removed: LINES I rec (subscription 1); ") and said.endswith(" event(s) purged\n")
    else:
        assert said.startswith(f"removed: LINES I rec; {logged} event(s) kept"), (said, logged)
        assert query(lines, "SELECT ROWS_DONE FROM EVENT_BACKFILL") == [(logged,)]


def _backfill_with(settings, between: Callable[[], None]) -> list[dict]:
    """A backfill of LINES in chunks of 500 rows that runs ``between`` after
    the first chunk; the events it logged."""

    def after_the_first_chunk(progress) -> None:
        if progress.rows_this_run == 500:
            between()

    with Database(settings) as db:
        backfill(db, "lines", "rec", chunk=500, progress=after_the_first_chunk)
    return events(settings)


def test_columns_dropped_and_added_meanwhile_are_followed_from_the_next_chunk(lines) -> None:
    """The chunks' statements, prepared once, went on reading a column the
    application dropped (its old values, in 265,000 events by hand) and
    never read one it added."""
    logged = _backfill_with(
        lines, lambda: execute(lines, "ALTER TABLE LINES DROP NOTE", "ALTER TABLE LINES ADD EXTRA INTEGER DEFAULT 7")
    )
    assert len(logged) == ROWS
    assert {tuple(e["new"]) for e in logged[:500]} == {("ORDER_NO", "CODE", "QTY", "NOTE")}
    assert {tuple(e["new"]) for e in logged[500:]} == {("ORDER_NO", "CODE", "QTY", "EXTRA")}
    rows = query(lines, "SELECT ORDER_NO, CODE, QTY, EXTRA FROM LINES ORDER BY ORDER_NO, CODE")
    assert [tuple(e["new"].values()) for e in logged[500:]] == rows[500:]


def test_a_when_condition_changed_meanwhile_applies_from_the_next_chunk(lines, subs: Subs) -> None:
    logged = _backfill_with(lines, lambda: subs.ok("add", "lines", "I", "rec", "--when", "NEW.QTY >= 500"))
    assert len(logged) == 500 + (ROWS - 2000)  # row n has QTY n / 4
    assert all(e["new"]["QTY"] >= 500 for e in logged[500:])


def test_a_run_that_meets_another_finished_run_as_it_follows_ddl_stops(lines) -> None:
    """A run that makes its statements again after the application's DDL
    took a backfill another run had finished meanwhile for one done before
    it started, whose plan has no statements and no shape: it made them
    again, and again, for ever."""

    def finished_elsewhere_then_altered() -> None:
        execute(lines, "UPDATE EVENT_BACKFILL SET FINISHED_AT = LOCALTIMESTAMP")
        execute(lines, "ALTER TABLE LINES ADD EXTRA INTEGER")

    with pytest.raises(SubsError) as stopped:
        _backfill_with(lines, finished_elsewhere_then_altered)
    assert str(stopped.value) == MOVED_ON.removeprefix("Error: ")


def test_a_primary_key_changed_meanwhile_stops_the_backfill(lines, subs: Subs) -> None:
    """Walked from the last row done in the new key's order, a run would
    skip rows and log others twice."""
    (constraint,) = query(
        lines,
        "SELECT TRIM(RDB$CONSTRAINT_NAME) FROM RDB$RELATION_CONSTRAINTS "
        "WHERE RDB$RELATION_NAME = 'LINES' AND RDB$CONSTRAINT_TYPE = 'PRIMARY KEY'",
    )[0]

    def swap_the_key() -> None:
        execute(lines, f"ALTER TABLE LINES DROP CONSTRAINT {constraint}")
        execute(lines, "ALTER TABLE LINES ADD PRIMARY KEY (CODE, ORDER_NO)")

    with pytest.raises(SubsError) as stopped:
        _backfill_with(lines, swap_the_key)
    assert str(stopped.value) == (
        "the primary key of LINES changed during its backfill for rec: add --restart to start over"
    )
    assert len(events(lines)) == 500
    subs.ok("backfill", "lines", "rec", "--restart")
    assert len(events(lines)) == 500 + ROWS


def test_with_writers_the_last_event_of_each_row_is_its_current_state(lines, subs: Subs) -> None:
    subs.ok("add", "lines", "U", "rec")
    stop = threading.Event()
    writes = Counter[str]()

    def write() -> None:
        generator = random.Random(7)
        with Database(lines) as db:
            while not stop.is_set():
                key = generator.randrange(ROWS)
                try:
                    with db.transaction() as cursor:
                        cursor.execute(
                            "UPDATE LINES SET NOTE = ? WHERE ORDER_NO = ? AND CODE = ?",
                            (f"w{writes['done']}", key // 3, f"c{key % 3}"),
                        )
                    writes["done"] += 1
                except Exception:
                    writes["conflict"] += 1

    writers = [threading.Thread(target=write) for _ in range(2)]
    for writer in writers:
        writer.start()
    try:
        wait_until(lambda: writes["done"] >= 20, what="the writers to be under way")
        before = writes["done"]
        subs.ok("backfill", "lines", "rec", "--batch", "100")
        during = writes["done"] - before
    finally:
        stop.set()
        for writer in writers:
            writer.join()
    assert during > 0, "no write ran during the backfill"
    last = {}
    for event in events(lines):
        last[(event["pk"]["ORDER_NO"], event["pk"]["CODE"])] = event["new"]["NOTE"]
    current = dict(((o, c), note) for o, c, note in query(lines, "SELECT ORDER_NO, CODE, NOTE FROM LINES"))
    assert last == current


@pytest.mark.parametrize(
    ("arguments", "fragments"),
    [
        (("nosuch", "rec"), ("table 'nosuch' does not exist",)),
        (("lines", "other"), ("LINES has no subscription for tag other", "subs add LINES I other")),
        (("lines", "upd"), ("no insert subscription for upd (only U)",)),
        (("lines", "rec", "--where", "NOPE > 1"), ("--where rejected by the database", "NOPE")),
        (("lines", "rec", "--where", "1 = 1; DELETE FROM LINES"), ("--where condition refused", "';'")),
        (("lines", "rec", "--where", "QTY > (1"), ("unbalanced '('",)),
        (("lines", "rec", "--where", " OR ".join(["QTY = 1"] * 600)), ("6,596 characters long", "stores 4,000")),
        (("lines", "bad tag!"), ("tag",)),
    ],
)
def test_bad_input_is_one_line_and_changes_nothing(lines, subs: Subs, arguments, fragments) -> None:
    subs.ok("add", "lines", "U", "upd")
    before = state(lines), query(lines, "SELECT * FROM EVENT_BACKFILL")
    assert_one_line_error(subs("backfill", *arguments), *fragments)
    assert (state(lines), query(lines, "SELECT * FROM EVENT_BACKFILL")) == before


def test_batch_must_be_positive(lines, subs: Subs) -> None:
    assert_one_line_error(subs("backfill", "lines", "rec", "--batch", "0"), "--batch", exit_code=2)


def test_an_unfinished_run_with_another_where_is_not_mixed_up(lines, subs: Subs) -> None:
    execute(lines, "UPDATE EVENT_BACKFILL SET FINISHED_AT = NULL")  # nothing yet
    subs.ok("backfill", "lines", "rec", "--where", "ORDER_NO < 10")
    execute(lines, "UPDATE EVENT_BACKFILL SET FINISHED_AT = NULL")
    result = subs("backfill", "lines", "rec")
    assert_one_line_error(result, "unfinished backfill of LINES for rec has --where 'ORDER_NO < 10'", "--restart")
    restarted = subs.ok("backfill", "lines", "rec", "--restart")
    assert f"from {ROWS:,} row(s)" in restarted


def test_a_run_stopped_before_the_key_changed_is_not_resumed(lines, subs: Subs) -> None:
    subs.ok("backfill", "lines", "rec", "--where", "ORDER_NO < 10")
    execute(lines, "UPDATE EVENT_BACKFILL SET FINISHED_AT = NULL, LAST_KEY = ?", params=(b"~8:ORDER_NO1:i1:5",))
    before = state(lines)
    assert_one_line_error(subs("backfill", "lines", "rec", "--where", "ORDER_NO < 10"), "primary key of LINES changed")
    assert state(lines) == before


def test_status_shows_the_backfill(lines, subs: Subs) -> None:
    subs.ok("backfill", "lines", "rec")
    text = subs.ok("status")
    assert f"done {ROWS:,}" in text
    (row,) = [s for s in json.loads(subs.ok("status", "--json")) if s["tag"] == "rec"]
    assert row["backfill"]["rows_done"] == ROWS and row["backfill"]["finished"]


def test_a_user_who_may_not_see_every_attachment_is_not_told_a_run_stopped(
    lines, subs: Subs, make_user, engine
) -> None:
    """MON$ shows a user other than SYSDBA, the owner and RDB$ADMIN only its
    own attachments: to it a running backfill of another user's looked
    stopped ("stopped 0.0s ago" while its rows went on, by hand on the
    Firebird 3 server). It is told when the run was last updated instead."""
    viewer = make_user("viewer")
    subs.ok("grant", viewer.user.lower())
    subs.ok("backfill", "lines", "rec", "--where", "ORDER_NO < 10")
    execute(lines, "UPDATE EVENT_BACKFILL SET FINISHED_AT = NULL")  # unfinished, and run by nobody
    assert "30/30 rows (100%), stopped " in subs.ok("status")
    shown = Subs(viewer).ok("status")
    assert "30/30 rows (100%), updated " in shown and "stopped" not in shown
    as_json = Subs(viewer)("status", "--json")
    (row,) = [s for s in json.loads(as_json.stdout) if s["tag"] == "rec"]
    assert row["backfill"]["running"] is None
    assert as_json.stderr == f"note: {PARTIAL_VIEW}\n"
    if engine != "fb3":  # Firebird 4 and later: a role with MONITOR_ANY_ATTACHMENT sees every attachment
        execute(lines, "CREATE ROLE SUBS_MONITOR SET SYSTEM PRIVILEGES TO MONITOR_ANY_ATTACHMENT")
        execute(lines, f"GRANT DEFAULT SUBS_MONITOR TO USER {viewer.user}")
        assert "30/30 rows (100%), stopped " in Subs(viewer).ok("status")


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_a_progress_bar_and_a_pipe_a_line_every_ten_seconds() -> None:
    """A pipe (a cron log) got a line per chunk: 1,000 lines for a million
    rows. It gets the first chunk's, one per 10 seconds and the last."""
    from subscriptions.cli.backfill import _Display
    from subscriptions.ops.backfill import Progress

    states = [
        Progress("T", "rec", done, 30_000, done, done, done / 1000, done == 30_000, False)
        for done in range(1000, 30_001, 1000)
    ]
    terminal, pipe = Terminal(), io.StringIO()
    for stream in (terminal, pipe):
        display = _Display(stream)
        for progress in states:
            display(progress)
        display.close()
    assert "backfill T rec" in terminal.getvalue() and "1,000 rows/s" in terminal.getvalue()
    assert "30000/30000" in terminal.getvalue()
    assert pipe.getvalue().splitlines() == [
        "backfill T rec: 1,000/30,000 rows (3.3%), 1,000 rows/s, 0m29s left",
        "backfill T rec: 11,000/30,000 rows (36.7%), 1,000 rows/s, 0m19s left",
        "backfill T rec: 21,000/30,000 rows (70.0%), 1,000 rows/s, 0m09s left",
        "backfill T rec: 30,000/30,000 rows (100.0%), 1,000 rows/s",
    ]
