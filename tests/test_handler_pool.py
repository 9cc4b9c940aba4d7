"""The listener's one claimer and its handler processes, on both engines (and
Firebird 4): attachments that do not grow with --workers, a hung handler
cut off while the other processes go on."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

from subscriptions.db.connection import Database
from subscriptions.delivery.batching import BatchSize
from subscriptions.delivery.claims import Claimer, load_targets, streams
from subscriptions.delivery.dispatch import Dispatcher
from subscriptions.delivery.handler_process import Job
from subscriptions.delivery.metrics import Metrics
from subscriptions.delivery.options import ListenOptions
from subscriptions.delivery.pool import HandlerPool
from subscriptions.delivery.reaper import owner

from conftest import Subs, execute, free_port, query, scrape_metrics, wait_until
from listening import Listener, handled, insert
from soak_chaos import py_spy_dump

TAGGED = "SELECT COUNT(*) FROM MON$CONTEXT_VARIABLES WHERE MON$VARIABLE_NAME = 'SUBS_WORKER'"


def test_a_listener_holds_three_attachments_whatever_its_workers(items, tmp_path, listeners):
    """Claims and settling on one attachment, lease renewal on another, the
    claim floors' looks on a third: the handler processes hold none unless
    a transactional handler runs there."""
    listener = Listener(items, tmp_path, "--mode", "parallel", "--workers", "4", "--poll", "0.5")
    listeners.append(listener)
    insert(items, 1, 40)
    listener.wait_for(lambda lines: len(handled(lines)) == 40)
    # Lease renewal and looks attach beside the claims: they can come after them.
    wait_until(lambda: query(items, TAGGED) == [(3,)], 10, "the claimer's three attachments")
    assert query(items, TAGGED) == [(3,)]

    Subs(items).ok("add", "items", "I", "audit")
    insert(items, 41, 1)
    listener.wait_for(lambda lines: len(handled(lines)) == 41)
    wait_until(lambda: query(items, "SELECT ITEM_ID FROM AUDIT") == [(41,)], 30, "the audit row")
    assert query(items, TAGGED) == [(4,)], "the transactional handler's process attached once"


# The attachments a listener's handler processes made (tagged with their
# claimer's owner, host:pid, but of another process than the claimer).
KILL_HANDLER_ATTACHMENTS = """
DELETE FROM MON$ATTACHMENTS a
WHERE EXISTS (SELECT 1 FROM MON$CONTEXT_VARIABLES v
              WHERE v.MON$ATTACHMENT_ID = a.MON$ATTACHMENT_ID AND v.MON$VARIABLE_NAME = 'SUBS_WORKER'
                AND v.MON$VARIABLE_VALUE NOT LIKE '%:' || COALESCE(a.MON$REMOTE_PID, a.MON$SERVER_PID))
"""


def test_a_transactional_handler_attaches_again_after_losing_its_attachment(items, tmp_path, listeners):
    """A handler process's own attachment killed: the next transactional
    event's attempt fails with the lost connection, and its retry runs on a
    fresh attachment (the process used to fail every later event)."""
    Subs(items).ok("add", "items", "I", "audit")
    listener = Listener(items, tmp_path, "--workers", "1", "--tag", "audit", "--poll", "0.5")
    listeners.append(listener)
    insert(items, 1, 1)
    wait_until(lambda: query(items, "SELECT ITEM_ID FROM AUDIT") == [(1,)], 60, "the first audit row")
    execute(items, KILL_HANDLER_ATTACHMENTS)
    insert(items, 2, 1)
    wait_until(lambda: query(items, "SELECT ITEM_ID FROM AUDIT ORDER BY 1") == [(1,), (2,)], 60, "the second row")
    assert "nested" not in listener.output() and "Traceback" not in listener.output(), listener.output()


MODULES_PLUGIN = """
import json, os, sys
from subscriptions import hookimpl

@hookimpl
def register_handlers(register):
    def record(event):
        heavy = [name for name in ("click", "firebird.driver", "nats") if name in sys.modules]
        with open(os.environ["RECORD_FILE"], "a") as file:
            file.write(json.dumps(heavy) + "\\n")
    register("rec", record)
"""


def test_handler_processes_load_neither_the_command_line_nor_the_driver(items, tmp_path):
    """A handler process leaves out what its handlers do not need: the
    command line (spawned children ran the `subs` script again), the database
    driver (only transactional handlers attach) and nats-py (only the relay
    uses it). These took 12 MB of every handler process, and start-up time."""
    plugin, record = tmp_path / "modules.py", tmp_path / "record.jsonl"
    plugin.write_text(MODULES_PLUGIN)
    insert(items, 1, 8)
    program = Path(sys.executable).with_name("subs")
    args = ["-d", items.dsn, "listen", "--plugin", str(plugin), "--mode", "parallel", "--workers", "2", "--drain"]
    env = {
        **os.environ,
        "RECORD_FILE": str(record),
        "ISC_USER": items.effective_user,
        "ISC_PASSWORD": items.password or "",
    }
    finished = subprocess.run([str(program), *args], env=env, capture_output=True, text=True, timeout=120)
    assert finished.returncode == 0, finished.stdout + finished.stderr
    assert record.read_text().splitlines() == ["[]"] * 8


def test_a_hung_handler_is_cut_off_while_the_other_processes_go_on(items, tmp_path, listeners):
    insert(items, 1, 1, "sleep60")
    insert(items, 2, 20)
    args = ("--mode", "parallel", "--workers", "2", "--batch", "1", "--timeout", "3", "--backoff-min", "0.1")
    listener = Listener(items, tmp_path, *args, "--backoff-max", "0.2", "--poll", "0.5")
    listeners.append(listener)
    listener.wait_for(lambda lines: len(handled(lines)) == 21, timeout=60)
    lines = listener.lines()
    hung = next(line for line in lines if line["key"] == 1)
    again = next(index for index, line in enumerate(lines) if line["key"] == 1 and line["attempt"] == 2)
    others = [index for index, line in enumerate(lines) if line["key"] != 1 and line["phase"] == "done"]
    assert all(lines[index]["pid"] != hung["pid"] for index in others)
    # All but the one job queued behind the hung handler (it comes back when
    # its process is killed) were handled while it hung.
    assert sum(index < again for index in others) >= len(others) - 1
    assert "timed out after 3s" in listener.output()
    assert "exited with code" not in listener.output(), "the claimer was restarted"
    assert not Path(f"/proc/{hung['pid']}").exists(), "the hung handler's process is still there"


def test_a_killed_handler_process_s_queued_job_comes_back(items, tmp_path, listeners):
    """The process holds its next job in its pipe: when it dies, that job was
    never started and is claimed again, the running event fails once."""
    insert(items, 1, 1, "sleep30")
    insert(items, 2, 2)
    args = ("--mode", "parallel", "--workers", "1", "--batch", "1", "--backoff-min", "0.1", "--backoff-max", "0.2")
    port = free_port()
    listener = Listener(items, tmp_path, *args, "--poll", "0.5", "--metrics-port", str(port))
    listeners.append(listener)
    listener.wait_for(lambda lines: any(line["phase"] == "start" for line in lines))
    (first,) = listener.lines()
    os.kill(first["pid"], signal.SIGKILL)
    listener.wait_for(lambda lines: sorted(handled(lines)) == [1, 2, 3], timeout=40)
    starts = [(line["key"], line["attempt"]) for line in listener.lines() if line["phase"] == "start"]
    assert sorted(starts) == [(1, 1), (1, 2), (2, 1), (3, 1)]
    assert "handler process died of SIGKILL (signal 9)" in listener.output()
    assert "Traceback" not in listener.output() and "exited with code" not in listener.output()
    exits = 'subs_process_exits_total{process="handler",how="SIGKILL"} 1\n'
    wait_until(lambda: exits in scrape_metrics(port), 10, "the handler process's exit in the metrics")
    assert 'subs_process_exits_total{process="claimer"' not in scrape_metrics(port)


def test_a_killed_handler_process_s_stream_goes_on_in_order(items, tmp_path, listeners):
    """Ordered: while a process runs a full batch of a stream, the stream's
    next batch waits in its pipe under the same lease. When the process dies,
    its running event fails once, both batches are given back and the lease
    with them, and the stream goes on in log order."""
    insert(items, 1, 1, "sleep30")
    insert(items, 2, 5)
    args = ("--workers", "1", "--batch", "2", "--backoff-min", "0.1", "--backoff-max", "0.2", "--poll", "0.5")
    listener = Listener(items, tmp_path, *args)
    listeners.append(listener)
    listener.wait_for(lambda lines: any(line["phase"] == "start" for line in lines))
    (first,) = listener.lines()
    os.kill(first["pid"], signal.SIGKILL)
    listener.wait_for(lambda lines: sorted(handled(lines)) == [1, 2, 3, 4, 5, 6], timeout=20)
    starts = [(line["key"], line["attempt"]) for line in listener.lines() if line["phase"] == "start"]
    assert starts == [(1, 1), (1, 2), (2, 1), (3, 1), (4, 1), (5, 1), (6, 1)]
    assert "handler process died of SIGKILL (signal 9)" in listener.output()


def attempts_by_key(lines) -> dict[int, list[int]]:
    starts: dict[int, list[int]] = {}
    for line in lines:
        if line["phase"] == "start":
            starts.setdefault(line["key"], []).append(line["attempt"])
    return starts


@pytest.mark.parametrize("mode", ["ordered", "parallel"])
def test_the_event_that_kills_its_process_is_the_one_whose_attempt_fails(items, tmp_path, listeners, mode):
    """The process reports in groups, so when it dies mid-job the claimer
    has not heard of the events it handled just before: those come again as
    their next attempt, and the failed attempt is the killer's (until
    finding 12 of SOAK-NOTES it landed on the first unreported event, and
    the killer came again as attempt 1)."""
    insert(items, 1, 4)
    insert(items, 5, 1, "die_once")
    insert(items, 6, 2)
    args = ("--mode", mode, "--workers", "1", "--batch", "8", "--backoff-min", "0.1", "--backoff-max", "0.2")
    listener = Listener(items, tmp_path, *args, "--poll", "0.5")
    listeners.append(listener)
    listener.wait_for(lambda lines: {line["key"] for line in lines if line["phase"] == "done"} == set(range(1, 8)))
    lines = listener.lines()
    attempts = attempts_by_key(lines)
    assert attempts[5] == [1, 2], attempts
    assert all(tries == list(range(1, len(tries) + 1)) for tries in attempts.values()), attempts
    killer = next(line["id"] for line in lines if line["key"] == 5)
    assert f"event {killer} (rec) attempt 1 failed: handler process died of SIGKILL (signal 9)" in listener.output()
    if mode == "ordered":
        done = [line["key"] for line in lines if line["phase"] == "done"]
        assert sorted(set(done), key=done.index) == list(range(1, 8)), done


def test_a_job_handed_to_a_process_that_just_died_is_settled_with_it(settings):
    """Handing over races with a process's death: the job stays with the
    slot, and the death, seen next, settles it as never started."""
    metrics = Metrics()
    pool = HandlerPool(ListenOptions(settings=settings, workers=1), owner(), metrics)
    try:
        (slot,) = pool.slots
        wait_until(lambda: pool.wait(0.5) == [slot] and pool.receive(slot) == [] and slot.ready, 60, "it to start")
        slot.process.kill()
        slot.process.join(10)
        pool.hand(slot, Job([], in_order=False))
        assert slot.queue and pool.wait(5) == [slot]
        assert pool.receive(slot) is None
        assert pool.reason(slot) == "handler process died of SIGKILL (signal 9)"
        pool.replace(slot)
        assert metrics.snapshot()["process_exits"] == {("handler", "SIGKILL"): 1}
    finally:
        pool.close()


HELD = """
SELECT (SELECT COUNT(*) FROM EVENT_SPAN WHERE EXPIRES_AT > EVENT_NOW())
     + (SELECT COUNT(*) FROM EVENT_LEASE WHERE HOLDER IS NOT NULL),
       (SELECT COUNT(*) FROM EVENT_LOG WHERE NOT DEAD)
FROM RDB$DATABASE
"""


def started(pool: HandlerPool) -> bool:
    for slot in pool.wait(0.5):
        pool.receive(slot)
    return all(slot.ready for slot in pool.slots)


def settled(dispatcher: Dispatcher, claimer: Claimer) -> bool:
    dispatcher.collect(claimer, 0.5)
    return not dispatcher.busy()


@pytest.mark.parametrize("mode", ["parallel", "ordered"])
def test_events_claimed_while_every_handler_process_died_are_handed_to_the_places_taken_before(items, mode):
    """A claim hands its events to the places it was sized for. Looking for
    places again after it found the processes that died meanwhile, replaced
    them with processes not ready yet, and found no place: the claimer died
    (ZeroDivisionError in parallel mode, IndexError in ordered mode) with the
    events in hand until their lease ran out. Now the jobs go to the dead
    processes, whose deaths settle them: nothing stays held."""
    insert(items, 1, 4)
    options = ListenOptions(settings=items, workers=2, mode=mode)
    with Database(items) as db:
        claimer = Claimer(db, owner(), 30)
        targets = {target.sub_id: target for target in load_targets(db)}
        dispatcher = Dispatcher(options, owner(), Metrics(), BatchSize(2), lambda _: True)
        try:
            wait_until(lambda: started(dispatcher.pool), 60, "the handler processes to start")
            places = dispatcher.open_slots()
            assert len(places) == 4, "two processes, each running one job and holding the next"
            for slot in dispatcher.pool.slots:  # both die while the claim runs
                slot.process.kill()
                slot.process.join(10)
            if mode == "parallel":
                events = claimer.claim(targets, 2 * len(places))
                dispatcher.hand_out(events, 2, places)
            else:
                ((stream, stream_targets),) = streams(targets.values()).items()
                events = claimer.claim_head(stream_targets, 2)
                dispatcher.hand_stream(stream, events, places[0])
            assert events and query(items, HELD)[0][0] > 0
            wait_until(lambda: settled(dispatcher, claimer), 60, "the jobs' settling")
            dispatcher.acknowledge(claimer)
        finally:
            dispatcher.close()
    assert query(items, HELD) == [(0, 4)], "no event held, none handled, none dead"


# The listener's transactions, their age and their owner (``host:pid``):
# its attachments carry SUBS_WORKER.
LISTENER_TRANSACTIONS = """
SELECT t.MON$TRANSACTION_ID, DATEDIFF(MILLISECOND FROM t.MON$TIMESTAMP TO CURRENT_TIMESTAMP), v.MON$VARIABLE_VALUE
FROM MON$TRANSACTIONS t
JOIN MON$CONTEXT_VARIABLES v ON v.MON$ATTACHMENT_ID = t.MON$ATTACHMENT_ID
WHERE v.MON$VARIABLE_NAME = 'SUBS_WORKER'
"""
# Whether transaction ? is still active, seen from a transaction started
# after it: MON$TRANSACTIONS alone can list one that ended long ago. An
# attachment publishes its monitoring data when asked, but once asked it
# answers again only after its next call into the engine, so an idle
# attachment's data can be what it published during its last commit (seen on
# Firebird 3 and 5: a transaction listed, and growing older, a second after
# its commit, while the oldest active one was past it).
STILL_ACTIVE = """
SELECT COUNT(*) FROM MON$TRANSACTIONS mine
WHERE mine.MON$TRANSACTION_ID = CURRENT_TRANSACTION AND mine.MON$OLDEST_ACTIVE <= ?
AND EXISTS (SELECT * FROM MON$TRANSACTIONS t WHERE t.MON$TRANSACTION_ID = ?)
"""
# A frame of the driver's calls into the engine (or the client library).
ENGINE_CALL = "(driver/interfaces.py:"


@pytest.mark.parametrize("mode", ["ordered", "parallel"])
def test_no_transaction_stays_open_while_a_handler_runs_or_the_listener_idles(items, tmp_path, listeners, mode):
    """Claims, acknowledgements and lease renewals are short transactions:
    sampled every 0.2 s during a 3 s handler and 3 s of idling, none of the
    listener's attachments keeps a transaction for a second.

    A transaction listed a second old is judged by its process's stacks once
    it is known to be still active: one open while no thread of the process
    is inside the engine is held by subs, and fails the test. Inside the
    engine it is the engine's time: on a loaded machine the embedded engine
    once needed 3.8 s to start an acknowledgement's transaction (the claimer
    was in start_transaction, writing a page), which is reported, not failed."""
    listener = Listener(items, tmp_path, "--mode", mode, "--lease", "3", "--poll", "0.5")
    listeners.append(listener)
    insert(items, 1, 1, note="sleep3")
    listener.wait_for(lambda lines: lines and lines[-1]["phase"] == "start")
    judged, held, slow = set(), [], []
    deadline = time.monotonic() + 6
    while time.monotonic() < deadline:
        for transaction, age, worker in query(items, LISTENER_TRANSACTIONS):
            if age < 1000 or transaction in judged:
                continue
            judged.add(transaction)
            stacks = py_spy_dump(int(worker.rpartition(":")[2]), tmp_path / f"stacks-{transaction}.txt")
            if query(items, STILL_ACTIVE, (transaction, transaction)) != [(1,)]:
                continue  # it ended (or had ended, and its attachment was idle since)
            report = f"transaction {transaction} of {worker}, {age} ms old; its process:\n{stacks}"
            (slow if ENGINE_CALL in stacks else held).append(report)
        time.sleep(0.2)
    assert handled(listener.lines()) == [1], "the handler ran, and ended within the samples"
    assert query(items, TAGGED) != [(0,)], "the listener's attachments were there to sample"
    assert not held, "\n".join(held)
    for report in slow:
        warnings.warn(f"a listener transaction took a second inside the engine: {report}")


@pytest.mark.parametrize("mode", ["ordered", "parallel"])
def test_a_handler_process_that_grew_past_the_memory_limit_is_replaced_between_jobs(items, tmp_path, listeners, mode):
    """Each event makes its handler process keep 40 MiB more; past the limit
    a fresh process takes over after the job. In parallel mode the next job
    is already in the old process's pipe: it is given back, not failed, so
    every event is handled once, at its first attempt."""
    port = free_port()
    limit = ("--handler-memory-limit", "100")
    listener = Listener(
        items, tmp_path, "--mode", mode, "--workers", "1", "--batch", "1", *limit, "--metrics-port", str(port)
    )
    listeners.append(listener)
    insert(items, 1, 6, "grow40")
    listener.wait_for(lambda lines: len(handled(lines)) == 6)
    lines = listener.lines()
    assert sorted(handled(lines)) == list(range(1, 7))
    assert {line["attempt"] for line in lines} == {1}
    pids = [line["pid"] for line in lines if line["phase"] == "done"]
    assert 2 <= len(set(pids)) <= 4, pids  # each process takes two or three events

    def each_replaced_process_counted() -> bool:
        grew = listener.output().count("a fresh one takes its place")  # each logs once, as it leaves
        counted = f'subs_process_exits_total{{process="handler",how="recycled"}} {grew}\n'
        return grew >= len(set(pids)) - 1 and counted in scrape_metrics(port)

    wait_until(each_replaced_process_counted, 20, "every replaced process in the log and the metrics")
    assert "WARNING" not in listener.output(), listener.output()
