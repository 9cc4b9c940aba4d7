"""How a command stops on SIGTERM and Ctrl-C where it has no handling of
its own (`subs listen`, `subs web` and `subs backfill` have theirs).

The client library takes SIGINT and SIGTERM over at a process's first
attach and, on either, shuts its engine down under the command (a long
statement ends at once), then calls the handler it replaced. With none of
ours for SIGTERM, `kill` of a running `subs purge` failed it with
"database error: connection shutdown", which reads as the database's
failure, not as a stop.

Here both signals are noted and become an exception, ``Terminated`` or
KeyboardInterrupt, raised where the main thread is, unless it is inside
firebird-driver, whose objects an exception between two of its steps leaves
half-done (a mutex error, tracebacks at exit, in 1 of 30 stopped listener
starts). There the stop is only noted: the client library has shut the
engine down, so the driver's call fails with a lost connection, which
``shut_down_by`` turns into the stop. (Raising it later, from a timer
signal once the driver was left, raised it too late: inside the
supervisor of a listener that had started meanwhile.) A stop noted in the driver before the
library's handler is in place (during the first attach) shut nothing
down: ``requested()`` tells, and a command asks it once attached
(``open_database``), `subs listen` before it serves.

The library's shutdown does not always come: on embedded Firebird 4, 3 of
22 stopped purges went on waiting for a lock as if no stop had come (the
library's shutdown thread was gone and the engine logged no shutdown;
docs/FIREBIRD-BUGS.md, 13). So a command a stop has not ended within
``LIBRARY_WAIT`` seconds shuts the engine down itself, as the library would
have.

The engine can hold a stop up for ever: a thread waiting inside it (for a
lock of a process stopped or killed at the wrong moment, docs/OPERATIONS.md,
"The embedded engine") runs no Python, so no handler of ours runs, and the
engine's shutdown and exit hooks wait for it too. So a command that a stop
has not ended within ``ENGINE_WAIT`` seconds ends without the engine, saying
so, and every command's exit waits that long at most for the engine's
shutdown (``leave``). Its attachments end with the process: what it had not
committed is rolled back.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from types import FrameType

import click
from firebird.driver import DatabaseError

from subscriptions.db import runtime
from subscriptions.db.errors import is_connection_lost

_DRIVER = "firebird."
LIBRARY_WAIT = 1.0  # seconds a stop waits for the client library's shutdown of the engine
ENGINE_WAIT = 5.0  # seconds a stop, and an exit, wait for the engine
_received: list[int] = []  # the stop signals of this process, in order: signals are the process's


class Terminated(BaseException):
    """SIGTERM stopped the command. Not an Exception, as KeyboardInterrupt is
    not: nothing on the way out may take it for an error to handle."""


def _in_driver(frame: FrameType | None) -> bool:
    while frame is not None:
        if str(frame.f_globals.get("__name__", "")).startswith(_DRIVER):
            return True
        frame = frame.f_back
    return False


def requested() -> bool:
    """Whether a stop signal came since the command started, raised or only noted."""
    return bool(_received)


@contextlib.contextmanager
def stops_noted() -> Iterator[list[int]]:
    """SIGINT and SIGTERM, where they still have Python's defaults, raise
    KeyboardInterrupt and ``Terminated`` outside the driver, and are noted.
    After one, the driver's objects that are freed meet the engine the
    library shut down (or were left half-made by it), and what their
    ``__del__`` raises ("Exception ignored in ...", a traceback) is not
    shown. Yields the stop signals received, in order.
    Main thread only: elsewhere (CliRunner may run a command on another
    thread) it changes nothing."""
    _received.clear()
    if threading.current_thread() is not threading.main_thread():
        yield _received
        return

    def stop(signum: int, frame: FrameType | None) -> None:
        _received.append(signum)
        if not _in_driver(frame):
            raise Terminated if signum == signal.SIGTERM else KeyboardInterrupt

    def unraisable(unraisable: sys.UnraisableHookArgs) -> None:
        if not (_received and str(getattr(unraisable.object, "__module__", "")).startswith(_DRIVER)):
            previous_hook(unraisable)

    defaults = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: signal.SIG_DFL}
    previous = {signum: signal.getsignal(signum) for signum in defaults}
    taken = [signum for signum, default in defaults.items() if previous[signum] == default]
    for signum in taken:
        signal.signal(signum, stop)
    previous_hook, sys.unraisablehook = sys.unraisablehook, unraisable
    # Python runs a handler in the main thread between two of its steps, which
    # a thread waiting inside the engine never reaches; the C part of the
    # handler also writes the signal's number to the wakeup file descriptor.
    numbers, write_end = os.pipe()
    os.set_blocking(write_end, False)
    previous_wakeup = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    ended = threading.Event()
    ours = frozenset(taken)
    threading.Thread(target=_end_when_stuck, args=(numbers, ours, stop, ended), name="stops", daemon=True).start()
    try:
        yield _received
    finally:
        ended.set()
        signal.set_wakeup_fd(previous_wakeup)
        os.close(write_end)
        for signum in taken:
            signal.signal(signum, previous[signum])
        if not _received:  # after a stop, driver objects freed at exit meet the engine shut down
            sys.unraisablehook = previous_hook


def _end_when_stuck(numbers: int, ours: frozenset[int], stop: object, ended: threading.Event) -> None:
    """Thread: once one of ``ours``, still handled by ``stop``, has not
    ended the command within LIBRARY_WAIT seconds, shut the engine down; end
    the process when that has not ended it within ENGINE_WAIT seconds."""
    with os.fdopen(numbers, "rb", buffering=0) as received:
        while arrived := received.read(64):
            stops = [signum for signum in arrived if signum in ours and signal.getsignal(signum) is stop]
            if not stops:
                continue
            began = time.monotonic()
            if ended.wait(LIBRARY_WAIT):
                return
            runtime.shut_down(ENGINE_WAIT - LIBRARY_WAIT)
            if not ended.wait(max(0.0, began + ENGINE_WAIT - time.monotonic())):
                stopped_by = signal.Signals(stops[0]).name
                _end_without_engine(
                    f"Error: stopped by {stopped_by}, but {_STUCK}: what it had not committed is rolled back", 1
                )


def leave(code: int) -> None:
    """Before the command exits with ``code``: shut the engine down, or end
    the process without it when it has not ended within ENGINE_WAIT seconds."""
    if not runtime.shut_down(ENGINE_WAIT):
        _end_without_engine(f"note: {_STUCK}", code)


_STUCK = (
    f"the database engine did not shut down within {ENGINE_WAIT:g} s (it waits for a lock of a process "
    'stopped or killed at the wrong moment: docs/OPERATIONS.md, "The embedded engine"), so the command '
    "ended without it"
)


def _end_without_engine(message: str, code: int) -> None:
    click.echo(message, err=True)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def shut_down_by(exc: BaseException) -> BaseException | None:
    """The stop to report instead of ``exc``, when ``exc`` comes of a lost
    connection after a stop signal: of the engine the client library shut
    down on it, before the stop itself could be raised."""
    if not _received:
        return None
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, DatabaseError) and is_connection_lost(cause):
            return Terminated() if _received[0] == signal.SIGTERM else KeyboardInterrupt()
        cause = cause.__cause__ or cause.__context__
    return None
