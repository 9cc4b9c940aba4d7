"""A listener worker process: wait for events, claim, run handlers, settle.

The loop is: register for the tags' Firebird events (notifications.py), drain
everything claimable, wait for a notification or the poll interval, drain
again. A dead attachment
shows up as an error in the next drain (at the latest after one poll interval);
the worker then exits with EXIT_RESTART without touching the dead handles and
the supervisor starts a fresh one at once, which connects with backoff.

Handlers run on a helper thread (handler_thread.py) so that one that hangs
can be cut off after ``--timeout``: the attempt is recorded as failed and the
worker exits (the supervisor starts a new one).

The loop stamps ``progress`` (shared with the supervisor) as it goes; a worker
stuck anywhere else, say in a driver call on a dead connection, stops
stamping and the supervisor replaces it.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Iterator
from ctypes import c_double
from multiprocessing.queues import Queue

from firebird.driver import DatabaseError

from . import logs, reaper
from .batching import BatchSize
from .claims import Claimer, Target, load_targets
from .db import Database, first_line, is_connection_lost
from .errors import SubsError
from .events import Event
from .handler_thread import HandlerThread, HandlerTimeout, Outcome
from .metrics import Metrics
from .notifications import Notifications
from .options import ORDERED, ListenOptions
from .plugins import collect_handlers, plugin_manager

log = logging.getLogger("subs.worker")

EXIT_OK = 0
EXIT_RESTART = 3  # a handler timed out or the connection died: start a fresh worker at once
RECONNECT_MAX = 30.0
_TEARDOWN_TIMEOUT = 5.0
CONFLICT_PAUSE = 0.05


class Worker:
    def __init__(
        self, options: ListenOptions, reports: Queue | None = None, progress: c_double | None = None
    ) -> None:
        self.options = options
        # Ordered claims hold the subscription's lease rather than each event.
        self.in_order = options.mode == ORDERED
        self.reports = reports
        self.progress = progress
        self.owner = reaper.owner()
        self.stop = threading.Event()
        self.handlers = collect_handlers(plugin_manager(options.plugins), options.handler_config)
        self.in_flight: set[int] = set()
        self.in_flight_lock = threading.Lock()
        # Settling and the heartbeat's renewal write the same rows on two
        # attachments: one at a time, or with --batch > 1 they can deadlock
        # (which the engine breaks only after DeadlockTimeout, 10 s).
        self.settle_lock = threading.Lock()
        self.db: Database | None = None
        self.claimer: Claimer | None = None
        self.notifications = Notifications(options.poll, self.stop)
        self.targets: dict[int, Target] = {}
        self.metrics = Metrics()
        self.batch = BatchSize(options.batch)
        self.handler_thread = HandlerThread(self.stop, options.timeout)
        self.abandoned = False  # the connection died: never touch its handles again
        self.stuck_attachments: list[Database] = []  # a call still runs on them: never touch them

    # -- connection and wake-up -------------------------------------------------

    def _install_signal_handlers(self) -> None:
        """SIGTERM/SIGINT mean "stop gracefully". Installed after attaching:
        the embedded engine sets its own handlers, which shut down every
        attachment of the process at once."""
        if threading.current_thread() is not threading.main_thread():
            return  # embedded in a host program (tests): its signals are its own
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: self.stop.set())

    def _attach(self) -> Database:
        """A new attachment, tagged so a listener can reap it if we die."""
        db = Database(self.options.settings)
        reaper.tag(db, self.owner)
        return db

    def _open(self) -> None:
        self.db = self._attach()
        self._install_signal_handlers()
        self.claimer = Claimer(self.db, self.owner, self.options.lease, self.options.key_order)

    def _connect(self) -> None:
        self._open()
        self._refresh_targets()

    def _refresh_targets(self) -> None:
        """(Re)read the subscriptions we serve; re-register events when tags change."""
        wanted = set(self.options.tags)
        targets = {
            t.sub_id: t
            for t in load_targets(self.db)
            if t.tag in self.handlers and (not wanted or t.tag in wanted)
        }
        if not self.notifications.follow(self.db, {t.tag for t in targets.values()}):
            # Registering hung inside the engine: a call still runs on this
            # attachment, so claims go on through a fresh one.
            self.stuck_attachments.append(self.db)
            self._open()
        self.targets = targets

    def _disconnect(self) -> None:
        """Close collector and attachment, but give up on them after a few
        seconds: tearing down a dead remote attachment must not block the
        reconnect (the worker leaves with os._exit, so nothing waits for them)."""
        db = self.db

        def teardown() -> None:
            self.notifications.close()
            if db is not None:
                try:
                    db.close()
                except DatabaseError:
                    pass

        closer = threading.Thread(target=teardown, name="teardown", daemon=True)
        closer.start()
        closer.join(_TEARDOWN_TIMEOUT)
        if closer.is_alive():
            log.warning("closing the old connection did not finish in %.0fs; leaving it", _TEARDOWN_TIMEOUT)
            self.notifications.drop()
        self.db = self.claimer = None

    def _stamp(self) -> None:
        """Tell the supervisor this worker is making progress."""
        if self.progress is not None:
            self.progress.value = time.monotonic()

    def _wait(self) -> None:
        """Sleep until a notification, the poll interval or a stop request."""
        self.notifications.wait(self._stamp)

    # -- the loop ------------------------------------------------------------------

    def run(self) -> int:
        backoff = 0.5
        heartbeat = threading.Thread(target=self._heartbeat, name="heartbeat", daemon=True)
        heartbeat.start()
        try:
            while not self.stop.is_set():
                self._stamp()
                try:
                    if self.db is None:
                        self._connect()
                        backoff = 0.5
                    else:
                        self._refresh_targets()
                    worked = self._drain()
                    if self.options.drain and not worked:
                        return EXIT_OK
                    if not worked:
                        self._wait()
                except HandlerTimeout:
                    return EXIT_RESTART
                except (DatabaseError, SubsError) as exc:
                    if self.db is not None and isinstance(exc, DatabaseError) and is_connection_lost(exc):
                        # The client library is not to be trusted with the handles of a
                        # dead remote attachment (a rollback that never returns, a crash
                        # closing its events): leave them alone, a fresh worker reconnects.
                        log.warning("database connection lost: %s; restarting the worker to reconnect",
                                    first_line(exc))
                        self.abandoned = True
                        return EXIT_RESTART
                    log.warning("database error: %s; reconnecting in %.1fs", first_line(exc), backoff)
                    self._disconnect()
                    self.stop.wait(backoff)
                    backoff = min(backoff * 2, RECONNECT_MAX)
            return EXIT_OK
        finally:
            self._flush_reports()
            if not self.abandoned:
                self._disconnect()

    def _drain(self) -> bool:
        """Handle everything claimable now; True if anything was claimed. A
        claim that met a conflict claimed nothing but proves nothing either
        (other claimers were busy at the same rows): try again shortly,
        rather than wait for the next wake-up or, with --drain, leave early."""
        worked = False
        while not self.stop.is_set() and self.targets:
            self._stamp()
            conflicts = self.claimer.conflicts
            if self.in_order:
                claimed = False
                for target in list(self.targets.values()):
                    if self.stop.is_set():
                        break
                    events = self.claimer.claim_head(target, self.batch.size([target.tag]))
                    claimed = claimed or bool(events)
                    self._handle(events)
            else:
                tags = {target.tag for target in self.targets.values()}
                events = self.claimer.claim(self.targets, self.batch.size(tags))
                claimed = bool(events)
                self._handle(events)
            conflicts = self.claimer.conflicts - conflicts
            if conflicts:
                self.metrics.count_claim_conflicts(conflicts)
            self._flush_reports()
            if not claimed and conflicts:
                self.stop.wait(CONFLICT_PAUSE)
                continue
            if not claimed:
                return worked
            worked = True
        return worked

    # -- handling --------------------------------------------------------------------

    def _handle(self, events: list[Event]) -> None:
        """Deliver claimed events; acknowledge the handled ones together and give
        back the ones not started (on stop, a timeout or, in order, a failure:
        later events of the subscription wait for it)."""
        if not events:
            return
        done: list[int] = []
        attempted: list[int] = []
        with self.in_flight_lock:
            self.in_flight.update(e.id for e in events)
        try:
            for run in self._runs(events):
                if self.stop.is_set() or not self._deliver(run, done, attempted):
                    break
        finally:
            try:
                with self.settle_lock:
                    if self.in_order:
                        self.claimer.settle_head(events[0].subscription_id, done)
                    else:
                        self.claimer.ack(done)
                        self.claimer.release(e.id for e in events[len(attempted) :])
            finally:
                # Also when settling failed: the heartbeat would otherwise renew
                # these leases for ever and the events would never come back.
                with self.in_flight_lock:
                    self.in_flight.difference_update(e.id for e in events)

    def _runs(self, events: list[Event]) -> Iterator[list[Event]]:
        """The batch in runs handed to the handler thread at once: a
        transactional handler's event alone (its transaction is this thread's),
        consecutive others together."""
        run: list[Event] = []
        for event in events:
            if self.handlers[event.tag].transactional:
                if run:
                    yield run
                    run = []
                yield [event]
            else:
                run.append(event)
        if run:
            yield run

    def _deliver(self, run: list[Event], done: list[int], attempted: list[int]) -> bool:
        """Run the handlers of ``run``; each event whose attempt happened goes to
        ``attempted``, a handled one also to ``done`` (acknowledged with its
        batch) unless its handler is transactional (acknowledged with it).
        False if the batch is to go no further."""
        if self.handlers[run[0].tag].transactional:
            return self._deliver_transactional(run[0], attempted)
        self.handler_thread.start([(self.handlers[e.tag].function, e) for e in run], stop_on_failure=self.in_order)
        carry_on = True
        for event in run:
            try:
                outcome = self._outcome(event, attempted)
            except HandlerTimeout:
                self._failed(event, None)
                raise
            if outcome is None:
                carry_on = False
            elif outcome.error is None:
                done.append(event.id)
                self._observe(event.tag, "handled", outcome.seconds)
            else:
                self._failed(event, outcome)
                carry_on = carry_on and not self.in_order
        return carry_on

    def _deliver_transactional(self, event: Event, attempted: list[int]) -> bool:
        """The handler's writes and the acknowledgement commit together."""
        handler = self.handlers[event.tag]
        outcome: Outcome | None = None
        try:
            with self.db.transaction() as cursor:
                event.cursor = cursor
                try:
                    self.handler_thread.start([(handler.function, event)], stop_on_failure=True)
                    outcome = self._outcome(event, attempted)
                finally:
                    event.cursor = None
                if outcome is None:
                    return False
                if outcome.error is not None:
                    raise outcome.error
                self.claimer.ack_in(cursor, event.id, held=self.in_order)
        except HandlerTimeout:
            self._failed(event, None)  # now that its transaction is rolled back
            raise
        except Exception as exc:  # the handler's, or its writes' at commit
            self._failed(event, Outcome(exc, outcome.seconds if outcome else 0.0))
            return False
        self._observe(event.tag, "handled", outcome.seconds)
        return True

    def _outcome(self, event: Event, attempted: list[int]) -> Outcome | None:
        """The handler thread's report on ``event`` (None: not started). On a
        timeout the worker stops (the caller records the failed attempt)."""
        self._stamp()
        try:
            outcome = self.handler_thread.outcome()
        except HandlerTimeout:
            self.stop.set()  # first of all: the thread must start no further handler
            attempted.append(event.id)
            raise
        if outcome is not None:
            attempted.append(event.id)
        return outcome

    def _failed(self, event: Event, outcome: Outcome | None) -> None:
        """Record a failed attempt; ``outcome`` None means it timed out."""
        if outcome is None:
            error, seconds = f"timed out after {self.options.timeout:g}s", self.options.timeout
        else:
            error, seconds = f"{type(outcome.error).__name__}: {outcome.error}", outcome.seconds
        dead = self.options.is_last_attempt(event.attempt)
        delay = 0.0 if dead else self.options.retry_delay(event.attempt)
        with self.settle_lock:
            self.claimer.fail(event.id, error, delay, dead, held=self.in_order)
        self._observe(event.tag, "dead" if dead else "failed", seconds)
        if dead:
            log.error("event %s (%s) is dead after %s attempts: %s", event.id, event.tag, event.attempt, error)
        else:
            log.warning(
                "event %s (%s) attempt %s failed: %s; retrying in %.1fs",
                event.id, event.tag, event.attempt, error, delay,
            )

    # -- leases and reports --------------------------------------------------------------

    def _heartbeat(self) -> None:
        """Renew the leases of every claimed, unsettled event (running or
        waiting in its batch) every third of the lease, on a connection of its own."""
        db: Database | None = None
        try:
            db = self._attach()
        except (DatabaseError, SubsError) as exc:
            log.warning("could not connect for lease renewal: %s", first_line(exc))
        while not self.stop.wait(self.options.lease / 3):
            with self.in_flight_lock:
                if not self.in_flight:
                    continue
            try:
                db = db or self._attach()
                with self.settle_lock:
                    with self.in_flight_lock:
                        ids = sorted(self.in_flight)
                    if ids:
                        Claimer(db, self.owner, self.options.lease).extend(ids)
            except (DatabaseError, SubsError) as exc:
                log.warning("could not renew leases: %s", first_line(exc))
                db = None
        if db is not None:
            db.close()

    def _observe(self, tag: str, outcome: str, seconds: float) -> None:
        self.metrics.observe(tag, outcome, seconds)
        self.batch.observe(tag, seconds)

    def _flush_reports(self) -> None:
        """Send the supervisor what was counted since the last report."""
        delta = self.metrics.snapshot(reset=True)
        if self.reports is not None and (delta["events"] or delta["claim_conflicts"]):
            self.reports.put(delta)


def main(options: ListenOptions, reports: Queue | None, progress: c_double | None = None) -> None:
    """Entry point of a spawned worker process."""
    logs.configure(level=options.log_level, fmt=options.log_format, logfile=options.log_file)
    worker = Worker(options, reports, progress)
    worker._install_signal_handlers()
    code = worker.run()
    logging.shutdown()
    # Leave without interpreter shutdown: driver threads left by a dead
    # attachment or a hung handler must not keep the process alive.
    os._exit(code)
