"""`subs listen` while the database is shut down for maintenance or the
claimer keeps dying. A listener rides through and says so without burying
its log; a drain, a job that must end, gives up once nothing but failures
happened for --drain-patience: its summary, a one-line error, exit 1, and
the events it could not settle left for the next run."""

from __future__ import annotations

import os
import re
import signal
import time

import pytest

from conftest import wait_until
from listening import Listener, handled, insert, remaining, shut_down, spawned_children


def test_a_listener_rides_through_a_database_shutdown_without_flooding_its_log(items, tmp_path, listeners):
    """While the database is shut down, the listener's housekeeping tries
    again after pauses that grow (it warned every second, the length of the
    outage, while a dead claimer's events waited to be failed); once the
    database is online, events are delivered again."""
    listener = Listener(items, tmp_path, "--poll", "0.5")
    listeners.append(listener)
    insert(items, 1, 1)
    listener.wait_for(lambda lines: handled(lines) == [1])
    # Acknowledged too: a shutdown just before it would deliver event 1 again (CI run 103, fb4).
    wait_until(lambda: remaining(items) == 0, what="event 1 acknowledged")
    with shut_down(items):
        time.sleep(12)
        during = listener.output()
    insert(items, 2, 1)
    listener.wait_for(lambda lines: handled(lines) == [1, 2], timeout=60)
    assert "database connection lost" in during, during
    warned = re.findall(r"WARNING subs.listener: housekeeping: .*", during)
    pauses = [int(pause) for pause in re.findall(r"housekeeping: .*; trying again in (\d+)s", during)]
    assert 1 <= len(warned) <= 5 and len(pauses) == len(warned) and max(pauses) >= 4, during


def test_a_drain_gives_up_when_the_database_stays_shut_down(items, tmp_path, listeners):
    """The database shut down while a handler runs: the claimer loses its
    attachment, its successor cannot attach, and after --drain-patience the
    drain ends instead of reconnecting for ever (a listener without --drain
    goes on trying). What is left cannot be read, and the summary says so."""
    insert(items, 1, 1, "sleep2")
    listener = Listener(items, tmp_path, "--drain", "--drain-patience", "3")
    listeners.append(listener)
    listener.wait_for(lambda lines: [line["phase"] for line in lines] == ["start"])
    with shut_down(items):
        assert listener.finish(60) == 1, listener.output()
    output = listener.output()
    assert "Traceback" not in output, output
    assert re.search(r"ERROR subs.worker: giving up the drain: the database kept failing for \d+s: ", output), output
    summary, error = output.splitlines()[-2:]
    assert summary.startswith("drained: 0 handled, 0 failed attempt(s), 0 died; left: not known ("), output
    assert error == (
        "Error: the drain was given up: the database kept failing (see the log); the events left wait for the next run"
    )
    assert remaining(items) == 1  # the acknowledgement the shutdown cut off


@pytest.mark.parametrize("engine", ["fb5"], indirect=True)
def test_a_drain_gives_up_on_a_claimer_that_keeps_dying(items, tmp_path, listeners):
    """A claimer killed again and again before it settles anything (here
    while its handler hangs) is started anew until that has gone on for
    --drain-patience; then the drain ends, where a listener without --drain
    keeps restarting it after pauses that grow."""
    insert(items, 1, 1, "hang")
    listener = Listener(items, tmp_path, "--drain", "--drain-patience", "2")
    listeners.append(listener)
    killed: list[int] = []
    deadline = time.monotonic() + 60
    while listener.process.poll() is None:
        assert time.monotonic() < deadline, listener.output()
        started = len(listener.lines())
        if started > len(killed):  # the newest claimer's handler has the event
            (claimer,) = spawned_children(listener.process.pid)
            os.kill(claimer, signal.SIGKILL)
            killed.append(claimer)
        time.sleep(0.05)
    assert listener.finish() == 1, listener.output()
    output = listener.output()
    assert len(killed) >= 2 and f"giving up the drain: worker pid {killed[-1]} died of SIGKILL" in output, output
    assert "Error: the drain was given up: the claimer kept dying without settling an event for " in output, output
    assert "Traceback" not in output, output
    assert remaining(items) == 1
