"""The listener's claimer process: wait for events, claim, hand them to the
handler processes, settle.

The loop is: register for the tags' Firebird events (notifications.py), keep
the handler processes (pool.py) busy while anything is claimable, wait for a
notification, the poll interval or a retry's due time, and again. One
claimer per listener claims for all its handler processes: in parallel mode
as many events as its idle processes take (a batch each), in ordered mode
the first events of each stream with a claimable head, one stream per
process, and while a full batch of a stream runs, the stream's next batch,
queued behind it (so a busy stream's process never waits for the claimer's
settle and claim). It settles what they report (dispatch.py), a
heartbeat thread (heartbeat.py) renews the leases of what is in flight, and
a floors thread (floors.py) looks where each subscription's live events
begin while claims go on. So a listener holds three attachments whatever
--workers says, plus one per handler process that runs a transactional
handler.

A dead attachment shows up as an error in the next claim (at the latest after
one poll interval); the claimer then exits with EXIT_RESTART without touching
the dead handles and the supervisor starts a fresh one at once, which
connects with backoff. With --drain it gives up (EXIT_GAVE_UP) once the
database has kept failing, or another transaction's lock has held up its
settling, for --drain-patience: a drain is a job that must end, not a
service that waits for the database to come back. Once `subs init` of
another release has changed the schema, it stops as on SIGTERM and exits
with EXIT_SCHEMA_CHANGED, which ends the listener. The loop stamps
``progress`` (shared with the supervisor) as it goes; a claimer stuck
anywhere, say in a driver call on a dead connection, stops stamping and the
supervisor replaces it.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Mapping, Sequence
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
from subscriptions.schema import version as schema_version

from . import lifeline, lockouts, reaper
from .batching import BatchSize
from .claims import Claimer, Stream, Target, load_targets, streams
from .dispatch import Dispatcher
from .floors import Floors, keep_raising
from .heartbeat import renew_leases
from .metrics import Metrics
from .notifications import Notifications
from .options import ListenOptions
from .serving import serves

log = logging.getLogger("subs.worker")

EXIT_OK = 0
EXIT_RESTART = 3  # the connection died: start a fresh claimer at once
EXIT_GAVE_UP = 4  # --drain: the database kept failing, or a lock held settling, for --drain-patience
EXIT_SCHEMA_CHANGED = 5  # `subs init` of another release changed the schema: the listener must end
RECONNECT_MAX = 30.0
_TEARDOWN_TIMEOUT = 5.0
REPORTS_WAIT = 5.0  # seconds the last reports may take to reach the supervisor
CONFLICT_PAUSE = 0.05
# How often the claimer looks for notifications while some handler
# processes are busy and others idle (it waits on their reports meanwhile).
NOTIFICATION_SLICE = 0.005
WAIT_SLICE = 0.5
WAIT_FOR_START = 1.0
# Ordered mode: how long the heads of idle streams may go unprobed while
# other streams keep the claimer busy (see Worker._heads_ready).
PROBE_EVERY = 0.1


class HeadsProbe:
    """Ordered mode: the subscriptions of idle streams whose first event is
    claimable (Claimer.ready). Probing every subscription costs an index
    probe each (0.75 ms with 60 on the Firebird 3 server, 4.5 ms with 900 on
    embedded Firebird 5), and a busy stream ends a claim round after each of
    its batches: so all are probed again only after ``forget`` (a
    notification came, a retry fell due) or ``every`` seconds later, and in
    between only the streams that became idle since the last look.

    A probe's transaction delays the claim that follows it, so where a
    claim can read a head itself, none is made: a lone idle stream is
    claimed at once, and so, after ``forget``, is the stream whose claim
    last found events, the likeliest one to have them again, with the probe
    of all put off to the next look (``probe_due``)."""

    def __init__(self, every: float = PROBE_EVERY) -> None:
        self.every = every
        self.found: set[int] = set()
        self.probed_at: float | None = None  # when every subscription was probed
        self.idle: frozenset[Stream] = frozenset()  # the idle streams at the last look
        self.last_busy: Stream | None = None  # the stream whose claim last found events
        self.probe_due = False  # the last look claimed last_busy instead of probing all

    def forget(self) -> None:
        self.probed_at = None

    def claimed(self, stream: Stream) -> None:
        """A claim of ``stream``'s head found events."""
        self.last_busy = stream

    def ready(self, claimer: Claimer, idle: Mapping[Stream, Sequence[Target]]) -> set[int]:
        now = time.monotonic()
        at_once = self._claimed_at_once(idle)
        self.probe_due = at_once is not None and len(idle) > 1
        if at_once is not None:
            found = {target.sub_id for target in at_once}
            # What its claim finds out: a ready stream turns busy, another is not ready.
            self.found -= found
        elif not idle:
            found = set()
        elif self.probed_at is None or now - self.probed_at >= self.every:
            self.found = found = claimer.ready([target.sub_id for stream in idle.values() for target in stream])
            self.probed_at = now
        else:
            newly = [target.sub_id for key in idle.keys() - self.idle for target in idle[key]]
            if newly:
                self.found = (self.found - set(newly)) | claimer.ready(newly)
            found = self.found
        self.idle = frozenset(idle)
        return found

    def _claimed_at_once(self, idle: Mapping[Stream, Sequence[Target]]) -> Sequence[Target] | None:
        """The idle stream to claim without a probe, if any."""
        if len(idle) == 1:
            return next(iter(idle.values()))
        if self.probed_at is None and not self.probe_due and self.last_busy is not None:
            return idle.get(self.last_busy)
        return None


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
        self.floors = Floors()  # raised by the floors thread, for every claimer of this worker
        self.notifications = Notifications(options.poll, self.stop)
        self.targets: dict[int, Target] = {}
        self.targets_read = False  # for the worker's current attachment
        self.metrics = Metrics()
        self.batch = BatchSize(options.batch)
        self.dispatcher = Dispatcher(options, self.owner, self.metrics, self.batch, self._waiting_for_lock)
        self.heads = HeadsProbe()
        self.abandoned = False  # the connection died: never touch its handles again
        self.gave_up = False  # --drain: settling waited too long for a lock
        self.stuck_attachments: list[Database] = []  # a call still runs on them: never touch them
        self.schema_checked_at = time.monotonic()  # the supervisor checked it before starting us
        self.schema_changed = False

    # -- connection and wake-up -------------------------------------------------

    def _install_signal_handlers(self) -> None:
        """A stop signal (SIGTERM, SIGINT, SIGHUP) means "stop gracefully".
        Installed again after each attach: the embedded engine sets its own
        handlers, which shut down every attachment of the process at once."""
        if threading.current_thread() is not threading.main_thread():
            return  # embedded in a host program (tests): its signals are its own
        lifeline.halt_on_stop_signals(self.halt)

    def halt(self) -> None:
        """Stop gracefully: running handlers finish, nothing new starts."""
        self.stop.set()
        self.dispatcher.halt()

    def _attach(self) -> Database:
        """A new attachment, tagged so a listener can reap it if we die."""
        db = Database(self.options.settings)
        reaper.tag(db, self.owner, serves(self.options))
        return db

    def _open(self) -> Claimer:
        """A claimer on a new attachment: the worker's connection from now on."""
        db = self._attach()
        self._install_signal_handlers()
        self.claimer = Claimer(db, self.owner, self.options.lease, self.options.key_order, self.floors)
        self.targets_read = False  # notifications are registered on an attachment
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
        self.targets_read = True
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
        looks = threading.Thread(
            target=keep_raising, args=(self.floors, self._attach, self.stop), name="floors", daemon=True
        )
        looks.start()
        failing_since: float | None = None  # the first of the errors in a row
        try:
            while not self.stop.is_set():
                self._stamp()
                try:
                    claimer = self.claimer or self._open()
                    if not self.targets_read:
                        claimer = self._refresh_targets(claimer)
                    worked = self._drain(claimer)
                    backoff.reset()
                    failing_since = None
                    if self.options.drain and not worked:
                        break
                    if not worked:
                        # The subscriptions are read again before sleeping, not
                        # after waking (it cost a woken claimer 2-3 ms before its
                        # claim); new ones are drained before sleeping.
                        served = self.targets
                        self._refresh_targets(claimer)
                        if self.targets == served:
                            self._wait()
                except (DatabaseError, SubsError) as exc:
                    if self.gave_up:
                        return EXIT_GAVE_UP
                    lost = isinstance(exc, DatabaseError) and is_connection_lost(exc)
                    if lifeline.stop_signalled():  # the stop's doing, not an outage to reconnect through
                        self.abandoned = lost
                        break
                    if self.claimer is not None and (lost or self.dispatcher.busy()):
                        # The client library is not to be trusted with the handles of a
                        # dead remote attachment (a rollback that never returns, a crash
                        # closing its events): leave them alone, a fresh claimer
                        # reconnects. Events in flight are failed at once by the
                        # supervisor, which sees this process go.
                        what = "database connection lost" if lost else "database error with handlers running"
                        log.warning("%s: %s; restarting the claimer to reconnect", what, first_line(exc))
                        self.abandoned = lost
                        return EXIT_RESTART
                    if failing_since is None:
                        failing_since = time.monotonic()
                    failing = time.monotonic() - failing_since
                    if self.options.drain and failing >= self.options.drain_patience:
                        log.error(
                            "giving up the drain: the database kept failing for %.0fs: %s", failing, first_line(exc)
                        )
                        return EXIT_GAVE_UP
                    pause = backoff.next_pause()
                    if self.options.drain:
                        pause = min(pause, self.options.drain_patience - failing)
                    log.warning("database error: %s; reconnecting in %.1fs", first_line(exc), pause)
                    self._disconnect()
                    self.stop.wait(pause)
            return EXIT_SCHEMA_CHANGED if self.schema_changed else EXIT_OK
        finally:
            self.dispatcher.close()
            self._flush_reports()
            if not self.abandoned:  # a dead attachment's handles are left alone
                self._disconnect()
                self._detach_threads(heartbeat, looks)

    def _detach_threads(self, *threads: threading.Thread) -> None:
        """Let the heartbeat and floors threads close their attachments
        before the process leaves: on the embedded engine an attachment
        that ends with its process is a dead lock owner to every other
        process of the database (a second drain listener then did not
        finish within 2 minutes: docs/ARCHITECTURE.md, claim floors). One
        stuck in a call is left behind."""
        self.stop.set()
        deadline = time.monotonic() + _TEARDOWN_TIMEOUT
        for thread in threads:
            thread.join(max(deadline - time.monotonic(), 0.0))

    def _drain(self, claimer: Claimer) -> bool:
        """Keep the handler processes busy while anything is claimable, and
        settle what they report; returns once nothing is claimable and
        nothing is in flight (or, on stop, once the running handlers are
        done). True if anything was claimed.

        ``more`` says a claim may find something: at first, after a claim
        that filled what it asked for or met a conflict, after a job ended in
        ordered mode or with --key-order (what it held back is free now), on
        a notification, and when a retry falls due."""
        worked, more = False, True
        in_turn = self.dispatcher.in_order or self.options.key_order
        self.heads.forget()
        while True:
            self._stamp()
            self._check_schema(claimer.db)
            if self.stop.is_set() or not self.targets:
                more = False
            elif not more:
                more = self.notifications.arrived() or self.dispatcher.retry_due()
                if more:
                    self.heads.forget()
            if more and self.dispatcher.free_slots():
                if self.notifications.requeued():  # dead events came back below the floors
                    self.floors.reset()
                if self.options.key_order:  # what it handled holds back later events of its rows
                    self.dispatcher.acknowledge(claimer)
                conflicts = claimer.conflicts
                claimed, more = self._claim_streams(claimer) if self.dispatcher.in_order else self._claim(claimer)
                conflicts = claimer.conflicts - conflicts
                if conflicts:  # the claim proves nothing: other claimers were busy at the same rows
                    self.metrics.count_claim_conflicts(conflicts)
                    more = True
                    if not claimed:
                        self.stop.wait(CONFLICT_PAUSE)
                worked = worked or claimed
                lockouts.report(claimer.lockouts, claimer.db, self.targets)
                self._flush_reports()
            if more and self.heads.probe_due and self.dispatcher.free_slots() and not self.stop.is_set():
                continue  # the probe that look put off, before any wait for reports
            if not self.dispatcher.busy():
                if more and not self.stop.is_set():
                    if not self.dispatcher.free_slots():  # handler processes still starting
                        self.dispatcher.collect(claimer, WAIT_FOR_START)
                    continue
                self.dispatcher.acknowledge(claimer)
                self._flush_reports()
                return worked
            idle_and_waiting = self.dispatcher.idle() and not more and not self.stop.is_set()
            ended = self.dispatcher.collect(claimer, NOTIFICATION_SLICE if idle_and_waiting else WAIT_SLICE)
            more = more or (ended and in_turn)

    def _check_schema(self, db: Database) -> None:
        """Every schema_version.CHECK_EVERY, stop gracefully if the schema changed."""
        if self.schema_changed or time.monotonic() < self.schema_checked_at + schema_version.CHECK_EVERY:
            return
        self.schema_checked_at = time.monotonic()
        why = schema_version.changed_since_start(db, "listener")
        if why is not None:
            log.error("stopping: %s", why)
            self.schema_changed = True
            if self.reports is not None:
                self.reports.put({"ended": why})
            self.halt()

    def _claim(self, claimer: Claimer) -> tuple[bool, bool]:
        """Parallel mode: a batch for each idle handler process. Returns
        whether anything was claimed and whether it got all it asked for."""
        batch = self.batch.size({target.tag for target in self.targets.values()})
        places = self.dispatcher.open_slots()
        if not places:
            return False, True
        wanted = batch * len(places)
        events = claimer.claim(self.targets, wanted, resume=not self.dispatcher.came_back())
        if events:
            self.dispatcher.hand_out(events, batch, places)
        return bool(events), len(events) >= wanted

    def _claim_streams(self, claimer: Claimer) -> tuple[bool, bool]:
        """Ordered mode: the first events of each stream whose head is
        claimable, one stream per idle handler process, then the next batch
        of each stream whose running batch was full, queued behind it in its
        process. Returns whether anything was claimed and whether streams
        were left (for lack of processes, or unprobed: HeadsProbe)."""
        by_key = streams(self.targets.values())
        busy = self.dispatcher.busy_streams()
        idle = {key: stream for key, stream in by_key.items() if key not in busy}
        ready = self.heads.ready(claimer, idle)
        claimed, left = False, False
        for key, stream in idle.items():
            if not any(target.sub_id in ready for target in stream):
                continue
            places = self.dispatcher.open_slots()
            if not places or self.stop.is_set():
                left = True
                break
            events = claimer.claim_head(stream, self.batch.size([key[1]]))
            if events:
                claimed = True
                self.heads.claimed(key)
                self.dispatcher.hand_stream(key, events, places[0])
        for key, slot, running, holding in self.dispatcher.running_streams():
            limit = self.batch.size([key[1]])
            if len(running) < limit or key not in by_key or self.stop.is_set():
                continue
            events = claimer.claim_next(by_key[key], running[-1].id, holding, limit)
            if events:
                claimed = True
                self.dispatcher.hand_stream(key, events, slot, follows=True)
        return claimed, left or self.heads.probe_due

    def _waiting_for_lock(self, claimer: Claimer) -> bool:
        """A settlement waits for another transaction's lock (Dispatcher._settle):
        go on waiting unless stopping, or a drain has waited --drain-patience."""
        self._stamp()
        lockouts.report(claimer.lockouts, claimer.db, self.targets)
        waited = claimer.lockouts.locked_for(lockouts.SETTLING)
        if self.options.drain and waited >= self.options.drain_patience:
            log.error("giving up the drain: settling events waited %.0fs for another transaction's lock", waited)
            self.gave_up = True
        return not (self.stop.is_set() or self.gave_up)

    # -- reports --------------------------------------------------------------------

    def _flush_reports(self) -> None:
        """Send the supervisor what was counted since the last report."""
        delta = self.metrics.snapshot(reset=True)
        counted = delta["events"] or delta["claim_conflicts"] or delta["minutes"] or delta["process_exits"]
        if self.reports is not None and counted:
            self.reports.put(delta)


def main(options: ListenOptions, reports: Queue[Any] | None, progress: c_double | None = None, parent: int = 0) -> None:
    """Entry point of a spawned worker process."""
    lifeline.leave_hangup_to_the_parent()
    if parent:
        lifeline.die_with(parent)
    logs.configure(level=options.log_level, fmt=options.log_format, logfile=options.log_file)
    try:
        worker = Worker(options, reports, progress)
        worker._install_signal_handlers()
        lifeline.take_held_stop_signals()  # held since the start: a stop now halts the worker gracefully
        code = worker.run()
    except BaseException:
        log.exception("the claimer failed; the listener starts a new one")
        code = 1
    if reports is not None:
        _send_last_reports(reports)
    logging.shutdown()
    # Leave without interpreter shutdown, also after an error: driver threads
    # left by a dead attachment or a hung handler must not keep the process
    # alive, and the driver's exit hook (provider shutdown) waits for ever
    # for a thread of ours still inside the engine (seen: the floors' look).
    os._exit(code)


def _send_last_reports(reports: Queue[Any]) -> None:
    """Wait, up to REPORTS_WAIT, until the queue's feeder thread has written
    what was put: os._exit does not wait for it, and the last counts were
    lost (a drain's summary and EVENT_STATS missed 10 of 300 handled events).
    Bounded: a supervisor that is gone reads nothing."""
    reports.close()
    writer = threading.Thread(target=reports.join_thread, name="last-reports", daemon=True)
    writer.start()
    writer.join(REPORTS_WAIT)
