"""`subs listen`'s supervisor of its claimer process.

The supervisor holds no database connection while it runs: it starts the
claimer process (worker.py; spawn: forking a process that has the embedded
engine loaded hangs), which runs the ``--workers`` handler processes,
restarts it when it dies (after a pause that grows while it keeps dying soon
after its start without settling any event; with --drain, until that has
gone on for --drain-patience, or the claimer gave up itself), forwards
a stop signal (SIGTERM, SIGINT, SIGHUP: lifeline.stop_signals) for a
graceful stop bounded by ``--grace``, and kills it on a second signal. A
claimer that found the schema changed by another release
(worker.EXIT_SCHEMA_CHANGED) ends the listener instead of being restarted.
The claimer sends its handler outcomes to it for the metrics endpoint, and
stamps a shared progress clock: one that stops stamping for longer than a
handler may run plus a poll interval and ``STALL_MARGIN`` is killed and
replaced. A housekeeping thread disconnects attachments the
server keeps for dead claimers (reaper.py) when one dies and every
REAP_INTERVAL, fails at once the events a dead claimer held (recovery.py),
records the console's per-minute statistics (stats.py), warns of a
transaction left open that keeps EVENT_LOG's garbage (oldest_transaction.py),
rebuilds the claim index every REBUILD_EVERY handled events and whenever it
finds it unusable (housekeeping.py), and settles the capture triggers the
application's DDL regenerated (capture/trigger_sync.py). The claimer and its
handler processes die with their parent (a parent-death signal), so a
SIGKILLed listener leaves none behind. With --metrics-port, a thread of its
own reads the queue depth every poll interval. While the database fails,
housekeeping tries again after pauses that grow.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import queue
import signal
import threading
import time
from collections.abc import Iterator
from ctypes import c_double
from dataclasses import dataclass, field
from multiprocessing.process import BaseProcess

from firebird.driver import DatabaseError

from subscriptions.capture.trigger_sync import ChangedTriggerSettler
from subscriptions.db.connection import Database
from subscriptions.db.errors import first_line
from subscriptions.db.retry import Backoff
from subscriptions.db.terminal_stop import stopped_sharers, terminal_stop_ignored
from subscriptions.errors import SubsError

from . import housekeeping, lifeline, reaper, recovery, stats, worker
from .metrics import Metrics, read_queue_depth
from .oldest_transaction import OldestTransactionWatch
from .options import ListenOptions
from .startup import rebuild_claim_index

log = logging.getLogger("subs.listener")
RESTART_DELAY = 1.0
RESTART_DELAY_MAX = 30.0
# A claimer that ran this long, or settled events, before it died is
# restarted after RESTART_DELAY again, not after the grown pause of a crash
# loop: the pause is for claimers that die before they get anything done.
STEADY_RUN = 60.0
RECOVERY_RETRY = 1.0
# Seconds the end of a run waits for its threads' database work.
THREAD_END_WAIT = 5.0
STALL_MARGIN = 60.0
# What an operator of an embedded database should know when claimers stall:
# the engine's freeze after a SIGKILL (tests/SOAK-NOTES.md, finding 8) holds
# every process of the database, and only restarting them all ends it.
EMBEDDED_STALL = (
    "; if the next ones stall too, every process of this embedded database may be waiting inside the "
    'engine after one was SIGKILLed (docs/OPERATIONS.md, "The embedded engine"): stop them all, the '
    "application's included, and start them again"
)


def embedded_stall_hint(stalled: int | None) -> str:
    """EMBEDDED_STALL, or, when processes sharing the engine's lock directory
    are stopped (SIGSTOP, Ctrl-Z, a debugger), which: the engine waits for
    them, and only resuming or ending them ends the wait."""
    stopped = stopped_sharers(but=stalled)
    if not stopped:
        return EMBEDDED_STALL
    return (
        f"; stopped, sharing this embedded engine's lock directory: {', '.join(stopped)}; every process of "
        "its databases may wait for it inside the engine until it is resumed (kill -CONT PID) or ended "
        '(docs/OPERATIONS.md, "The embedded engine")'
    )


@dataclass
class Supervisor:
    options: ListenOptions
    metrics: Metrics = field(default_factory=Metrics)
    stopping: bool = False
    deadline: float = 0.0
    signals: int = 0  # stop signals received (``_signal``)
    signals_seen: int = 0  # of which ``_act_on_signals`` acted on

    def __post_init__(self) -> None:
        self.context = multiprocessing.get_context("spawn")
        # The queue's lock starts multiprocessing's resource tracker, a process
        # of our group that Ctrl-Z would otherwise stop for good (as _start).
        with self._spawning():
            self.reports = self.context.Queue()  # starts multiprocessing's resource tracker
        self.workers: list[BaseProcess | None] = []
        self.progress: dict[BaseProcess, c_double] = {}
        self.started: dict[BaseProcess, float] = {}
        # Events the claimer settled (handled, failed or dead), all told, and
        # the count when each claimer started (one claimer runs at a time).
        self.settled = 0
        self.settled_before: dict[BaseProcess, int] = {}
        self.restart_pause = Backoff(RESTART_DELAY, RESTART_DELAY_MAX)
        # Monotonic times at which the claimer of a slot whose claimer died starts.
        self.restart_at: dict[int, float] = {}
        self.stall_limit = self.options.timeout + self.options.poll + STALL_MARGIN
        self.reap_now = threading.Event()
        # (owner, reason) of workers that died holding claims (recovery.py).
        self.abandoned: queue.SimpleQueue[tuple[str, str]] = queue.SimpleQueue()
        self.done = threading.Event()
        self.handled_since_rebuild = 0
        self.recorder = reaper.owner()
        # --drain: when claimers began dying without settling anything, and
        # why the drain was given up (None while it goes on).
        self.failing_since: float | None = None
        self.gave_up: str | None = None
        self.ended: str | None = None  # why a claimer ended the listener (EXIT_SCHEMA_CHANGED)

    def _housekeep(self) -> None:
        """Housekeeping thread: when a worker dies (reap_now) and every
        REAP_INTERVAL, reap dead workers' attachments and fail at once what
        the dead ones held (again every RECOVERY_RETRY while one of their
        transactions still holds it); every RECORD_INTERVAL, record the
        per-minute statistics; every BACKLOG_INTERVAL, sample the backlog
        and check that the claim index is usable and how long the oldest
        active transaction has been open; once REBUILD_EVERY events
        were handled since the last rebuild, or when the index is unusable,
        rebuild it; every PRUNE_INTERVAL, prune statistics.
        Whenever it connects, it settles the capture triggers the
        application's DDL regenerated. It connects only when there is work."""
        unsettled: list[tuple[str, str]] = []
        settler = ChangedTriggerSettler()
        oldest_transaction = OldestTransactionWatch()
        next_reap = time.monotonic() + reaper.REAP_INTERVAL
        next_prune = next_sample = time.monotonic()
        # While the database fails (down, shut down), tries come less and less
        # often: a warning a second for the length of an outage buries the log.
        retry = Backoff(RECOVERY_RETRY, RESTART_DELAY_MAX)
        retry_in: float | None = None
        while not self.done.is_set():
            if retry_in is None:
                retry_in = RECOVERY_RETRY if unsettled else stats.RECORD_INTERVAL
            woken = self.reap_now.wait(retry_in)
            retry_in = None
            self.reap_now.clear()
            if self.done.is_set() or self.stopping:
                return
            while not self.abandoned.empty():
                unsettled.append(self.abandoned.get())
            now = time.monotonic()
            reap = woken or bool(unsettled) or now >= next_reap
            prune = now >= next_prune
            sample = now >= next_sample
            rebuild = self.handled_since_rebuild >= housekeeping.REBUILD_EVERY
            minutes = self.metrics.take_minutes()
            if not (reap or prune or sample or rebuild or minutes):
                continue
            try:
                with Database(self.options.settings) as db:
                    self._record(db, minutes)
                    if reap:
                        next_reap = now + reaper.REAP_INTERVAL
                        reaper.reap(db)
                        unsettled = [
                            (owner, reason)
                            for owner, reason in unsettled
                            if not recovery.fail_abandoned(db, owner, reason)
                        ]
                    if sample:
                        next_sample = now + stats.BACKLOG_INTERVAL
                        stats.record_backlog(db, self.recorder)
                        rebuild = rebuild or not housekeeping.queue_index_usable(db)
                        oldest_transaction.observe(db)
                        self.metrics.set_oldest_transaction(oldest_transaction.held_for())
                    if prune:
                        next_prune = now + stats.PRUNE_INTERVAL
                        stats.prune(db)
                    if rebuild and rebuild_claim_index(db):
                        self.handled_since_rebuild = 0
                    settler.settle(db)
                retry.reset()
            except (DatabaseError, SubsError) as exc:
                retry_in = retry.next_pause()
                log.warning("housekeeping: %s; trying again in %.0fs", first_line(exc), retry_in)

    def _record(self, db: Database, minutes: stats.Minutes) -> None:
        """Record per-minute statistics; kept for the next try if that fails."""
        if not minutes:
            return
        try:
            stats.record(db, self.recorder, minutes)
        except BaseException:
            self.metrics.merge({"minutes": minutes})
            raise

    def _record_last_minutes(self, *, housekeeping_ended: bool) -> None:
        """At the end of a run, record what the workers reported last and
        the backlog left behind, waiting THREAD_END_WAIT seconds at most: an
        attach can wait inside the engine for ever (docs/OPERATIONS.md, "The
        embedded engine"). Not while the housekeeping thread still waits
        there, with minutes of its own to record into the same rows."""
        if not housekeeping_ended:
            log.warning("could not record the last statistics: housekeeping still waits for the database")
            return

        def record() -> None:
            minutes = self.metrics.take_minutes()
            try:
                with Database(self.options.settings) as db:
                    self._record(db, minutes)
                    stats.record_backlog(db, self.recorder)
            except (DatabaseError, SubsError) as exc:
                log.warning("could not record the last statistics: %s", first_line(exc))

        recording = threading.Thread(target=record, name="last statistics", daemon=True)
        recording.start()
        recording.join(THREAD_END_WAIT)
        if recording.is_alive():
            log.warning("could not record the last statistics: the database did not answer within %gs", THREAD_END_WAIT)

    @contextlib.contextmanager
    def _spawning(self) -> Iterator[None]:
        """What the processes started meanwhile ignore from their start on:
        the terminal's stop key on an embedded database (terminal_stop.py);
        and what they hold back until they can act on it: SIGINT, SIGTERM and
        the hangup, which only this supervisor takes (lifeline.py)."""
        with terminal_stop_ignored(self.options.settings), lifeline.stop_signals_held():
            yield

    def _start(self) -> BaseProcess:
        progress = self.context.Value("d", time.monotonic(), lock=False)
        process = self.context.Process(
            target=worker.main,
            args=(self.options, self.reports, progress, os.getpid()),
            name="subs-worker",
            daemon=False,
        )
        # Ignored from its first instruction on, and by the handler
        # processes it starts in turn (db/terminal_stop.py).
        with self._spawning():
            process.start()
        self.progress[process] = progress
        self.started[process] = time.monotonic()
        self.settled_before[process] = self.settled
        return process

    def _kill_stalled(self) -> None:
        for process in self._alive():
            idle = time.monotonic() - self.progress[process].value
            if idle > self.stall_limit:
                hint = "" if self.options.settings.is_remote else embedded_stall_hint(process.pid)
                log.error("worker pid %s made no progress for %.0fs; killing it%s", process.pid, idle, hint)
                process.kill()

    def _signal(self, signum: int, frame: object) -> None:
        """Only counts the signal; run()'s loop acts on it within 0.1 s. The
        handler runs in the main thread between two of its steps, or inside
        a write the signal interrupted: one that logs can meet its own
        stream busy (RuntimeError, "reentrant call"), and a burst of signals
        nests such handlers (the claimer's did, until RecursionError)."""
        self.signals += 1

    def _act_on_signals(self) -> None:
        """The first stop signal stops the claimer gracefully, each later one at once."""
        while self.signals_seen < self.signals:
            self.signals_seen += 1
            if self.signals_seen > 1:
                log.warning("second signal: stopping workers at once")
                for process in self._alive():
                    process.kill()
                continue
            log.info("stopping: letting handlers finish (up to %ss)", self.options.grace)
            self.stopping = True
            self.deadline = time.monotonic() + self.options.grace
            for process in self._alive():
                process.terminate()

    def _reap_orphans(self) -> None:
        """At once: a zombie holds its locks on an embedded database."""
        claimers = {process.pid for process in self.workers if process is not None and process.pid is not None}
        for pid, exitcode in lifeline.reap_orphans(claimers):
            log.debug("reaped pid %s, left behind by a dead worker: it %s", pid, recovery.how_it_ended(exitcode))

    def _alive(self) -> list[BaseProcess]:
        return [p for p in self.workers if p is not None and p.is_alive()]

    def _collect_reports(self) -> None:
        while True:
            try:
                delta = self.reports.get_nowait()
            except queue.Empty:
                return
            if "ended" in delta:
                self.ended = delta["ended"]
                continue
            self.metrics.merge(delta)
            self.handled_since_rebuild += sum(counts.get("handled", 0) for counts in delta["events"].values())
            self.settled += sum(sum(counts.values()) for counts in delta["events"].values())

    def _refresh_queue_metrics(self) -> None:
        """Queue-metrics thread (--metrics-port): the queue depth every poll
        interval. Not in the main loop: on an embedded engine an attach can
        stall for many seconds after a claimer's SIGKILL (tests/SOAK-NOTES.md,
        4), and the main loop must meanwhile restart the claimer and stop
        on a signal."""
        while not self.done.is_set():
            try:
                with Database(self.options.settings) as db:
                    self.metrics.set_queue(read_queue_depth(db))
            except (DatabaseError, SubsError) as exc:
                log.warning("could not read queue depth: %s", first_line(exc))
            self.done.wait(self.options.poll)

    def _bury(self, index: int, process: BaseProcess) -> None:
        """A claimer that exited: its slot is done (stopping, or a drain that
        finished) or its successor is due after a pause, during which a
        stop signal still ends the listener at once."""
        process.join()
        self._collect_reports()  # what it sent before it died counts for it
        self.progress.pop(process, None)
        ran = time.monotonic() - self.started.pop(process)
        settled = self.settled - self.settled_before.pop(process)
        self.workers[index] = None
        if self.stopping or (self.options.drain and process.exitcode == 0):
            return
        if process.exitcode == worker.EXIT_SCHEMA_CHANGED:
            self.ended = self.ended or "the subs schema changed while it ran (see the log)"
            return
        if self.options.drain and process.exitcode == worker.EXIT_GAVE_UP:
            self.gave_up = "the database kept failing (see the log)"
            return
        how = "reconnect" if process.exitcode == worker.EXIT_RESTART else recovery.exit_label(process.exitcode)
        self.metrics.count_process_exit("claimer", how)
        if process.pid is not None:
            reason = recovery.exit_reason(process.exitcode, "claimer process")
            self.abandoned.put((reaper.owner(process.pid), reason))
        self.reap_now.set()
        if ran >= STEADY_RUN or settled:
            self.restart_pause.reset()
        pause = 0.0 if process.exitcode == worker.EXIT_RESTART else self.restart_pause.next_pause()
        ended = recovery.how_it_ended(process.exitcode)
        if self.options.drain:
            pause = self._drain_pause(settled, pause, ended)
            if self.gave_up:
                log.error("giving up the drain: worker pid %s %s", process.pid, ended)
                return
        log.warning("worker pid %s %s; starting a new one in %.1fs", process.pid, ended, pause)
        self.restart_at[index] = time.monotonic() + pause

    def _drain_pause(self, settled: int, pause: float, ended: str) -> float:
        """--drain: the pause before the next claimer, cut short so that the
        drain is given up (``gave_up``) once claimers have died without
        settling any event for --drain-patience."""
        if settled:
            self.failing_since = None
            return pause
        now = time.monotonic()
        if self.failing_since is None:
            self.failing_since = now
        failing = now - self.failing_since
        left = self.options.drain_patience - failing
        if left <= 0:
            self.gave_up = f"the claimer kept dying without settling an event for {failing:.0f}s ({ended})"
        return min(pause, max(left, 0.0))

    def _restart_due(self) -> None:
        for index, due in list(self.restart_at.items()):
            if self.stopping:
                del self.restart_at[index]
            elif time.monotonic() >= due:
                del self.restart_at[index]
                self.workers[index] = self._start()

    def run(self, *, with_queue_metrics: bool = False, adopt_orphans: bool = False) -> int:
        """Supervise claimers until stopped. ``adopt_orphans``: reap what dead
        claimers leave behind, as a process of its own must (not one whose
        other children someone else waits for)."""
        previous = {s: signal.signal(s, self._signal) for s in lifeline.stop_signals()}
        threads = [threading.Thread(target=self._housekeep, name="housekeeping", daemon=True)]
        if with_queue_metrics:
            threads.append(threading.Thread(target=self._refresh_queue_metrics, name="queue-metrics", daemon=True))
        try:
            if adopt_orphans:
                lifeline.adopt_orphans()
            self.workers = [self._start()]
            for thread in threads:
                thread.start()
            while True:
                self._act_on_signals()
                self._collect_reports()
                for index, process in enumerate(self.workers):
                    if process is not None and not process.is_alive():
                        self._bury(index, process)
                if adopt_orphans:
                    self._reap_orphans()
                self._restart_due()
                if all(p is None for p in self.workers) and not self.restart_at:
                    break
                if not self.stopping:
                    self._kill_stalled()
                if self.stopping and time.monotonic() > self.deadline:
                    log.warning("grace period over: killing workers")
                    for process in self._alive():
                        process.kill()
                time.sleep(0.1)
            self._act_on_signals()  # one that came in the last turn: a --drain then says it was stopped
            self._collect_reports()
            if self.stopping:
                done = self.metrics.totals()
                log.info(
                    "stopped: %d handled, %d failed attempt(s), %d died since the start",
                    done["handled"],
                    done["failed"],
                    done["dead"],
                )
            return 0
        finally:
            self.done.set()
            self.reap_now.set()
            for process in self._alive():
                process.kill()
            for thread in threads:
                if thread.is_alive():
                    thread.join(THREAD_END_WAIT)
            self._collect_reports()
            self._record_last_minutes(housekeeping_ended=not threads[0].is_alive())
            for signum, handler in previous.items():
                signal.signal(signum, handler)
