"""A listener worker process: wait for events, claim, run handlers, settle.

The loop is: register for the tags' Firebird events (notifications.py), drain
everything claimable, wait for a notification or the poll interval, drain
again. A dead attachment
shows up as an error in the next drain (at the latest after one poll interval);
the worker then exits with EXIT_RESTART without touching the dead handles and
the supervisor starts a fresh one at once, which connects with backoff.

Claimed batches go to the dispatcher (dispatch.py), which runs handlers on
a helper thread (handler_thread.py) so that one that hangs can be cut off
after ``--timeout``: the attempt is recorded as failed and the worker exits
(the supervisor starts a new one). A heartbeat thread (heartbeat.py) renews
the leases of what is in flight.

The loop stamps ``progress`` (shared with the supervisor) as it goes; a worker
stuck anywhere else, say in a driver call on a dead connection, stops
stamping and the supervisor replaces it.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import threading
import time
from ctypes import c_double
from multiprocessing.queues import Queue
from typing import Any

from firebird.driver import DatabaseError

from subscriptions import logs
from subscriptions.db.connection import Database
from subscriptions.db.errors import first_line, is_connection_lost
from subscriptions.db.retry import Backoff
from subscriptions.errors import SubsError
from subscriptions.plugins import collect_handlers, plugin_manager

from . import reaper
from .batching import BatchSize
from .claims import Claimer, Target, load_targets, streams
from .dispatch import Dispatcher
from .handler_thread import HandlerTimeout
from .heartbeat import renew_leases
from .metrics import Metrics
from .notifications import Notifications
from .options import ListenOptions
from .serving import serves

log = logging.getLogger("subs.worker")

EXIT_OK = 0
EXIT_RESTART = 3  # a handler timed out or the connection died: start a fresh worker at once
RECONNECT_MAX = 30.0
_TEARDOWN_TIMEOUT = 5.0
PR_SET_PDEATHSIG = 1
CONFLICT_PAUSE = 0.05


class Worker:
    def __init__(
        self, options: ListenOptions, reports: Queue[Any] | None = None, progress: c_double | None = None
    ) -> None:
        self.options = options
        self.reports = reports
        self.progress = progress
        self.owner = reaper.owner()
        self.stop = threading.Event()
        self.handlers = collect_handlers(plugin_manager(options.plugins), options.handler_config)
        self.claimer: Claimer | None = None  # on the worker's attachment, while it has one
        self.notifications = Notifications(options.poll, self.stop)
        self.targets: dict[int, Target] = {}
        self.metrics = Metrics()
        self.batch = BatchSize(options.batch)
        self.dispatcher = Dispatcher(options, self.handlers, self.stop, self._stamp, self.metrics, self.batch)
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
        reaper.tag(db, self.owner, serves(self.options))
        return db

    def _open(self) -> Claimer:
        """A claimer on a new attachment: the worker's connection from now on."""
        db = self._attach()
        self._install_signal_handlers()
        self.claimer = Claimer(db, self.owner, self.options.lease, self.options.key_order)
        return self.claimer

    def _refresh_targets(self, claimer: Claimer) -> Claimer:
        """(Re)read the subscriptions we serve; re-register events when tags
        change. Returns the claimer to go on with."""
        wanted = set(self.options.tags)
        targets = {
            t.sub_id: t for t in load_targets(claimer.db) if t.tag in self.handlers and (not wanted or t.tag in wanted)
        }
        if not self.notifications.follow(claimer.db, {t.tag for t in targets.values()}):
            # Registering hung inside the engine: a call still runs on this
            # attachment, so claims go on through a fresh one.
            self.stuck_attachments.append(claimer.db)
            claimer = self._open()
        self.targets = targets
        return claimer

    def _disconnect(self) -> None:
        """Close collector and attachment, but give up on them after a few
        seconds: tearing down a dead remote attachment must not block the
        reconnect (the worker leaves with os._exit, so nothing waits for them)."""
        claimer = self.claimer

        def teardown() -> None:
            self.notifications.close()
            if claimer is not None:
                try:
                    claimer.free_statements()
                    claimer.db.close()
                except DatabaseError:
                    pass

        closer = threading.Thread(target=teardown, name="teardown", daemon=True)
        closer.start()
        closer.join(_TEARDOWN_TIMEOUT)
        if closer.is_alive():
            log.warning("closing the old connection did not finish in %.0fs; leaving it", _TEARDOWN_TIMEOUT)
            self.notifications.drop()
        self.claimer = None

    def _stamp(self) -> None:
        """Tell the supervisor this worker is making progress."""
        if self.progress is not None:
            self.progress.value = time.monotonic()

    def _wait(self) -> None:
        """Sleep until a notification, the poll interval, the next retry this
        worker scheduled, or a stop request."""
        self.notifications.wait(self._stamp, until=self.dispatcher.next_retry())

    # -- the loop ------------------------------------------------------------------

    def run(self) -> int:
        backoff = Backoff(0.5, RECONNECT_MAX)
        heartbeat = threading.Thread(
            target=renew_leases,
            args=(self.dispatcher.in_flight, self._attach, self.owner, self.options.lease, self.stop),
            name="heartbeat",
            daemon=True,
        )
        heartbeat.start()
        try:
            while not self.stop.is_set():
                self._stamp()
                try:
                    claimer = self._refresh_targets(self.claimer or self._open())
                    backoff.reset()
                    worked = self._drain(claimer)
                    if self.options.drain and not worked:
                        return EXIT_OK
                    if not worked:
                        self._wait()
                except HandlerTimeout:
                    return EXIT_RESTART
                except (DatabaseError, SubsError) as exc:
                    if self.claimer is not None and isinstance(exc, DatabaseError) and is_connection_lost(exc):
                        # The client library is not to be trusted with the handles of a
                        # dead remote attachment (a rollback that never returns, a crash
                        # closing its events): leave them alone, a fresh worker reconnects.
                        log.warning("database connection lost: %s; restarting the worker to reconnect", first_line(exc))
                        self.abandoned = True
                        return EXIT_RESTART
                    pause = backoff.next_pause()
                    log.warning("database error: %s; reconnecting in %.1fs", first_line(exc), pause)
                    self._disconnect()
                    self.stop.wait(pause)
            return EXIT_OK
        finally:
            self._flush_reports()
            if not self.abandoned:
                self._disconnect()

    def _drain(self, claimer: Claimer) -> bool:
        """Handle everything claimable now; True if anything was claimed. A
        claim that met a conflict claimed nothing but proves nothing either
        (other claimers were busy at the same rows): try again shortly,
        rather than wait for the next wake-up or, with --drain, leave early."""
        worked = False
        while not self.stop.is_set() and self.targets:
            self._stamp()
            conflicts = claimer.conflicts
            if self.dispatcher.in_order:
                claimed = False
                ready = claimer.ready()
                for (_, tag), stream in streams(self.targets.values()).items():
                    if self.stop.is_set():
                        break
                    if not any(target.sub_id in ready for target in stream):
                        continue
                    events = claimer.claim_head(stream, self.batch.size([tag]))
                    claimed = claimed or bool(events)
                    self.dispatcher.handle(claimer, events)
            else:
                tags = {target.tag for target in self.targets.values()}
                events = claimer.claim(self.targets, self.batch.size(tags))
                claimed = bool(events)
                self.dispatcher.handle(claimer, events)
            conflicts = claimer.conflicts - conflicts
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

    # -- reports --------------------------------------------------------------------

    def _flush_reports(self) -> None:
        """Send the supervisor what was counted since the last report."""
        delta = self.metrics.snapshot(reset=True)
        if self.reports is not None and (delta["events"] or delta["claim_conflicts"] or delta["minutes"]):
            self.reports.put(delta)


def _die_with(parent: int) -> None:
    """Have the kernel SIGKILL this process when the supervisor ``parent``
    dies (Linux's parent-death signal): a SIGKILLed listener must not leave
    workers behind holding claims. Their events come back after the lease."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        log.debug("no parent-death signal on this system; workers outlive a killed listener")
    if os.getppid() != parent:  # it died before the signal was set up
        os._exit(EXIT_OK)


def main(options: ListenOptions, reports: Queue[Any] | None, progress: c_double | None = None, parent: int = 0) -> None:
    """Entry point of a spawned worker process."""
    if parent:
        _die_with(parent)
    logs.configure(level=options.log_level, fmt=options.log_format, logfile=options.log_file)
    worker = Worker(options, reports, progress)
    worker._install_signal_handlers()
    code = worker.run()
    logging.shutdown()
    # Leave without interpreter shutdown: driver threads left by a dead
    # attachment or a hung handler must not keep the process alive.
    os._exit(code)
