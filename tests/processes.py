"""Processes of the tests as /proc shows them, and killing a listener's
process group so that none of it is left, not even as a zombie.

A SIGKILLed process stays a zombie until its parent reaps it, and the embedded
engine takes a zombie for a live process (it asks ``kill(pid, 0)``): the
zombie's locks stay held, and every other process of its database waits in
the engine until some time after the reap (docs/FIREBIRD-BUGS.md, 10). A
listener's claimer and handler processes die with it as orphans, which init
reaps when it gets round to it: on some machines seconds later. So the test
process reaps them itself: it is their child subreaper for the kill.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from subscriptions.delivery import lifeline


def stat(pid: int) -> tuple[int, int] | None:
    """(ppid, pgrp) of a process, or None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return int(fields[1]), int(fields[2])


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def all_pids() -> list[int]:
    return [int(entry.name) for entry in Path("/proc").iterdir() if entry.name.isdigit()]


def state(pid: int) -> str:
    """The process's state as /proc shows it (R, S, T stopped, Z zombie, ...);
    empty when it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0]
    except (OSError, IndexError):
        return ""


def alive(pid: int) -> bool:
    """Running: neither gone nor a zombie."""
    return state(pid) not in ("", "Z")


def descendants(pid: int) -> list[int]:
    """The processes ``pid`` started, and theirs, children before
    grandchildren; only those of our user, so never the Firebird 3 server
    (user firebird), even when a test process has become its subreaper."""
    children: dict[int, list[int]] = {}
    for other in all_pids():
        parent = (stat(other) or (0, 0))[0]
        with contextlib.suppress(OSError):
            if parent and os.stat(f"/proc/{other}").st_uid == os.getuid():
                children.setdefault(parent, []).append(other)
    tree: list[int] = []
    unvisited = [pid]
    while unvisited:
        below = children.get(unvisited.pop(0), [])
        tree.extend(below)
        unvisited.extend(below)
    return tree


def group(pgid: int) -> list[int]:
    """The processes of process group ``pgid``, zombies included."""
    return [pid for pid in all_pids() if (stat(pid) or (0, 0))[1] == pgid]


@contextlib.contextmanager
def hangup(disposition: signal.Handlers) -> Iterator[None]:
    """Start processes meanwhile with SIGHUP at ``disposition`` (SIG_IGN as
    nohup starts them, SIG_DFL as a terminal does), whatever this test
    process was started with: under nohup, the test run's own SIG_IGN would
    be inherited. Main thread only."""
    with _started_with(signal.SIGHUP, disposition):
        yield


@contextlib.contextmanager
def interrupt(disposition: signal.Handlers) -> Iterator[None]:
    """Start processes meanwhile with SIGINT at ``disposition`` (SIG_DFL as a
    terminal starts them), whatever this test process has: a shell starts
    a background job with SIGINT ignored, and a child inherits that."""
    with _started_with(signal.SIGINT, disposition):
        yield


@contextlib.contextmanager
def _started_with(signum: signal.Signals, disposition: signal.Handlers) -> Iterator[None]:
    previous = signal.signal(signum, disposition)
    try:
        yield
    finally:
        signal.signal(signum, previous)


@contextlib.contextmanager
def subreaper() -> Iterator[None]:
    """Make this process the reaper of the orphans its descendants leave
    meanwhile (Linux's child subreaper), instead of init."""
    if not lifeline.adopt_orphans():
        raise OSError("this system cannot make the test process a child subreaper (prctl)")
    try:
        yield
    finally:
        lifeline.adopt_orphans(False)


def reap(pid: int, pgid: int, deadline: float) -> None:
    """Wait until ``pid``, a member of process group ``pgid`` that was killed
    or dies with its parent inside ``subreaper()``, is reaped: by us, once
    its dead parent has left it to us, or by its parent (a supervisor reaping
    its claimer). An orphan init had before is init's to reap."""
    while True:
        try:
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return
        except ChildProcessError:
            found = stat(pid)
            if found is None or found[1] != pgid:
                return
            parent = found[0]
            if parent != os.getpid() and (stat(parent) or (0, 0))[1] != pgid:
                return
        if time.monotonic() > deadline:
            raise AssertionError(f"process {pid} of group {pgid} was still not reaped")
        time.sleep(0.01)


def kill_group(process: subprocess.Popen[bytes] | subprocess.Popen[str], timeout: float = 30.0) -> list[int]:
    """SIGKILL ``process``, the leader of a process group of its own, and
    every process of its group; return their pids once each of them is reaped."""
    with subreaper():
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        members = group(process.pid)  # a dead one keeps its group until reaped
        process.wait(timeout)
        deadline = time.monotonic() + timeout
        for pid in members:
            if pid != process.pid:
                reap(pid, process.pid, deadline)
    return members
