"""Ctrl-C, Ctrl-Z and closing the terminal of `subs listen` run in a
terminal, where they signal every process of the listener at once. Ctrl-Z:
a stopped process of an embedded database holds up every other process of
it, the application's included (docs/OPERATIONS.md, "The embedded engine")."""

from __future__ import annotations

import itertools
import logging
import os
import signal
import subprocess
import sys
import time

from subscriptions.db.terminal_stop import REFUSED
from subscriptions.delivery.options import ListenOptions
from subscriptions.delivery.supervisor import Supervisor

from conftest import wait_until
from listening import Listener, handled, insert, spawned_children
from processes import group, hangup, state


def test_ctrl_z_stops_a_listener_only_where_that_holds_up_nobody(items, tmp_path, listeners):
    """On an embedded database the listener's processes ignore Ctrl-Z and the
    listener says why; the application's writes and their delivery go on. On
    a server Ctrl-Z stops them as usual, and once continued they go on."""
    listener = Listener(items, tmp_path, "--mode", "parallel", "--workers", "2", job=True)
    listeners.append(listener)
    insert(items, 1, 1)
    listener.wait_for(lambda lines: handled(lines) == [1])
    members = group(listener.process.pid)
    assert len(members) >= 5, "the listener, the resource tracker, the claimer and 2 handler processes"

    os.killpg(listener.process.pid, signal.SIGTSTP)
    if items.is_remote:
        wait_until(lambda: {state(pid) for pid in members} == {"T"}, 10, "every process of the listener to stop")
        assert REFUSED not in listener.output()
        os.killpg(listener.process.pid, signal.SIGCONT)
    else:
        wait_until(lambda: REFUSED in listener.output(), 10, "the listener to say it ignores Ctrl-Z")
        settled = time.monotonic() + 1.0  # a stop takes effect as the signal arrives: well within this
        while time.monotonic() < settled:
            assert [pid for pid in members if state(pid) == "T"] == []
            time.sleep(0.05)
        assert listener.output().count(REFUSED) == 1, listener.output()
    insert(items, 2, 1)
    listener.wait_for(lambda lines: handled(lines) == [1, 2])


def storm(pid: int, gap: float = 0.0001, longest: float = 2.0) -> None:
    """SIGINT and SIGTERM in turn at ``pid``, one every ``gap`` seconds, until
    it is gone (or ``longest`` seconds have passed)."""
    deadline = time.perf_counter() + longest
    for count in itertools.count():
        try:
            os.kill(pid, signal.SIGTERM if count % 2 else signal.SIGINT)
        except ProcessLookupError:
            return
        pause_until = time.perf_counter() + gap
        while time.perf_counter() < pause_until:
            pass
        if pause_until > deadline:
            return


def test_signals_in_quick_succession_stop_a_listener_gracefully(items, tmp_path, listeners):
    """Ctrl-C signals every process of the job: the claimer gets SIGINT, and
    SIGTERM from the supervisor a moment later. The claimer's handler of the
    second used to wait for ever for a lock its handler of the first held (3
    Ctrl-Cs in 10 by hand): the listener then waited out its --grace and
    killed the claimer. Here the claimer gets both in turn every 0.1 ms until
    it ends, five times over; before the fix, its handlers nested until
    RecursionError or hung."""
    for attempt in range(5):
        listener = Listener(items, tmp_path, "--grace", "10", job=True)
        listeners.append(listener)
        insert(items, attempt + 1, 1)
        listener.wait_for(lambda lines: attempt + 1 in handled(lines))
        (claimer,) = spawned_children(listener.process.pid)
        storm(claimer)
        os.killpg(listener.process.pid, signal.SIGINT)
        assert listener.finish(60) == 0, listener.output()
        output = listener.output()
        for sign_of_trouble in ("grace period over", "Traceback", "Exception ignored"):
            assert sign_of_trouble not in output, f"try {attempt + 1}: {output[-3000:]}"


def test_closing_its_terminal_stops_a_listener_gracefully_unless_it_runs_under_nohup(items, tmp_path, listeners):
    """The terminal's hangup reaches every process of the job. A handler
    running then finishes and the listener exits 0, as on Ctrl-C; before,
    each process died at once and the event waited out its lease. Started
    with SIGHUP ignored (nohup), the listener goes on."""
    with hangup(signal.SIG_DFL):  # as a terminal starts it
        listener = Listener(items, tmp_path, "--mode", "parallel", "--workers", "2", job=True)
    listeners.append(listener)
    insert(items, 1, 1, "sleep2")
    listener.wait_for(lambda lines: [line["id"] for line in lines] == [1])  # its handler has started
    os.killpg(listener.process.pid, signal.SIGHUP)
    assert listener.finish(60) == 0, listener.output()
    assert handled(listener.lines()) == [1]
    output = listener.output()
    assert "stopped: 1 handled, 0 failed attempt(s), 0 died since the start" in output, output
    for sign_of_trouble in ("grace period over", "Traceback", "Exception ignored"):
        assert sign_of_trouble not in output, output

    with hangup(signal.SIG_IGN):  # as nohup starts it
        under_nohup = Listener(items, tmp_path, "--mode", "parallel", "--workers", "2", job=True)
    listeners.append(under_nohup)
    insert(items, 2, 1)
    under_nohup.wait_for(lambda lines: handled(lines) == [1, 2])
    os.killpg(under_nohup.process.pid, signal.SIGHUP)
    insert(items, 3, 1)
    under_nohup.wait_for(lambda lines: handled(lines) == [1, 2, 3])
    assert under_nohup.process.poll() is None and "stopping" not in under_nohup.output()
    os.killpg(under_nohup.process.pid, signal.SIGINT)
    assert under_nohup.finish(60) == 0, under_nohup.output()


STARTING_A_CLAIMER = """
import os, signal, subprocess, sys
from subscriptions.delivery import lifeline

taken = []
signal.signal(signal.SIGHUP, lambda signum, frame: taken.append(signum))  # as the supervisor's
with lifeline.stop_signals_held():  # as the supervisor starts a claimer
    claimer = subprocess.Popen([sys.executable, "-c", sys.argv[1]])
    os.killpg(0, signal.SIGHUP)  # the terminal closes meanwhile
print(taken, claimer.wait())
"""

CLAIMER_STARTING = """
import time
from subscriptions.delivery import lifeline

time.sleep(0.5)  # importing its modules
lifeline.leave_hangup_to_the_parent()  # as worker.main starts
lifeline.take_held_stop_signals()
time.sleep(0.2)
"""


def test_a_hangup_as_the_supervisor_starts_a_claimer_stops_the_supervisor_alone():
    """The supervisor ignored SIGHUP while it started a claimer, for the
    claimer to inherit: a terminal closed in those milliseconds left the
    listener running. It now holds it back meanwhile and takes it after;
    the new claimer, which holds it too, drops it as it starts and lives on
    (the supervisor stops it gracefully)."""
    started = subprocess.run(
        [sys.executable, "-c", STARTING_A_CLAIMER, CLAIMER_STARTING],
        capture_output=True,
        text=True,
        timeout=60,
        process_group=0,
    )
    assert (started.returncode, started.stdout) == (0, f"[{int(signal.SIGHUP)}] 0\n"), started.stderr


def test_the_supervisors_signal_handler_only_counts_and_its_loop_acts(items, caplog):
    """The supervisor's handler logged and stopped its claimer itself, as
    the claimer's did before it nested under a burst of signals until
    RecursionError; a handler that logs can also meet its stream busy with
    the write the signal interrupted. It now counts the signal, and the
    loop, which turns every 0.1 s, acts on it."""
    supervisor = Supervisor(ListenOptions(settings=items))
    with caplog.at_level(logging.INFO, logger="subs"):
        supervisor._signal(signal.SIGTERM, None)
        assert (caplog.records, supervisor.stopping) == ([], False)
        supervisor._act_on_signals()
        assert supervisor.stopping and caplog.messages == ["stopping: letting handlers finish (up to 30.0s)"]
        supervisor._signal(signal.SIGINT, None)
        supervisor._signal(signal.SIGHUP, None)
        supervisor._act_on_signals()
    assert caplog.messages[1:] == ["second signal: stopping workers at once"] * 2
