"""Disconnecting the attachments of dead workers.

A SIGKILLed worker's attachment normally goes away with its socket (server) or
its process (embedded). But a Firebird 3 server was seen keeping such
attachments, with their open claim transactions, for 15 minutes and more after
a server restart: their record locks hold the head of an ordered subscription,
which then stops. So every worker tags its attachments with its owner string
(``host:pid``) and its start time, and the listener disconnects tagged
attachments of this host whose process is gone, or whose pid now belongs to a
later process: at start-up (the workers of a crashed listener), when a worker
dies, and every REAP_INTERVAL.
"""

from __future__ import annotations

import logging
import os
import socket

from subscriptions.db import sql
from subscriptions.db.connection import Database

log = logging.getLogger("subs.reaper")

REAP_INTERVAL = 60.0


def owner(pid: int | None = None) -> str:
    """A process of this host (default: this one) as a claim owner and
    attachment tag: ``host:pid``."""
    return f"{socket.gethostname()}:{pid or os.getpid()}"


def tag(db: Database, worker: str, serves: str) -> None:
    """Mark ``db``'s attachment as belonging to ``worker`` (a live process of
    this host: this one, or the claimer of this handler process), which
    ``serves`` (``serving.serves``)."""
    started = (_stat(int(worker.rpartition(":")[2])) or ("", ""))[1]
    with db.transaction() as cursor:
        cursor.execute(sql.load("attachments")["tag"], (worker, serves, started))
        cursor.fetchone()


def is_dead_here(worker: str, started: str | None = None) -> bool:
    """True if ``worker`` (``host:pid``) was a process of this host that is
    gone or a zombie, or whose pid a later process has taken (its start time
    is not ``started``, when that is known). A killed listener's workers stay
    zombies until init collects them (up to a second here, for ever under an
    init that never does), and a zombie's attachment may outlive it on a
    server as any dead process's can."""
    host, _, pid = worker.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # another user's: alive, or a zombie
        pass
    try:
        found = _stat(int(pid))
    except OSError:  # unreadable (/proc mounted with hidepid): it answers signals
        return False
    if found is None:  # collected since the signal
        return True
    state, start = found
    return state in ("Z", "X") or bool(started and start and start != started)


def _stat(pid: int) -> tuple[str, str] | None:
    """The state letter of ``pid`` and its start time, in clock ticks since
    boot (Linux's /proc/PID/stat, fields 3 and 22); None when it is gone, and
    two "" where there is no /proc. With the pid, the start time tells a
    process from a later one that reuses the pid."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return None if os.path.isdir("/proc") else ("", "")
    return fields[0], fields[19]


def reap(db: Database) -> list[str]:
    """Disconnect the attachments of this host's dead workers; returns their
    owners. Only a server keeps attachments of dead processes: on the
    embedded engine they end with their process, so there the listener
    spares every attached process the MON$ snapshot (each dumps its state
    for it), every minute and after every worker death."""
    if not db.settings.is_remote:
        return []
    statements = sql.load("attachments")
    with db.transaction() as cursor:
        cursor.execute(statements["workers"])
        tagged = cursor.fetchall()
    dead = [(attachment, worker) for attachment, worker, started in tagged if is_dead_here(worker, started)]
    for attachment, worker in dead:
        with db.transaction() as cursor:
            cursor.execute(statements["disconnect"], (attachment,))
        log.warning("disconnected attachment %s left by dead worker %s", attachment, worker)
    return [worker for _, worker in dead]
