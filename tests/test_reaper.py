"""Attachments left by dead workers: the listener disconnects them, so their
open claim transactions cannot hold an ordered subscription's head for ever
(tests/SOAK-NOTES.md, finding 6). Only a server keeps such attachments: on
the embedded engine they end with their process, and the listener does not
look for them there."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys

import pytest

from subscriptions.db.connection import Database
from subscriptions.delivery import reaper, serving

from conftest import query, wait_until
from listening import Listener, handled, insert, remaining


def dead_pid() -> int:
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


@pytest.fixture
def zombie_pid():
    """A child of this process that has exited and is not yet collected: what
    a killed listener's workers are until init collects them."""
    process = subprocess.Popen(["true"])
    wait_until(lambda: stat_field(process.pid, 3) == "Z", 10, "the child to exit")
    yield process.pid
    process.wait()


def stat_field(pid: int, number: int) -> str:
    """Field ``number`` of /proc/PID/stat as proc(5) counts them: 3 the
    state letter, 4 the parent's pid, 22 the start time in clock ticks."""
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[number - 3]


HOLDER = """
import os
import sys
from subscriptions.delivery import reaper
from subscriptions.db.settings import ConnectionSettings
from subscriptions.db.connection import Database

db = Database(ConnectionSettings(sys.argv[1], sys.argv[2], os.environ.get("ISC_PASSWORD") or None))
reaper.tag(db, sys.argv[3], "ordered|*")
if sys.argv[5]:
    db.fetch_value("SELECT RDB$SET_CONTEXT('USER_SESSION', 'SUBS_STARTED', ?) FROM RDB$DATABASE", sys.argv[5])
db.connection.begin()
cursor = db.connection.cursor()
cursor.execute("UPDATE EVENT_LOG SET ATTEMPTS = ATTEMPTS + 1 "
               f"WHERE EVENT_ID = (SELECT {sys.argv[4]}(EVENT_ID) FROM EVENT_LOG)")
print(cursor.affected_rows, flush=True)
sys.stdin.read()
"""


class Holder:
    """A process whose attachment is tagged as worker ``owner`` (started at
    ``started``, if given) and holds the newest event (or the oldest: ``end``
    MIN) in an uncommitted claim, like the attachments the Firebird 3 server
    kept after SIGKILLs (the process itself plays the server's part)."""

    def __init__(self, settings, owner: str, end: str = "MAX", started: str = "") -> None:
        self.settings, self.owner = settings, owner
        self.process = subprocess.Popen(
            [sys.executable, "-c", HOLDER, settings.dsn, settings.effective_user, owner, end, started],
            env={**os.environ, **({"ISC_PASSWORD": settings.password} if settings.password else {})},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout.readline().strip() == "1"

    def attached(self) -> bool:
        rows = query(
            self.settings,
            "SELECT COUNT(*) FROM MON$CONTEXT_VARIABLES "
            "WHERE MON$VARIABLE_NAME = 'SUBS_WORKER' AND MON$VARIABLE_VALUE = ?",
            (self.owner,),
        )
        return rows[0][0] > 0

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(30)


@pytest.fixture
def holders():
    made: list[Holder] = []
    yield made
    for holder in made:
        holder.close()


def test_is_dead_here_only_for_gone_processes_of_this_host():
    host = socket.gethostname()
    assert reaper.is_dead_here(f"{host}:{dead_pid()}")
    assert not reaper.is_dead_here(f"{host}:{os.getpid()}")
    assert not reaper.is_dead_here(f"{host}:1")  # alive, another user's or ours
    assert not reaper.is_dead_here(f"elsewhere.example:{dead_pid()}")
    assert not reaper.is_dead_here("not-an-owner")


def test_a_pid_that_a_later_process_took_is_dead():
    me, mine = reaper.owner(), stat_field(os.getpid(), 22)
    assert not reaper.is_dead_here(me, mine)
    assert reaper.is_dead_here(me, str(int(mine) - 1))
    assert not reaper.is_dead_here(me, None)  # tagged by a listener from before start times
    assert reaper.is_dead_here(f"{socket.gethostname()}:1", "0")  # another user's process: its start is read too


def test_a_zombie_is_dead(zombie_pid):
    """It answers signals, yet its attachment is as dead as any (the second
    listener of test_nats's kill test once idled 60 s behind its predecessor's
    workers, killed a moment before it reaped)."""
    os.kill(zombie_pid, 0)
    assert reaper.is_dead_here(f"{socket.gethostname()}:{zombie_pid}")


@pytest.mark.parametrize("engine", ["fb3"], indirect=True)
def test_start_up_disconnects_dead_workers_attachments_and_no_live_one(items, tmp_path, listeners, holders, zombie_pid):
    insert(items, 1, 3)
    host = socket.gethostname()
    dead = [Holder(items, f"{host}:{dead_pid()}", "MAX"), Holder(items, f"{host}:{zombie_pid}", "MIN")]
    holders.extend(dead)
    assert all(holder.attached() for holder in dead)
    live = Database(items)
    reaper.tag(live, reaper.owner(), "ordered|*")  # a live worker: this test process
    try:
        listener = Listener(items, tmp_path, "--drain")
        listeners.append(listener)
        assert listener.finish() == 0, listener.output()
        assert handled(listener.lines()) and len(handled(listener.lines())) == 3
        assert remaining(items) == 0
        assert not any(holder.attached() for holder in dead)
        assert live.fetch_value("SELECT 1 FROM RDB$DATABASE") == 1
        assert "left by dead worker" in listener.output()
    finally:
        live.close()


@pytest.mark.parametrize("engine", ["fb3"], indirect=True)
def test_an_attachment_whose_pid_a_later_process_took_is_disconnected(items, holders):
    """The server keeps a dead worker's attachment while a live process has
    taken its pid (here: this test's process). Its start time gives it away:
    it is not counted as a listener, and the listener disconnects it. A
    handler process's attachment, tagged with its live claimer, stays."""
    insert(items, 1, 2)
    me = reaper.owner()
    reused = Holder(items, me, "MIN", started=str(int(stat_field(os.getpid(), 22)) - 1))
    handler = Holder(items, me, "MAX")  # tagged as the claimer's (this process's) handler process
    holders.extend([reused, handler])
    db = Database(items)
    try:
        with db.transaction() as cursor:
            assert [consumer.owner for consumer in serving.consumers(cursor)] == [me]
        assert reaper.reap(db) == [me]
        assert query(items, "SELECT COUNT(*) FROM MON$CONTEXT_VARIABLES WHERE MON$VARIABLE_NAME = 'SUBS_WORKER'") == [
            (1,)
        ]
    finally:
        db.close()


@pytest.mark.parametrize("engine", ["fb3"], indirect=True)
def test_a_dead_worker_makes_the_listener_look_for_its_attachments(items, tmp_path, listeners, holders):
    """Ordered mode behind an event held by a dead worker's attachment: it
    moves on once the listener reaps after a claimer of its own dies."""
    listener = Listener(items, tmp_path, "--poll", "0.3", "--lease", "2")
    listeners.append(listener)
    insert(items, 1, 1, "sleep30")
    listener.wait_for(lambda lines: lines)
    insert(items, 2, 1)
    holders.append(Holder(items, f"{socket.gethostname()}:{dead_pid()}"))  # holds event 2
    os.kill(int(stat_field(listener.lines()[0]["pid"], 4)), signal.SIGKILL)  # the claimer of the handler process
    listener.wait_for(lambda lines: len(handled(lines)) == 2, timeout=60)
    assert [line["key"] for line in listener.lines() if line["phase"] == "done"] == [1, 2]
    wait_until(lambda: remaining(items) == 0, 10, "the handled events to be acknowledged")
    assert not holders[0].attached()


def tagged(settings, owner: str) -> bool:
    rows = query(
        settings,
        "SELECT COUNT(*) FROM MON$CONTEXT_VARIABLES WHERE MON$VARIABLE_NAME = 'SUBS_WORKER' AND MON$VARIABLE_VALUE = ?",
        (owner,),
    )
    return rows[0][0] > 0


@pytest.mark.parametrize("engine", ["fb5"], indirect=True)
def test_on_the_embedded_engine_a_killed_claimers_attachments_end_with_it(items, tmp_path, listeners):
    """Why the listener does not reap on the embedded engine."""
    listener = Listener(items, tmp_path, "--poll", "0.3")
    listeners.append(listener)
    insert(items, 1, 1)
    listener.wait_for(lambda lines: handled(lines))
    claimer = reaper.owner(int(stat_field(listener.lines()[0]["pid"], 4)))
    assert tagged(items, claimer)
    os.kill(int(claimer.rpartition(":")[2]), signal.SIGKILL)
    wait_until(lambda: not tagged(items, claimer), 30, "the killed claimer's attachments to end")
    insert(items, 2, 1)
    listener.wait_for(lambda lines: len(handled(lines)) == 2, timeout=60)
    assert "left by dead worker" not in listener.output()
