"""`subs listen` end to end, as real processes, on both engines: modes,
retries and dead events, crashes, leases, graceful stop, reconnects."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from subscriptions.db import sql
from subscriptions.db.connection import Database
from subscriptions.errors import SubsError
from subscriptions.ops import console

import fb3server
from conftest import Subs, execute, free_port, query, scrape_metrics, state, wait_until
from listening import (
    Listener,
    disconnect_others,
    handled,
    insert,
    remaining,
    spawned_children,
    supervise,
    worker_attached,
)
from processes import reap, subreaper


@pytest.mark.parametrize("batch", ["7", "auto"])
def test_ordered_drain_handles_each_event_once_in_order(items, tmp_path, listeners, batch):
    insert(items, 1, 30)
    execute(items, "UPDATE ITEMS SET NOTE = 'x' WHERE ID <= 10")
    execute(items, "DELETE FROM ITEMS WHERE ID <= 5")
    listener = Listener(items, tmp_path, "--drain", "--batch", batch)
    listeners.append(listener)
    assert listener.finish() == 0, listener.output()
    ids = handled(listener.lines())
    assert len(ids) == len(set(ids)) == 45
    for sub in {line["sub"] for line in listener.lines()}:
        in_sub = [line["id"] for line in listener.lines() if line["sub"] == sub and line["phase"] == "done"]
        assert in_sub == sorted(in_sub)
    assert remaining(items) == 0


@pytest.mark.parametrize("mode", ["ordered", "parallel"])
def test_a_listener_exits_without_warnings(items, tmp_path, listeners, mode):
    """Its processes leave nothing for Python to complain about: the handler
    pool's stop flag once left semaphores that the resource tracker reported
    leaked at every exit."""
    insert(items, 1, 3)
    listener = Listener(items, tmp_path, "--drain", "--mode", mode, "--workers", "2")
    listeners.append(listener)
    assert listener.finish() == 0, listener.output()
    assert "Warning" not in listener.output(), listener.output()


@pytest.mark.parametrize("mode", ["ordered", "parallel"])
def test_a_subscription_added_while_listening_is_served_at_once(items, tmp_path, listeners, mode):
    """A listener reads the subscriptions before it sleeps, not when it
    wakes: a new subscription of a tag it serves wakes it with its first
    event, and that event is handled then, not at the next --poll."""
    listener = Listener(items, tmp_path, "--mode", mode, "--poll", "120")
    listeners.append(listener)
    insert(items, 1, 1)
    listener.wait_for(lambda lines: handled(lines) == [1])
    execute(items, "CREATE TABLE OTHERS (ID INTEGER NOT NULL PRIMARY KEY, NOTE VARCHAR(20))")
    Subs(items).ok("add", "others", "I", "rec")
    execute(items, "INSERT INTO OTHERS VALUES (7, NULL)")
    listener.wait_for(lambda lines: any(line["tag"] == "rec" and line["sub"] == 4 for line in lines), timeout=20)


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_notification_wakes_every_stream_not_only_the_last_busy_one(items, tmp_path, listeners, workers):
    """Woken by a notification, an ordered listener claims the stream whose
    claim last found events before it probes the others (HeadsProbe): a
    change of another table, alone or committed with one of that stream's,
    is handled then too, not at the next --poll."""
    execute(items, "CREATE TABLE OTHERS (ID INTEGER NOT NULL PRIMARY KEY, NOTE VARCHAR(20))")
    Subs(items).ok("add", "others", "I", "rec")  # subscription 4
    listener = Listener(items, tmp_path, "--poll", "300", "--workers", workers)
    listeners.append(listener)

    def others_done(lines: list[dict]) -> list[int]:
        return [line["key"] for line in lines if line["phase"] == "done" and line["sub"] == 4]

    insert(items, 1, 1)
    listener.wait_for(lambda lines: len(handled(lines)) == 1)
    execute(items, "INSERT INTO OTHERS VALUES (1, NULL)")
    listener.wait_for(lambda lines: others_done(lines) == [1], timeout=20)
    with Database(items) as db, db.transaction() as cursor:
        cursor.execute("INSERT INTO ITEMS VALUES (2, NULL)")
        cursor.execute("INSERT INTO OTHERS VALUES (2, NULL)")
    listener.wait_for(lambda lines: len(handled(lines)) == 4, timeout=20)
    assert others_done(listener.lines()) == [1, 2]


def test_ordered_mode_keeps_a_streams_inserts_updates_and_deletes_in_log_order(items, tmp_path, listeners):
    """Order belongs to the stream, (table, tag): each row's insert, update
    and delete (three subscriptions) are handled one after the other in log
    order, also with several workers; a second stream goes on beside it."""
    execute(items, "CREATE TABLE OTHERS (ID INTEGER NOT NULL PRIMARY KEY, NOTE VARCHAR(20))")
    Subs(items).ok("add", "others", "I", "rec")
    with Database(items) as db, db.transaction() as cursor:
        for key in range(1, 101):
            cursor.execute("INSERT INTO ITEMS VALUES (?, 'sleep0.002')", (key,))
            cursor.execute("UPDATE ITEMS SET NOTE = 'x' WHERE ID = ?", (key,))
            cursor.execute("DELETE FROM ITEMS WHERE ID = ?", (key,))
            cursor.execute("INSERT INTO OTHERS VALUES (?, NULL)", (key,))
    listener = Listener(items, tmp_path, "--drain", "--workers", "4", "--batch", "10")
    listeners.append(listener)
    assert listener.finish() == 0, listener.output()
    lines = listener.lines()
    items_ids = [line["id"] for line in lines if line["phase"] == "start" and line["sub"] in (1, 2, 3)]
    assert len(items_ids) == 300 and items_ids == sorted(items_ids)  # one at a time, in log order
    others = [line["id"] for line in lines if line["phase"] == "done" and line["sub"] == 4]
    assert len(others) == 100 and others == sorted(others)
    assert len({line["pid"] for line in lines}) > 1  # the streams went to different workers
    assert remaining(items) == 0


def test_only_a_listener_for_every_tag_warns_of_tags_it_has_no_handler_for(items, tmp_path, listeners):
    """With --tag, the other tags are another listener's business: warning of
    them told an operator of nothing but noise."""
    Subs(items).ok("add", "items", "I", "mailer")
    warning = "subscription 4 (ITEMS I mailer) has no handler for its tag; its events stay pending"
    for args, warned in ((("--tag", "rec"), False), ((), True)):
        listener = Listener(items, tmp_path, "--drain", *args)
        listeners.append(listener)
        assert listener.finish() == 0, listener.output()
        assert (warning in listener.output()) is warned, listener.output()


def test_a_listener_warns_of_a_table_whose_capture_drifted(items, tmp_path, listeners):
    """As it starts, for the tables of the tags it serves: the listener's log
    is where an operator looks when nothing arrives. A table whose
    subscriptions were all removed is not drift."""
    execute(items, "CREATE TABLE GONE (ID INTEGER NOT NULL PRIMARY KEY)")
    Subs(items).ok("add", "gone", "I", "rec")
    Subs(items).ok("remove", "gone", "I", "rec")
    execute(items, 'CREATE OR ALTER TRIGGER "SUBS$ITEMS" FOR ITEMS ACTIVE AFTER INSERT POSITION 32000 AS BEGIN END')
    listener = Listener(items, tmp_path, "--drain")
    listeners.append(listener)
    assert listener.finish() == 0, listener.output()
    warnings = [
        line.split(" WARNING subs.listener: ", 1)[1] for line in listener.output().splitlines() if " WARNING " in line
    ]
    assert warnings == ["the capture of ITEMS is not as subscribed: trigger stale (`subs init` makes it again)"]
    Subs(items).ok("init")
    listener = Listener(items, tmp_path, "--drain")
    listeners.append(listener)
    assert listener.finish() == 0, listener.output()
    assert " WARNING " not in listener.output(), listener.output()


def test_a_failing_event_holds_back_the_rest_of_its_stream(items, tmp_path, listeners):
    insert(items, 1, 1, "fail_once")
    execute(items, "UPDATE ITEMS SET NOTE = 'x' WHERE ID = 1", "DELETE FROM ITEMS WHERE ID = 1")
    listener = Listener(items, tmp_path, "--drain", "--backoff-min", "0")
    listeners.append(listener)
    assert listener.finish() == 0, listener.output()
    started = [(line["sub"], line["attempt"]) for line in listener.lines() if line["phase"] == "start"]
    assert started == [(1, 1), (1, 2), (2, 1), (3, 1)]  # the update and delete waited for the insert's retry


def test_a_failure_keeps_the_batch_queued_behind_it_from_running(items, tmp_path, listeners):
    """While a full ordered batch runs, the claimer queues the stream's next
    batch behind it in the same process. When an event of the running batch
    fails, the queued batch must not run before that event's retry."""
    insert(items, 1, 2, "sleep0.02")
    insert(items, 3, 1, "fail_once")
    insert(items, 4, 27, "sleep0.02")
    listener = Listener(items, tmp_path, "--drain", "--batch", "5", "--backoff-min", "0")
    listeners.append(listener)
    assert listener.finish() == 0, listener.output()
    started = [(line["key"], line["attempt"]) for line in listener.lines() if line["phase"] == "start"]
    assert started == [(1, 1), (2, 1), (3, 1), (3, 2)] + [(key, 1) for key in range(4, 31)]
    assert remaining(items) == 0


@pytest.mark.parametrize("batch", ["5", "auto"])
def test_parallel_workers_share_the_work_without_conflicts(items, tmp_path, listeners, batch):
    # 5 ms per event: without it the first worker up may drain all 300 alone.
    insert(items, 1, 300, note="sleep0.005")
    listener = Listener(items, tmp_path, "--drain", "--mode", "parallel", "--workers", "4", "--batch", batch)
    listeners.append(listener)
    assert listener.finish() == 0, listener.output()
    ids = handled(listener.lines())
    assert sorted(ids) == sorted(set(ids)) and len(ids) == 300
    assert len({line["pid"] for line in listener.lines()}) > 1
    output = listener.output().lower()
    assert not any(word in output for word in ("lock conflict", "update conflict", "deadlock", "error")), output
    assert remaining(items) == 0


def test_an_event_that_commits_late_behind_a_parallel_backlog_is_delivered(items, tmp_path, listeners):
    """Parallel claims in a backlog resume where the last one stopped; an
    event with a lower id that commits meanwhile is still handled (by a
    claim that walks the whole log again)."""
    from subscriptions.db.connection import Database

    with Database(items) as late:
        late.connection.begin()
        late.connection.cursor().execute("INSERT INTO ITEMS VALUES (1, NULL)")  # the first event id
        insert(items, 2, 999, note="sleep0.002")
        listener = Listener(items, tmp_path, "--mode", "parallel", "--workers", "4")
        listeners.append(listener)
        listener.wait_for(lambda lines: len(handled(lines)) >= 100)
        late.connection.commit()
    listener.wait_for(lambda lines: len(handled(lines)) >= 1000)
    keys = [line["key"] for line in listener.lines() if line["phase"] == "done"]
    assert sorted(keys) == list(range(1, 1001))
    assert remaining(items) == 0


def test_key_order_keeps_each_rows_events_in_order_across_workers(items, tmp_path, listeners):
    from subscriptions.db.connection import Database

    # Each row's six events are next to each other in the log, so that without
    # --key-order the workers' batches would split them.
    with Database(items) as db, db.transaction() as cursor:
        for key in range(1, 9):
            cursor.execute("INSERT INTO ITEMS VALUES (?, 'sleep0.02')", (key,))
            for note in ("sleep0.01", "fail_once" if key == 3 else "sleep0.01", "sleep0.01", "x"):
                cursor.execute("UPDATE ITEMS SET NOTE = ? WHERE ID = ?", (note, key))
            if key % 2:
                cursor.execute("DELETE FROM ITEMS WHERE ID = ?", (key,))
    listener = Listener(
        items,
        tmp_path,
        "--drain",
        "--mode",
        "parallel",
        "--workers",
        "4",
        "--key-order",
        "--batch",
        "3",
        "--backoff-min",
        "0",
    )
    listeners.append(listener)
    assert listener.finish() == 0, listener.output()
    lines = listener.lines()
    ids = handled(lines)
    assert len(ids) == len(set(ids)) == 8 * 5 + 4
    for key in range(1, 9):
        steps = [(line["phase"], line["id"]) for line in lines if line["key"] == key]  # in time order
        done_ids = [event_id for phase, event_id in steps if phase == "done"]
        assert done_ids == sorted(done_ids), (key, steps)
        for (phase, event_id), (next_phase, next_id) in zip(steps, steps[1:]):
            if phase == "start" and next_phase == "start":
                assert next_id == event_id, f"row {key}: {next_id} started while {event_id} was running"
    assert len({line["pid"] for line in lines}) > 1
    assert remaining(items) == 0


def test_key_order_needs_parallel_mode(items):
    result = Subs(items)("listen", "--key-order")
    assert result.exit_code == 2 and "--key-order needs --mode parallel" in result.output


def test_two_ordered_listeners_take_turns_with_a_stream(items, tmp_path, listeners):
    """A stream's lease stays with the listener that queued its next batch
    behind the running one: the other never gets a batch in between."""
    insert(items, 1, 60, "sleep0.01")
    first = Listener(items, tmp_path, "--drain", "--batch", "5")
    second = Listener(items, tmp_path, "--drain", "--batch", "5")
    listeners += [first, second]
    assert first.finish() == 0 and second.finish() == 0
    started = [line["key"] for line in first.lines() if line["phase"] == "start"]
    assert started == list(range(1, 61))


def test_two_listeners_at_once_never_share_an_event(items, tmp_path, listeners):
    insert(items, 1, 200)
    first = Listener(items, tmp_path, "--drain", "--mode", "parallel", "--workers", "2")
    second = Listener(items, tmp_path, "--drain", "--mode", "parallel", "--workers", "2")
    listeners += [first, second]
    assert first.finish() == 0 and second.finish() == 0
    ids = handled(first.lines())
    assert len(ids) == len(set(ids)) == 200


def test_failures_retry_then_die_and_can_be_retried(items, tmp_path, listeners):
    insert(items, 1, 2, "fail")
    insert(items, 3, 1, "fail_once")
    listener = Listener(items, tmp_path, "--drain", "--max-attempts", "3", "--backoff-min", "0")
    listeners.append(listener)
    assert listener.finish() == 1, listener.output()
    assert "drained: 1 handled, 5 failed attempt(s), 2 died; left: 0 waiting, 0 failing, 2 dead" in listener.output()
    attempts = [(line["key"], line["attempt"]) for line in listener.lines() if line["phase"] == "start"]
    assert attempts == [(1, 1), (1, 2), (1, 3), (2, 1), (2, 2), (2, 3), (3, 1), (3, 2)]
    subs = Subs(items)
    dead = json.loads(subs.ok("dead", "--json"))
    assert [(row["pk"], row["attempts"]) for row in dead] == [({"ID": 1}, 3), ({"ID": 2}, 3)]
    assert "asked to fail (fail)" in dead[0]["last_error"]
    assert "re-queued 1 dead event(s)" in subs.ok("retry", str(dead[0]["id"]))
    assert "re-queued 1 dead event(s)" in subs.ok("retry", "--all")
    assert json.loads(subs.ok("dead", "--json")) == []
    assert "deleted 0 dead event(s)" in subs.ok("purge", "--older-than", "0s")


@pytest.mark.parametrize("mode", ["ordered", "parallel"])
def test_an_undecodable_event_goes_dead_and_the_others_are_delivered(items, tmp_path, listeners, mode):
    """A captured row that cannot be read fails its attempts like a handler
    error would (its worker goes on), dies after --max-attempts, and --drain
    returns and says so."""
    insert(items, 1, 3)
    # '~2:ID1:i9:5': a value said to be 9 bytes long where 1 is left.
    execute(items, "UPDATE EVENT_LOG SET NEW_ROW = ? WHERE EVENT_ID = 2", params=(b"~2:ID1:i9:5",))
    listener = Listener(items, tmp_path, "--drain", "--mode", mode, "--max-attempts", "2", "--backoff-min", "0")
    listeners.append(listener)
    assert listener.finish() == 1, listener.output()
    assert "drained: 2 handled, 1 failed attempt(s), 1 died; left: 0 waiting, 0 failing, 1 dead" in listener.output()
    assert sorted(handled(listener.lines())) == [1, 3]
    (dead,) = json.loads(Subs(items).ok("dead", "--json"))
    assert dead["id"] == 2 and dead["attempts"] == 2
    assert "UndecodableEvent: cannot decode the captured row" in dead["last_error"]


def test_ordered_mode_blocks_a_subscription_behind_its_failing_event(items, tmp_path, listeners):
    insert(items, 1, 1, "fail_once")
    insert(items, 2, 3)
    listener = Listener(items, tmp_path, "--drain", "--backoff-min", "0")
    listeners.append(listener)
    assert listener.finish() == 0, listener.output()
    keys = [(line["key"], line["attempt"], line["phase"]) for line in listener.lines()]
    assert keys[:3] == [(1, 1, "start"), (1, 2, "start"), (1, 2, "done")]
    assert [k for k, _, phase in keys if phase == "done"] == [1, 2, 3, 4]


@pytest.mark.parametrize("mode", ["ordered", "parallel"])
def test_a_batch_handler_gets_claims_whole_and_fails_events_one_by_one(items, tmp_path, listeners, mode):
    """In ordered mode the events after a failed one count as not started
    (they come again once it is settled); in parallel mode they are done."""
    Subs(items).ok("add", "items", "I", "brec")
    insert(items, 1, 9)
    insert(items, 10, 1, "fail_once")
    insert(items, 11, 20)
    # One worker: with more, parallel workers may split the 30 events between them.
    args = ("--drain", "--tag", "brec", "--batch", "50", "--backoff-min", "0", "--mode", mode, "--workers", "1")
    listener = Listener(items, tmp_path, *args)
    listeners.append(listener)
    assert listener.finish() == 0, listener.output()
    calls = [(line["key"], line["attempt"], line["phase"]) for line in listener.lines()]
    assert calls[:30] == [(key, 1, "batch of 30") for key in range(1, 31)]
    again = [key for key, attempt, _ in calls[30:]]
    assert again == ([10, *range(11, 31)] if mode == "ordered" else [10])
    # The 30 events of tag rec it did not take are not its to count.
    assert "drained: 30 handled, 1 failed attempt(s), 0 died; left: 0 waiting, 0 failing, 0 dead" in listener.output()
    assert query(
        items, "SELECT COUNT(*) FROM EVENT_LOG l JOIN EVENT_SUBSCRIBER s ON s.SUB_ID = l.SUB_ID WHERE s.TAG = 'brec'"
    ) == [(0,)]


def test_killed_worker_events_come_back_after_the_lease(items, tmp_path, listeners):
    insert(items, 1, 1, "sleep30")
    listener = Listener(items, tmp_path, "--lease", "2", "--poll", "0.5")
    listeners.append(listener)
    listener.wait_for(lambda lines: any(line["phase"] == "start" for line in lines))
    os.kill(listener.lines()[0]["pid"], signal.SIGKILL)
    listener.wait_for(lambda lines: handled(lines))
    starts = [(line["attempt"], line["pid"]) for line in listener.lines() if line["phase"] == "start"]
    assert [attempt for attempt, _ in starts] == [1, 2] and starts[0][1] != starts[1][1]
    listener.wait_for(lambda lines: remaining(items) == 0)


@pytest.mark.parametrize("mode", ["parallel", "ordered"])
def test_long_handler_keeps_its_lease(items, tmp_path, listeners, mode):
    """The heartbeat renews the events' leases (parallel) or the subscription's
    (ordered): the other workers must not take the running event over."""
    insert(items, 1, 1, "sleep6")
    insert(items, 2, 3)
    listener = Listener(items, tmp_path, "--mode", mode, "--workers", "3", "--lease", "2", "--poll", "0.3")
    listeners.append(listener)
    listener.wait_for(lambda lines: len(handled(lines)) == 4)
    # A handled event is deleted: a second delivery could only have started
    # while its first one ran.
    starts = [line["key"] for line in listener.lines() if line["phase"] == "start"]
    assert sorted(starts) == [1, 2, 3, 4], "an event was delivered twice while its handler was healthy"


def test_hung_handler_is_cut_off(items, tmp_path, listeners):
    insert(items, 1, 1, "sleep60")
    listener = Listener(items, tmp_path, "--timeout", "1", "--poll", "0.3")
    listeners.append(listener)
    listener.wait_for(lambda lines: handled(lines))
    failed = [(line["attempt"], line["phase"]) for line in listener.lines()]
    assert failed == [(1, "start"), (2, "start"), (2, "done")]
    assert "timed out after 1s" in listener.output()


def test_hung_handler_in_a_batch_releases_the_events_after_it(items, tmp_path, listeners):
    """The handler thread gets the batch at once: it must not run ahead of the
    hung handler, and the events after it come back unattempted."""
    insert(items, 1, 1)
    insert(items, 2, 1, "sleep60")
    insert(items, 3, 2)
    listener = Listener(items, tmp_path, "--timeout", "1", "--poll", "0.3", "--batch", "4")
    listeners.append(listener)
    listener.wait_for(lambda lines: len(handled(lines)) == 4)
    starts = [(line["key"], line["attempt"]) for line in listener.lines() if line["phase"] == "start"]
    assert starts == [(1, 1), (2, 1), (2, 2), (3, 1), (4, 1)]
    listener.wait_for(lambda lines: remaining(items) == 0)


def test_transactional_and_plain_handlers_share_a_batch(items, tmp_path, listeners):
    Subs(items).ok("add", "items", "I", "audit")
    insert(items, 1, 3)
    insert(items, 4, 1, "fail")
    listener = Listener(
        items, tmp_path, "--drain", "--mode", "parallel", "--workers", "1", "--batch", "20", "--max-attempts", "1"
    )
    listeners.append(listener)
    assert listener.finish() == 1, listener.output()  # two dead events left
    assert query(items, "SELECT ITEM_ID FROM AUDIT ORDER BY ITEM_ID") == [(1,), (2,), (3,)]
    assert sorted(line["key"] for line in listener.lines() if line["phase"] == "done") == [1, 2, 3]
    dead = query(items, "SELECT SUB_ID, ATTEMPTS FROM EVENT_LOG WHERE DEAD ORDER BY SUB_ID")
    assert [attempts for _, attempts in dead] == [1, 1], "item 4 should be dead for both subscriptions"


def test_sigterm_lets_the_running_handler_finish(items, tmp_path, listeners):
    insert(items, 1, 1, "sleep2")
    insert(items, 2, 5)
    listener = Listener(items, tmp_path, "--batch", "6")
    listeners.append(listener)
    listener.wait_for(lambda lines: lines)
    listener.process.send_signal(signal.SIGTERM)
    assert listener.finish(30) == 0
    assert [(line["key"], line["phase"]) for line in listener.lines()] == [(1, "start"), (1, "done")]
    assert query(items, "SELECT ATTEMPTS FROM EVENT_LOG ORDER BY EVENT_ID") == [(0,)] * 5
    leases = "SELECT COUNT(*) FROM EVENT_SPAN WHERE EXPIRES_AT > EVENT_NOW()"
    assert query(items, leases) == [(0,)], "unstarted events were not given back"


def test_a_drain_stopped_before_it_ends_says_so_and_exits_1(items, tmp_path, listeners):
    """A drain that SIGTERM (a timeout, a service stop) ends early lets its
    running handler finish, then fails: a script must not take it for done."""
    insert(items, 1, 1, "sleep2")
    insert(items, 2, 5)
    listener = Listener(items, tmp_path, "--drain", "--batch", "6")
    listeners.append(listener)
    listener.wait_for(lambda lines: lines)
    listener.process.send_signal(signal.SIGTERM)
    assert listener.finish(30) == 1, listener.output()
    summary, error = listener.output().splitlines()[-2:]
    assert summary == "drained: 1 handled, 0 failed attempt(s), 0 died; left: 5 waiting, 0 failing, 0 dead"
    assert error == (
        "Error: the drain was stopped (SIGTERM, SIGINT or SIGHUP) before it ended; "
        "the events left wait for the next run"
    )


def test_notifications_wake_an_idle_listener(items, tmp_path, listeners):
    """With --poll 300, only the notification can bring the second row's event
    to the handler within seconds: the first row proves the worker is up and
    registered (it registers before its first drain)."""
    listener = Listener(items, tmp_path, "--poll", "300")
    listeners.append(listener)
    insert(items, 1, 1)
    listener.wait_for(lambda lines: handled(lines) == [1], timeout=60)
    insert(items, 2, 1)
    committed = time.monotonic()
    listener.wait_for(lambda lines: handled(lines) == [1, 2], timeout=30)
    assert time.monotonic() - committed < 10, "the idle worker was not woken by the notification"


def test_transactional_handler_commits_with_the_acknowledgement(items, tmp_path, listeners):
    Subs(items).ok("add", "items", "I", "audit")
    Subs(items).ok("remove", "items", "IUD", "rec")
    insert(items, 1, 1)
    insert(items, 2, 1, "fail")
    listener = Listener(items, tmp_path, "--drain", "--max-attempts", "2", "--backoff-min", "0")
    listeners.append(listener)
    assert listener.finish() == 1, listener.output()  # one dead event left
    assert query(items, "SELECT ITEM_ID FROM AUDIT") == [(1,)]
    assert query(items, "SELECT COUNT(*) FROM EVENT_LOG WHERE DEAD_AT IS NOT NULL") == [(1,)]


def test_reconnects_after_its_attachment_is_killed(items, tmp_path, listeners):
    port = free_port()
    listener = Listener(items, tmp_path, "--poll", "0.5", "--metrics-port", str(port))
    listeners.append(listener)
    insert(items, 1, 1)
    listener.wait_for(lambda lines: handled(lines))
    disconnect_others(items, listener)
    insert(items, 2, 1)
    # The kill may cut off event 1's acknowledgement: it is then delivered
    # again (at least once), so count events, not deliveries.
    listener.wait_for(lambda lines: set(handled(lines)) == {1, 2})
    output = listener.output()
    assert "database connection lost" in output, output
    assert 'subs_process_exits_total{process="claimer",how="reconnect"} 1\n' in scrape_metrics(port)


@pytest.mark.alone
@pytest.mark.parametrize("engine", ["fb3"], indirect=True)
def test_rides_through_a_server_restart(items, tmp_path, listeners):
    """Firebird 3 server stopped and started under a running listener: its
    workers notice, start afresh and reconnect; nothing is lost."""
    listener = Listener(items, tmp_path, "--mode", "parallel", "--workers", "2", "--poll", "0.5", "--lease", "3")
    listeners.append(listener)
    insert(items, 1, 5)
    listener.wait_for(lambda lines: len(handled(lines)) == 5)
    fb3server.restart()
    deadline = time.monotonic() + 30
    while True:  # the server takes logins again a moment after it listens
        try:
            insert(items, 6, 5)
            break
        except SubsError:
            assert time.monotonic() < deadline
            time.sleep(0.2)
    listener.wait_for(lambda lines: sorted(set(handled(lines))) == list(range(1, 11)))
    # The claimer notices at its next claim; or the client library aborts it
    # on the dead attachment first (seen once in CI while the claimer used
    # firebird-driver's EventCollector, FIREBIRD-BUGS 8) and the supervisor
    # starts a fresh one.
    output = listener.output()
    assert "database connection lost" in output or re.search(r"worker pid \d+ died of SIGABRT", output), output
    # An acknowledgement the restart cut off leaves its events in the log until
    # their lease runs out and they are delivered again.
    listener.wait_for(lambda _: remaining(items) == 0, timeout=30)


def test_status_counts(items):
    insert(items, 1, 3)
    row = json.loads(Subs(items).ok("status", "--json"))[0]
    assert (row["tag"], row["pending"], row["in_flight"], row["failed"], row["dead"]) == ("rec", 3, 0, 0, 0)
    assert row["oldest_pending_age"] >= 0


def test_an_event_waiting_for_its_retry_is_counted_once_as_failed(items, tmp_path, listeners):
    """Pending, in flight, failed and dead are disjoint wherever they are
    shown: a failed event was also counted pending by `subs status` and
    waiting by the drain's summary ("left: 1 waiting, 1 failing" for one).
    In ordered mode the two events after it wait for its retry."""
    insert(items, 1, 1, "fail_once")
    insert(items, 2, 2)
    listener = Listener(items, tmp_path, "--drain", "--backoff-min", "600", "--backoff-max", "600")
    listeners.append(listener)
    assert listener.finish() == 1, listener.output()
    assert "drained: 0 handled, 1 failed attempt(s), 0 died; left: 2 waiting, 1 failing, 0 dead" in listener.output()
    subs = Subs(items)
    row = json.loads(subs.ok("status", "--json"))[0]
    assert (row["pending"], row["in_flight"], row["failed"], row["dead"]) == (2, 0, 1, 0)
    header, line = subs.ok("status").splitlines()[:2]
    assert header.split()[4:8] == ["PENDING", "IN", "FLIGHT", "FAILED"] and line.split()[4:7] == ["2", "0", "1"]
    with Database(items) as db, db.transaction() as cursor:
        (summary,) = [s for s in console.overview(cursor).subscriptions if s.action == "I"]
    assert (summary.pending, summary.in_flight, summary.failed) == (2, 0, 1)


def test_status_shows_the_listeners_of_each_tag_and_check_names_a_lagging_subscription(items, tmp_path, listeners):
    """`status` shows the live listeners taking each subscription's tag;
    `status --check --max-lag` names an unpaused subscription whose oldest
    live event is older, and whether any listener takes its tag."""
    subs = Subs(items)
    subs.ok("pause", "items", "U", "rec")
    insert(items, 1, 1, "sleep30")
    execute(items, "UPDATE ITEMS SET NOTE = 'x'")
    other = Listener(items, tmp_path, "--tag", "rec2")
    listeners.append(other)
    other.wait_serving()
    time.sleep(1.1)
    lagging = subs("status", "--check", "--max-lag", "1")
    assert lagging.exit_code == 1
    (line,) = lagging.output.splitlines()  # not the paused update's
    assert re.fullmatch(
        r"subscription 1 \(ITEMS I rec\): its oldest live event is [\d.]+s old \(--max-lag 1\.0s\); "
        r"no listener takes tag rec",
        line,
    ), line
    (problem,) = json.loads(subs("status", "--check", "--max-lag", "1", "--json").stdout)
    text = problem.pop("problem")
    assert problem == {"sub_id": 1, "table": "ITEMS", "action": "I", "tag": "rec", "check": "lag"}
    assert re.fullmatch(r"its oldest live event is [\d.]+s old .*; no listener takes tag rec", text), text
    assert subs.ok("status", "--check", "--max-lag", "600").endswith("are captured, none lags over 10m\n")

    taking = [Listener(items, tmp_path, "--mode", "parallel", "--tag", "rec") for _ in range(2)]
    listeners.extend(taking)
    taking[0].wait_for(lambda lines: any(line["phase"] == "start" for line in lines))  # one sleeps 30 s
    wait_until(lambda: "parallel x2" in subs.ok("status"), 60, "both listeners to attach")
    assert "listening: parallel x2" in subs("status", "--check", "--max-lag", "1").output
    rows = {row["sub_id"]: row for row in json.loads(subs.ok("status", "--json"))}
    claimers = {f"{socket.gethostname()}:{pid}" for one in taking for pid in spawned_children(one.process.pid)}
    assert {listener["owner"] for listener in rows[1]["listeners"]} == claimers
    assert {listener["mode"] for listener in rows[1]["listeners"]} == {"parallel"}


def test_a_worker_that_stops_making_progress_is_replaced(items, tmp_path, monkeypatch, caplog):
    """A worker stuck outside a handler (SIGSTOP stands in for a hung driver
    call) is killed by the supervisor and a new one takes over."""
    from subscriptions.delivery import supervisor as listener

    monkeypatch.setattr(listener, "STALL_MARGIN", 1.0)
    replaced: list[int] = []

    def drive(supervisor, record) -> None:
        deadline = time.monotonic() + 60
        attached: list = []  # the worker to stop, once attached

        def one_attached() -> bool:
            # On a busy machine a worker can take longer than this test's
            # 3 s stall limit to start and attach, and is replaced: stop
            # whichever worker attaches first.
            worker = supervisor.workers[0] if supervisor.workers else None
            if worker is not None and worker_attached(items, worker.pid):
                attached.append(worker)
            return bool(attached)

        wait_until(one_attached, 60, "a worker to attach")
        stuck = attached[0]
        os.kill(stuck.pid, signal.SIGSTOP)
        while supervisor.workers[0] in (stuck, None) and time.monotonic() < deadline:  # None: the restart pause
            time.sleep(0.05)
        replaced.append(supervisor.workers[0].pid)
        insert(items, 1, 1)
        while "done" not in (record.read_text() if record.exists() else "") and time.monotonic() < deadline:
            time.sleep(0.05)
        handler = json.loads(record.read_text().splitlines()[-1])["pid"]
        parents.append(int(Path(f"/proc/{handler}/stat").read_text().rpartition(")")[2].split()[1]))

    parents: list[int] = []
    _, record = supervise(items, tmp_path, monkeypatch, drive, poll=0.5, timeout=1.0)
    assert replaced and "made no progress" in caplog.text
    hint = "every process of this embedded database may be waiting inside the engine after one was SIGKILLed"
    assert (hint in caplog.text) is not items.is_remote
    lines = [json.loads(line) for line in record.read_text().splitlines()]
    assert [(line["key"], line["phase"]) for line in lines][-1] == (1, "done")
    assert parents == replaced, "the event was not handled by a handler process of the new claimer"


ODD_HANDLERS = """
import asyncio, os
from subscriptions import hookimpl


@hookimpl
def register_handlers(register):
    register("rec", returns_false)
    register("rec2", awaited)


def returns_false(event):
    return False


async def awaited(event):
    await asyncio.sleep(0.01)
    with open(os.environ["RECORD_FILE"], "a") as file:
        file.write(f"{event.id}\\n")
"""


def test_odd_handler_return_values(items, tmp_path):
    """A returned False is not a failure (only raising is), but worth a warning;
    an async handler is awaited, not mistaken for done."""
    Subs(items).ok("add", "items", "I", "rec2")
    insert(items, 1, 2)
    plugin, record = tmp_path / "odd.py", tmp_path / "awaited.txt"
    plugin.write_text(ODD_HANDLERS)
    env = {
        **os.environ,
        "RECORD_FILE": str(record),
        "ISC_USER": items.effective_user,
        "ISC_PASSWORD": items.password or "",
    }
    result = subprocess.run(
        [sys.executable, "-m", "subscriptions", "-d", items.dsn, "listen", "--drain", "--plugin", str(plugin)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("handler for rec returned False; return values are ignored") == 1, result.stderr
    assert len(record.read_text().split()) == 2
    assert remaining(items) == 0


HANGING_REGISTRATION = """
import time
from subscriptions.db import events

# Stands in for the embedded engine wedged in isc_que_events after a process
# of the database was SIGKILLed (tests/SOAK-NOTES.md, finding 3).
events._Registration.register = lambda self: time.sleep(3600)
"""


@pytest.mark.parametrize("engine", ["fb5"], indirect=True)
def test_hanging_event_registration_falls_back_to_polling(items, tmp_path, listeners):
    (tmp_path / "hang.py").write_text(HANGING_REGISTRATION)
    listener = Listener(items, tmp_path, "--plugin", str(tmp_path / "hang.py"), "--poll", "0.5")
    listeners.append(listener)
    insert(items, 1, 3)
    listener.wait_for(lambda lines: len(handled(lines)) == 3)
    insert(items, 4, 2)
    listener.wait_for(lambda lines: len(handled(lines)) == 5)
    assert "registering for event notifications did not finish" in listener.output()
    assert "exited" not in listener.output(), "the worker was not replaced: it kept going"


def test_the_start_up_check_only_reads(items, caplog):
    """`listen` checks the setup without writing (with --detach it runs in a
    child before the fork); start-up housekeeping happens once, in prepare."""
    from subscriptions.delivery import startup
    from subscriptions.delivery.options import ListenOptions

    insert(items, 1, 2)
    for purged in (0, 0, 999):  # on either side of the live subscription's events
        execute(items, f"INSERT INTO EVENT_LOG (SUB_ID, PK_ROW) VALUES ({purged}, 'of a purged subscription')")
    options = ListenOptions(settings=items)
    before = state(items)
    startup.check(options)
    assert state(items) == before
    with caplog.at_level(logging.INFO, logger="subs.listener"):
        startup.prepare(options)
    assert query(items, "SELECT COUNT(*) FROM EVENT_LOG WHERE SUB_ID IN (0, 999)") == [(0,)]
    assert query(items, "SELECT COUNT(*) FROM EVENT_LOG") == [(2,)]
    assert "deleted 3 event(s) of purged subscriptions" in caplog.text


def test_the_start_up_sweep_for_orphans_probes_the_claim_index(items):
    """It runs at every listener start, however long the log is."""
    with Database(items) as db, db.transaction() as cursor:
        statement = cursor.prepare(sql.load("claims")["delete_orphans"])
        try:
            plan = statement.plan
        finally:
            statement.free()
    assert "EVENT_LOG ORDER IX_EVENT_LOG_QUEUE" in plan and "EVENT_LOG NATURAL" not in plan, plan


@pytest.mark.parametrize("mode", ["parallel", "ordered"])
def test_a_killed_worker_s_event_starts_again_without_waiting_for_its_lease(items, tmp_path, listeners, mode):
    """The supervisor sees its worker die and fails what it held at once;
    the lease (60 s here) is only for the death of the whole listener."""
    insert(items, 1, 1, "sleep30")
    listener = Listener(items, tmp_path, "--mode", mode, "--lease", "60", "--poll", "0.5")
    listeners.append(listener)
    listener.wait_for(lambda lines: any(line["phase"] == "start" for line in lines))
    (first,) = listener.lines()
    os.kill(first["pid"], signal.SIGKILL)
    listener.wait_for(lambda lines: handled(lines) == [first["id"]], timeout=40)
    again = [line for line in listener.lines() if line["phase"] == "start"][1]
    assert again["attempt"] == 2 and again["pid"] != first["pid"]
    assert "handler process died of SIGKILL (signal 9)" in listener.output()


def test_workers_die_with_a_killed_listener(items, tmp_path, listeners):
    listener = Listener(items, tmp_path, "--mode", "parallel", "--workers", "2", "--poll", "0.5")
    listeners.append(listener)
    insert(items, 1, 1)
    listener.wait_for(lambda lines: handled(lines) == [1])
    (claimer,) = spawned_children(listener.process.pid)
    handlers = spawned_children(claimer)
    assert len(handlers) == 2 and handlers == spawned_children(claimer)
    with subreaper():  # they die as orphans: reap them here, not whenever init does
        os.kill(listener.process.pid, signal.SIGKILL)
        listener.process.wait(10)
        deadline = time.monotonic() + 5
        for pid in (claimer, *handlers):
            reap(pid, listener.process.pid, deadline)


def test_the_listener_reaps_the_handler_processes_of_a_killed_claimer(items, tmp_path, listeners):
    """They die with their claimer as orphans, and the listener, their
    subreaper, reaps them at once rather than init whenever it gets round to
    it: a zombie holds its locks on an embedded database (docs/FIREBIRD-BUGS.md, 10)."""
    listener = Listener(items, tmp_path, "--mode", "parallel", "--workers", "2", "--log-level", "DEBUG")
    listeners.append(listener)
    insert(items, 1, 1)
    listener.wait_for(lambda lines: handled(lines) == [1])
    wait_until(lambda: remaining(items) == 0, what="the event's acknowledgement")
    (claimer,) = spawned_children(listener.process.pid)
    handlers = spawned_children(claimer)
    os.kill(claimer, signal.SIGKILL)
    for pid in handlers:
        reaped = f"reaped pid {pid}, left behind by a dead worker: it "  # killed with it, or exiting on its own
        wait_until(lambda: reaped in listener.output(), 30, f"the listener to reap handler process {pid}")
    insert(items, 2, 1)
    listener.wait_for(lambda lines: handled(lines) == [1, 2])


# A child someone waits for (its Popen) and another one, as a claimer and a
# handler process a dead claimer left; run in a process of its own, since it
# reaps every other child that has ended.
REAPING = """
import subprocess, sys, time
from subscriptions.delivery.lifeline import reap_orphans

def wait_ended(pid):
    while open(f"/proc/{pid}/stat").read().split(") ")[1][0] != "Z":
        time.sleep(0.01)

waited_for = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read(); sys.exit(3)"], stdin=-1)
other = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(4)"])
wait_ended(other.pid)
first = reap_orphans({waited_for.pid})
waited_for.stdin.close()
wait_ended(waited_for.pid)
print(first == [(other.pid, 4)], reap_orphans({waited_for.pid}) == [], waited_for.wait())
"""


def test_reaping_orphans_leaves_alone_the_processes_someone_waits_for() -> None:
    result = subprocess.run([sys.executable, "-c", REAPING], capture_output=True, text=True, timeout=60)
    assert result.stdout == "True True 3\n", result.stderr


# A claimer whose run fails with an error of subs's own (a bug): the atexit
# hook stands for the driver's, which waits for ever for a thread still
# inside the engine (seen in a soak: the floors' look after kills).
FAILING_CLAIMER = """
import atexit, pathlib, sys
from subscriptions.db.settings import ConnectionSettings
from subscriptions.delivery import worker
from subscriptions.delivery.options import ListenOptions

atexit.register(pathlib.Path(sys.argv[2]).write_text, "the interpreter shut down")

def fail(self):
    raise ZeroDivisionError("division by zero")

worker.Worker.run = fail
worker.main(ListenOptions(settings=ConnectionSettings(sys.argv[1]), workers=1, log_file=sys.argv[3]), None)
"""


def test_a_claimer_that_fails_logs_why_and_leaves_without_interpreter_shutdown(items, tmp_path) -> None:
    """It used to leave through multiprocessing's sys.exit, whose shutdown
    ran the driver's exit hook; the supervisor then saw a live claimer that
    did nothing until its stall limit."""
    shutdown = tmp_path / "shutdown.txt"
    env = {**os.environ, "ISC_USER": items.effective_user, "ISC_PASSWORD": items.password or ""}
    log = failing_process_log(FAILING_CLAIMER, items.dsn, str(shutdown), logfile=tmp_path / "claimer.log", env=env)
    assert "ERROR subs.worker: the claimer failed; the listener starts a new one\nTraceback" in log, log
    assert log.rstrip().endswith("ZeroDivisionError: division by zero"), log
    assert not shutdown.exists()


# Claimers that count 5 handled events and end at once, through the real
# main; the supervisor's side reads what reached it.
COUNTING_CLAIMERS = """
import multiprocessing, queue, sys
from subscriptions.db.settings import ConnectionSettings
from subscriptions.delivery import worker
from subscriptions.delivery.metrics import Metrics
from subscriptions.delivery.options import ListenOptions

def run(self):
    for _ in range(5):
        self.metrics.observe("tag", "handled", 0.01, 1)
    self._flush_reports()  # as run's last step
    return 0

worker.Worker.run = run
context = multiprocessing.get_context("fork")  # the patched run carries over; the queue is the listener's kind
reports = context.Queue()
options = ListenOptions(settings=ConnectionSettings("unused.fdb"), workers=1, log_file=sys.argv[1])
for _ in range(20):
    claimer = context.Process(target=worker.main, args=(options, reports))
    claimer.start()
    claimer.join()
received = Metrics()
while True:
    try:
        received.merge(reports.get_nowait())
    except queue.Empty:
        break
print(received.totals()["handled"])
"""


def test_a_claimer_that_ends_has_sent_its_last_counts(tmp_path) -> None:
    """The claimer leaves with os._exit, which does not wait for the report
    queue's feeder thread: counts put just before were lost (a drain said 140
    of its 150 handled events, in its summary and in EVENT_STATS)."""
    result = subprocess.run(
        [sys.executable, "-c", COUNTING_CLAIMERS, str(tmp_path / "claimer.log")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (result.stdout, result.stderr) == ("100\n", "")


def failing_process_log(script: str, *args: str, logfile: Path, env: dict[str, str] | None = None) -> str:
    """Run ``script``, a process of the listener made to fail, to its exit
    code 1 with nothing on stderr; return its log."""
    process = subprocess.run(
        [sys.executable, "-c", script, *args, str(logfile)], env=env, capture_output=True, text=True, timeout=120
    )
    assert (process.returncode, process.stderr) == (1, "")
    return logfile.read_text()


# A handler process whose job fails with an error of subs's own: its exit
# used to discard the error and report success (os._exit(0) in a finally).
FAILING_HANDLER_PROCESS = """
import multiprocessing, os, sys
from ctypes import c_bool, c_longlong
from subscriptions.db.settings import ConnectionSettings
from subscriptions.delivery import handler_process
from subscriptions.delivery.options import ListenOptions

def fail(self, job, reporter):
    raise IndexError("list index out of range")

handler_process.Runner.run = fail
claimer_end, own_end = multiprocessing.Pipe()
claimer_end.send(handler_process.Job([], in_order=False))
options = ListenOptions(settings=ConnectionSettings(sys.argv[1]), workers=1, log_file=sys.argv[2])
stop, progress = multiprocessing.RawValue(c_bool, False), multiprocessing.RawArray(c_longlong, 3)
handler_process.main(options, own_end, stop, progress, "test:1", os.getppid())
"""


def test_a_handler_process_that_fails_logs_why_and_exits_with_an_error(tmp_path) -> None:
    log = failing_process_log(FAILING_HANDLER_PROCESS, str(tmp_path / "unused.fdb"), logfile=tmp_path / "handler.log")
    assert "ERROR subs.handler: the handler process failed; its claimer starts a new one\nTraceback" in log, log
    assert log.rstrip().endswith("IndexError: list index out of range"), log


def test_a_claimer_that_keeps_dying_is_restarted_after_growing_pauses_that_a_stop_ends(items, tmp_path, listeners):
    """A claimer killed again and again (a crash loop) is not started anew
    every second; SIGTERM during the pause stops the listener at once rather
    than starting a claimer that --grace then waits for."""
    port = free_port()
    listener = Listener(items, tmp_path, "--poll", "0.5", "--grace", "60", "--metrics-port", str(port))
    listeners.append(listener)
    insert(items, 1, 1)
    listener.wait_for(lambda lines: handled(lines) == [1])
    killed: list[int] = []

    def new_claimer() -> list[int]:
        return [pid for pid in spawned_children(listener.process.pid) if pid not in killed]

    for death in range(1, 4):
        wait_until(lambda: len(new_claimer()) == 1, 30, "a new claimer")
        killed += new_claimer()
        os.kill(killed[-1], signal.SIGKILL)
        wait_until(lambda: listener.output().count("starting a new one in") == death, 30)  # noqa: B023
    pauses = [float(pause) for pause in re.findall(r"starting a new one in ([\d.]+)s", listener.output())]
    assert pauses[0] <= 1.0 and pauses[2] >= 2.0, pauses
    for pid in killed:
        assert f"worker pid {pid} died of SIGKILL (signal 9); starting a new one" in listener.output()
    assert 'subs_process_exits_total{process="claimer",how="SIGKILL"} 3\n' in scrape_metrics(port)
    listener.process.send_signal(signal.SIGTERM)
    assert listener.finish(10) == 0, listener.output()


def test_a_claimer_killed_after_it_settled_events_is_restarted_after_the_first_pause(items, tmp_path, listeners):
    """Kills of a claimer that was delivering (the OOM killer, an operator)
    are no crash loop: each successor starts after the first pause again.
    A fault-injecting soak once spent its last 29 s in a pause that had
    grown while it killed claimers every few seconds."""
    port = free_port()
    listener = Listener(items, tmp_path, "--poll", "0.5", "--metrics-port", str(port))
    listeners.append(listener)
    killed: list[int] = []

    def new_claimer() -> list[int]:
        return [pid for pid in spawned_children(listener.process.pid) if pid not in killed]

    for death in range(1, 5):
        wait_until(lambda: len(new_claimer()) == 1, 30, "a new claimer")
        insert(items, death, 1)
        counted = f'subs_events_handled_total{{tag="rec"}} {death}\n'
        wait_until(lambda: counted in scrape_metrics(port), 30, "the claimer's report")  # noqa: B023
        killed += new_claimer()
        os.kill(killed[-1], signal.SIGKILL)
        wait_until(lambda: listener.output().count("starting a new one in") == death, 30)  # noqa: B023
    pauses = [float(pause) for pause in re.findall(r"starting a new one in ([\d.]+)s", listener.output())]
    assert len(pauses) == 4 and max(pauses) <= 1.0, pauses
    assert handled(listener.lines()) == [1, 2, 3, 4]


CRASHING_IN_HANDLER_PROCESSES = """
import multiprocessing, os
from subscriptions import hookimpl

@hookimpl
def register_handlers(register):
    if multiprocessing.current_process().name == "subs-handler":
        os._exit(3)
"""


def test_handler_processes_that_die_before_they_are_ready_are_started_again_after_growing_pauses(
    items, tmp_path, listeners
):
    """A plugin that kills every handler process as it loads it: the slot
    does not spawn process after process; the claimer and its events stay."""
    plugin = tmp_path / "crashing.py"
    plugin.write_text(CRASHING_IN_HANDLER_PROCESSES)
    insert(items, 1, 1)
    listener = Listener(items, tmp_path, "--workers", "1", "--poll", "0.5", "--plugin", str(plugin))
    listeners.append(listener)
    wait_until(lambda: listener.output().count("the next one starts in") >= 3, 60, "three pauses")
    pauses = [float(pause) for pause in re.findall(r"the next one starts in ([\d.]+)s", listener.output())]
    assert pauses[0] <= 1.0 and pauses[2] >= 2.0, listener.output()
    assert listener.process.poll() is None and listener.lines() == []
    assert query(items, "SELECT COUNT(*) FROM EVENT_LOG WHERE ATTEMPTS = 0") == [(1,)]


@pytest.mark.parametrize("mode", ["parallel", "ordered"])
def test_a_retry_wakes_the_worker_when_its_backoff_is_due(items, tmp_path, listeners, mode):
    """With --poll 300 and no new commit to notify, only the retry's own
    timer brings the second attempt."""
    listener = Listener(items, tmp_path, "--mode", mode, "--poll", "300")
    listeners.append(listener)
    insert(items, 1, 1)
    listener.wait_for(lambda lines: handled(lines) == [1])
    insert(items, 2, 1, "fail_once")
    listener.wait_for(lambda lines: handled(lines) == [1, 2], timeout=30)
    attempts = [line["attempt"] for line in listener.lines() if line["id"] == 2 and line["phase"] == "start"]
    assert attempts == [1, 2]


def test_one_tag_is_not_consumed_in_two_modes_at_once(items, tmp_path, listeners):
    """A second listener taking the same tag in another mode would break the
    order the first one keeps: it is refused in one line; in the same mode, or
    for other tags, it starts."""
    ordered = Listener(items, tmp_path, "--tag", "rec")
    listeners.append(ordered)
    ordered.wait_serving()

    refused = Listener(items, tmp_path, "--mode", "parallel", "--drain")
    listeners.append(refused)
    assert refused.finish() == 1
    (line,) = [line for line in refused.output().splitlines() if line.startswith("Error:")]
    assert "consumes tag(s) rec in ordered mode" in line and "one tag's events must be consumed in one mode" in line

    for args in (("--drain",), ("--mode", "parallel", "--tag", "rec2", "--drain")):
        other = Listener(items, tmp_path, *args)
        listeners.append(other)
        assert other.finish() == 0, other.output()
        assert "this user sees only its own user's listeners" not in other.output()
