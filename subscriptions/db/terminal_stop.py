"""Ctrl-Z and an embedded database. A process of the embedded engine that is
stopped keeps its locks and answers none of the requests the other processes
send it: every other process of that database, the application's included,
waits (new attachments too) until it runs again, and every CREATE DATABASE
sharing its lock directory fails after 10 s (docs/OPERATIONS.md, "The
embedded engine"). So subs's processes on an embedded database do not stop on
the terminal's stop key (SIGTSTP): the command says so, and the processes it
starts ignore it. On a Firebird server the server holds the locks: Ctrl-Z
works as usual. SIGSTOP cannot be refused."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator

from subscriptions.db.settings import ConnectionSettings

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
