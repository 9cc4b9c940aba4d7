"""A handler process: runs the jobs its listener's claimer hands it.

Handler processes hold no database attachment, except one for a
transactional handler, whose writes and acknowledgement commit together.
A job's events are handled one after the other and reported back in order,
at most REPORT_EVERY seconds late and at the job's end, so the claimer sees
each process's progress and can cut off one that runs over --timeout (by killing
it: a thread cannot be stopped). Signals are the claimer's business: a
handler process ignores SIGINT, SIGTERM and SIGHUP, finishes its call when the
pool's ``stop`` flag is set, and exits when its pipe closes or its parent dies,
or with EXIT_RECYCLED after a job in which it grew past --handler-memory-limit:
the jobs it had not begun are then given back, not failed, and a fresh
process takes its place.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import resource
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from ctypes import c_bool
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING

from subscriptions import logs
from subscriptions.capture.values import UndecodableEvent
from subscriptions.events import Event
from subscriptions.plugins import Handler, collect_handlers, plugin_manager

from . import lifeline
from .calls import Call, Caller, describe, retry_after, undeliverable
from .claimed import Claimed
from .options import ListenOptions

if TYPE_CHECKING:
    from ctypes import Array, c_longlong

    from .transactional import Transactions

    Progress = Array[c_longlong]

log = logging.getLogger("subs.handler")
REPORT_EVERY = 0.05
EXIT_RECYCLED = 3

# Progress: three integers in memory the process shares with its claimer,
# written as calls begin and return, without a system call: the number of
# the job running (Job.number), and how many of its events (counted from its
# first, in order) were in calls that began, and that returned. Reports lag
# behind (REPORT_EVERY), so when the process dies this tells the claimer
# which events were handled with their outcome lost, which were in the call
# it died in, and which were never started.
JOB, STARTED, RETURNED = range(3)


@dataclass(frozen=True)
class Job:
    """Events for one handler process. ``in_order``: an ordered stream's
    events: the first failure ends the job.
    ``follows``: the next batch of the stream of the job before it, claimed
    while that one ran; it runs only if that one ran to its end."""

    events: list[Claimed]
    in_order: bool
    follows: bool = False
    number: int = 0  # the job's place among those handed to its process (pool.py)


@dataclass(frozen=True)
class Report:
    """How one event of a job went: ``error`` is what its attempt failed
    with, ``retry_after`` the least delay its handler asked for before the
    next (RetryLater), ``undeliverable`` whether it said no attempt can
    work (Undeliverable); not ``started``: never handed to its handler."""

    event_id: int
    error: str | None
    seconds: float
    started: bool = True
    retry_after: float | None = None
    undeliverable: bool = False


class Reporter:
    """Sends reports to the claimer in groups: at a job's end, and from a
    thread of its own at most REPORT_EVERY seconds after each report, also
    while the next handler is still running (or hung)."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self._pending: list[Report] = []
        self._lock = threading.Condition()
        threading.Thread(target=self._send_late, name="reporter", daemon=True).start()

    def add(self, reports: Iterable[Report]) -> None:
        with self._lock:
            self._pending.extend(reports)
            self._lock.notify()

    def flush(self) -> None:
        with self._lock:
            self._send()

    def _send(self) -> None:
        if self._pending:
            self.connection.send(self._pending)
            self._pending = []

    def _send_late(self) -> None:
        # Reports added meanwhile wait for the same send: waking at each
        # ``add`` sent quick handlers' reports one by one, at a cost.
        with self._lock:
            while True:
                self._lock.wait_for(lambda: bool(self._pending))
                self._lock.wait_for(lambda: not self._pending, timeout=REPORT_EVERY)
                self._send()


class Runner:
    """Runs jobs in this process; attaches only for transactional handlers."""

    def __init__(self, options: ListenOptions, owner: str, stop: c_bool, progress: Progress) -> None:
        self.options = options
        self.owner = owner
        self.stop = stop
        self.progress = progress
        self.handlers: dict[str, Handler] = collect_handlers(plugin_manager(options.plugins), options.handler_config)
        self.caller = Caller()
        self.transactions: Transactions | None = None  # made for the first transactional handler
        self.cut_short = False  # the last job did not run to its end

    def run(self, job: Job, reporter: Reporter) -> None:
        """Handle ``job`` and report every event of it, in order, noting in
        ``progress`` how far the calls got (see Progress)."""
        self.progress[STARTED] = self.progress[RETURNED] = 0
        self.progress[JOB] = job.number
        position = 0
        carry_on = not (job.follows and self.cut_short)
        for call in self._calls(job):
            position += len(call.events)
            carry_on = carry_on and not self.stop.value
            if not carry_on:
                reporter.add(Report(event.id, None, 0.0, started=False) for event in call.events)
                continue
            started = time.monotonic()
            self.progress[STARTED] = position
            errors = self.caller.run(call)
            self.progress[RETURNED] = position
            seconds = (time.monotonic() - started) / len(errors)
            reports = []
            for event, error in zip(call.events, errors, strict=True):
                if carry_on:
                    described = None if error is None else describe(error)
                    reports.append(
                        Report(
                            event.id,
                            described,
                            seconds,
                            retry_after=retry_after(error),
                            undeliverable=undeliverable(error),
                        )
                    )
                else:  # in order, after a failed event of the same batch call
                    reports.append(Report(event.id, None, 0.0, started=False))
                carry_on = carry_on and (error is None or not job.in_order)
            reporter.add(reports)
        self.cut_short = not carry_on
        reporter.flush()

    def _calls(self, job: Job) -> Iterator[Call]:
        """One call per event, except that consecutive events of one batch
        handler's tag make one call. An event that cannot be decoded gets a
        call that fails with the reason, so its attempt counts and it goes
        dead after --max-attempts like any failure."""
        batch: Call | None = None
        for claimed in job.events:
            event, why = claimed.event()
            handler = self.handlers[event.tag]
            if why is None and handler.batch:
                if batch is not None and batch.events[0].tag == event.tag:
                    batch.events.append(event)
                    continue
                if batch is not None:
                    yield batch
                batch = Call(handler.function, [event], batch=True)
                continue
            if batch is not None:
                yield batch
                batch = None
            if why is not None:
                yield Call(_raising(why), [event])
            elif handler.transactional:
                yield Call(self._transactions().wrap(handler), [event])
            else:
                yield Call(handler.function, [event])
        if batch is not None:
            yield batch

    def _transactions(self) -> Transactions:
        if self.transactions is None:
            # Imported here, not at the top: the database driver then loads
            # only in processes that run a transactional handler.
            from .transactional import Transactions

            self.transactions = Transactions(self.options, self.owner)
        return self.transactions

    def close(self) -> None:
        if self.transactions is not None:
            self.transactions.close()


def _raising(why: UndecodableEvent) -> Callable[[Event], object]:
    def undecodable(_: Event) -> None:
        raise why

    return undecodable


def _one_write_per_line() -> None:
    """Handler processes share the listener's stdout and stderr. A print is
    two writes (the text, then the newline) on an unbuffered stream
    (PYTHONUNBUFFERED): lines of processes running side by side ran into
    each other. Line buffering makes each line one write."""
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(line_buffering=True, write_through=False)


def main(
    options: ListenOptions,
    connection: Connection,
    stop: c_bool,
    progress: Progress,
    owner: str,
    parent: int,
    start_pause: float = 0.0,
) -> None:
    """Entry point of a spawned handler process; it loads the handlers
    ``start_pause`` seconds after it starts (the pool's pause after
    processes that died before they were ready)."""
    lifeline.die_with(parent)
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)
    lifeline.take_held_stop_signals()
    time.sleep(start_pause)
    _one_write_per_line()
    logs.configure(level=options.log_level, fmt=options.log_format, logfile=options.log_file)
    runner = Runner(options, owner, stop, progress)
    connection.send([])  # an empty report: ready
    reporter = Reporter(connection)
    code = 0
    try:
        while True:
            try:
                job = connection.recv()
            except (EOFError, OSError):  # the claimer is gone
                break
            if job is None:
                break
            runner.run(job, reporter)
            limit, peak = options.handler_memory_limit, _peak_mib()
            if limit is not None and peak > limit:
                log.info(
                    "handler process pid %s grew to %.0f MiB (--handler-memory-limit %d); a fresh one takes its place",
                    os.getpid(),
                    peak,
                    limit,
                )
                code = EXIT_RECYCLED
                break
    except BaseException:  # a fault of subs's (handlers' errors are reports); the exit below would hide it
        log.exception("the handler process failed; its claimer starts a new one")
        code = 1
    finally:
        runner.close()
        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        # Leave without interpreter shutdown: threads a handler left behind
        # must not keep the process alive.
        os._exit(code)


def _peak_mib() -> float:
    """This process's peak resident memory, what --handler-memory-limit goes
    by (as Celery's --max-memory-per-child does: memory a leaky handler holds
    is seldom given back to the system anyway)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
