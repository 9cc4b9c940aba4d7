"""Ctrl-Z and an embedded database. A process of the embedded engine that is
stopped keeps its locks and answers none of the requests the other processes
send it: every other process of that database, the application's included,
waits (new attachments too) until it runs again, and every CREATE DATABASE
sharing its lock directory fails after 10 s (docs/OPERATIONS.md, "The
embedded engine"). So subs's processes on an embedded database do not stop on
the terminal's stop key (SIGTSTP): the command says so, and the processes it
starts ignore it. On a Firebird server the server holds the locks: Ctrl-Z
works as usual. SIGSTOP cannot be refused: ``stopped_sharers`` names the
stopped processes a stalled listener may be waiting for."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from subscriptions.db.processes import cmdline, state
from subscriptions.db.settings import ConnectionSettings

# Characters of a stopped process's command line that a log line shows.
COMMAND_SHOWN = 120
REFUSED = (
    "Ctrl-Z ignored: stopped, subs would hold up every process of this embedded database, "
    "your application's included, until it runs again; Ctrl-C stops it"
)


def _applies(settings: ConnectionSettings) -> bool:
    """An embedded database, and the main thread: only it sets a process's
    signals (in a host program's other threads, this module does nothing)."""
    return not settings.is_remote and threading.current_thread() is threading.main_thread()


def refuse_terminal_stop(settings: ConnectionSettings, say: Callable[[str], object]) -> None:
    """On an embedded database, have Ctrl-Z call ``say(REFUSED)`` instead of
    stopping this process."""
    if not _applies(settings):
        return
    signal.signal(signal.SIGTSTP, lambda signum, frame: say(REFUSED))


@contextlib.contextmanager
def terminal_stop_ignored(settings: ConnectionSettings) -> Iterator[None]:
    """On an embedded database, ignore Ctrl-Z meanwhile, so that the processes
    started inside ignore it from their start on, and so do theirs (exec
    resets a handler to the default, stopping, but keeps SIG_IGN)."""
    if not _applies(settings):
        yield
        return
    previous = signal.signal(signal.SIGTSTP, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGTSTP, previous)


def stopped_sharers(but: int | None) -> list[str]:
    """The processes (but ``but``, and this one) holding a lock on a file of
    the embedded engine's lock directory that are stopped, each as "PID
    (command line)". Any of them may hold up every process of its databases,
    and one stopped in an attach every attach sharing the directory
    (docs/FIREBIRD-BUGS.md, 12)."""
    directory = Path(os.environ.get("FIREBIRD_LOCK", "/tmp/firebird"))
    files = set()
    try:
        for entry in directory.iterdir():
            with contextlib.suppress(OSError):  # gone meanwhile
                found = entry.stat()
                files.add((found.st_dev, found.st_ino))
        table = Path("/proc/locks").read_text()
    except OSError:
        return []
    holders: set[int] = set()
    for line in table.splitlines():
        fields = line.split()
        if len(fields) < 6 or fields[1] == "->":  # a request waiting for the lock
            continue
        with contextlib.suppress(ValueError):
            major, minor, inode = fields[5].split(":")
            if (os.makedev(int(major, 16), int(minor, 16)), int(inode)) in files:
                holders.add(int(fields[4]))
    others = sorted(pid for pid in holders if pid not in (but, os.getpid()))
    return [f"{pid} ({_command(pid)})" for pid in others if state(pid) in ("T", "t")]


def _command(pid: int) -> str:
    """Its command line on one line of a log, cut at COMMAND_SHOWN characters."""
    line = " ".join(" ".join(cmdline(pid) or ["?"]).split())
    return line if len(line) <= COMMAND_SHOWN else line[: COMMAND_SHOWN - 3] + "..."
