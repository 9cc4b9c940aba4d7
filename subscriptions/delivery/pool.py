"""The claimer's pool of handler processes (handler_process.py).

Each process is a slot: it runs one job at a time and reports back over its
own pipe. The pool knows which events each process holds, so when one dies
(SIGKILL, the OOM killer) or runs a handler over --timeout (and is killed for
it) the claimer fails the event it was running at once and a fresh process
takes the slot; the other processes go on. Processes are spawned: forking a
process that has the embedded engine loaded hangs.
"""

from __future__ import annotations

import dataclasses
import logging
import multiprocessing
import os
import time
from collections import deque
from ctypes import c_bool, c_longlong
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import TYPE_CHECKING

from subscriptions.db.retry import Backoff

from . import handler_process, lifeline
from .claimed import Claimed
from .claims import Stream
from .handler_process import EXIT_RECYCLED, JOB, RETURNED, STARTED, Job, Report
from .metrics import Metrics
from .options import ListenOptions
from .recovery import exit_label, exit_reason

if TYPE_CHECKING:
    from .handler_process import Progress

log = logging.getLogger("subs.worker")
CLOSE_TIMEOUT = 2.0
DEPTH = 2  # jobs a handler process holds: the running one and the next
# A slot whose processes keep dying before they are ready (a plugin that
# crashes them as they load it) starts the next one after a pause that
# doubles from 0.5-1 s up to START_PAUSE_MAX, not at once, again and again.
START_PAUSE = 1.0
START_PAUSE_MAX = 30.0


@dataclass
class Slot:
    """One handler process and its jobs: the one it is running, and the next
    one already in its pipe (DEPTH), so it never waits for the claimer."""

    process: BaseProcess
    connection: Connection
    progress: Progress  # how far the process got in its running job (handler_process's Progress)
    ready: bool = False  # the process has loaded its handlers
    queue: deque[tuple[Job, Stream | None]] = field(default_factory=deque)  # with the stream of an ordered job
    reported: int = 0  # the running job's events reported so far, in order
    heard: float = 0.0  # monotonic time of the last report (or of the job's start)
    done: list[int] = field(default_factory=list)  # the running job's handled events
    handed: int = 0  # jobs handed to the slot: the next one's Job.number
    # Pauses before the next process while processes end before they are ready.
    start_pause: Backoff = field(default_factory=lambda: Backoff(START_PAUSE, START_PAUSE_MAX))

    @property
    def job(self) -> Job | None:
        """The job the process is running (None: idle)."""
        return self.queue[0][0] if self.queue else None

    @property
    def stream(self) -> Stream | None:
        return self.queue[0][1] if self.queue else None

    @property
    def running(self) -> Claimed | None:
        """The event the process is on now, if it has a job."""
        job = self.job
        return job.events[self.reported] if job and self.reported < len(job.events) else None

    @property
    def recycled(self) -> bool:
        """The process left for a fresh one (--handler-memory-limit), between
        jobs and having reported the last one it ran."""
        return self.process.exitcode == EXIT_RECYCLED

    def cut_off(self) -> tuple[list[Claimed], list[Claimed]]:
        """For a process that is gone, the running job's events it got to
        without reporting them (handler_process.Progress): those handled (or
        failed) whose outcome was lost, and those of the call it was in. A
        process that went between calls went while it decoded the next
        event, or for no event's sake: that event counts as the call it was
        in, so that an event that kills its process always uses up its
        attempts."""
        job = self.job
        if job is None or self.recycled:
            return [], []
        if self.progress[JOB] != job.number:  # it had not begun the job
            return [], job.events[self.reported : self.reported + 1]
        returned = max(self.progress[RETURNED], self.reported)
        started = max(self.progress[STARTED], returned + 1)
        return job.events[self.reported : returned], job.events[returned:started]

    def next_job(self) -> None:
        """The running job is settled: the process goes on with the next one, if any."""
        self.queue.popleft()
        self.reported, self.done, self.heard = 0, [], time.monotonic()


class HandlerPool:
    """``options.workers`` handler processes for one claimer."""

    def __init__(self, options: ListenOptions, owner: str, metrics: Metrics) -> None:
        self.options = options
        self.owner = owner
        self.metrics = metrics
        self.context = multiprocessing.get_context("spawn")
        # True: start no further handler. A flag in shared memory, not an
        # Event: the claimer leaves with os._exit, and an Event's semaphores
        # were then reported leaked at every listener exit.
        self.stop = self.context.RawValue(c_bool, False)
        self.slots = [self._spawn() for _ in range(options.workers)]

    def _spawn(self, start_pause: float = 0.0) -> Slot:
        mine, theirs = self.context.Pipe()
        progress = self.context.RawArray(c_longlong, 3)
        process = self.context.Process(
            target=handler_process.main,
            args=(self.options, theirs, self.stop, progress, self.owner, os.getpid(), start_pause),
            name="subs-handler",
            daemon=True,
        )
        with lifeline.stop_signals_held():  # until the process ignores them (handler_process.main)
            process.start()
        theirs.close()
        return Slot(process, mine, progress)

    def open_slots(self) -> list[Slot]:
        """Slots that take another job, one entry per job they take, idle
        processes first; an idle process found dead is replaced."""
        for slot in self.slots:
            if not slot.queue and not slot.process.is_alive():
                if not slot.recycled:
                    log.warning("%s (pid %s, idle); starting a new one", self.reason(slot), slot.process.pid)
                self.replace(slot)
        places = [
            (position, index)
            for index, slot in enumerate(self.slots)
            if slot.ready
            for position in range(len(slot.queue), DEPTH)
        ]
        return [self.slots[index] for _, index in sorted(places)]

    def idle_count(self) -> int:
        """Ready processes with no job at all."""
        return sum(1 for slot in self.slots if slot.ready and not slot.queue)

    def busy(self) -> list[Slot]:
        return [slot for slot in self.slots if slot.queue]

    def hand(self, slot: Slot, job: Job, stream: Stream | None = None) -> None:
        """Queue ``job`` for the slot's process. If the process is gone, the
        job stays queued: the next ``wait`` sees the death, and the claimer
        settles the slot's jobs as never started."""
        if not slot.queue:
            slot.reported, slot.heard = 0, time.monotonic()
        slot.handed += 1
        job = dataclasses.replace(job, number=slot.handed)
        slot.queue.append((job, stream))
        try:
            slot.connection.send(job)
        except OSError:
            log.debug("handler process pid %s is gone; its end is settled next", slot.process.pid)

    def wait(self, timeout: float) -> list[Slot]:
        """Slots with something to read (reports, readiness, or their
        process's death), waiting up to ``timeout`` seconds for one."""
        watched = [slot for slot in self.slots if slot.queue or not slot.ready]
        if not watched:
            return []
        owners: dict[object, Slot] = {}
        for slot in watched:
            owners[slot.connection] = owners[slot.process.sentinel] = slot
        ready = wait([slot.connection for slot in watched] + [slot.process.sentinel for slot in watched], timeout)
        return list({id(owners[key]): owners[key] for key in ready}.values())

    def receive(self, slot: Slot) -> list[Report] | None:
        """The slot's reports so far; None when its process is gone."""
        reports: list[Report] = []
        heard = False
        try:
            while slot.connection.poll():
                reports.extend(slot.connection.recv())
                heard = True
        except (EOFError, OSError):
            if not heard:
                return None
            # What it sent before it went is taken first; its end comes next time.
        if not heard:
            return None if not slot.process.is_alive() else []
        slot.ready, slot.heard = True, time.monotonic()
        return reports

    def reason(self, slot: Slot) -> str:
        """Why a slot's process is gone."""
        slot.process.join(CLOSE_TIMEOUT)
        return exit_reason(slot.process.exitcode)

    def kill(self, slot: Slot) -> None:
        """Kill a process whose handler runs over --timeout."""
        slot.process.kill()
        slot.process.join(CLOSE_TIMEOUT)

    def replace(self, slot: Slot) -> None:
        """A fresh process in the slot of one that is gone (or cannot be
        talked to); after a pause if the processes of the slot keep ending
        before they are ready."""
        if slot.process.is_alive():
            slot.process.kill()
        slot.process.join(CLOSE_TIMEOUT)
        self.metrics.count_process_exit("handler", "recycled" if slot.recycled else exit_label(slot.process.exitcode))
        slot.connection.close()
        if slot.ready:
            slot.start_pause.reset()
            pause = 0.0
        else:
            pause = slot.start_pause.next_pause()
            log.warning(
                "handler process pid %s ended before it was ready; the next one starts in %.1fs",
                slot.process.pid,
                pause,
            )
        fresh = self._spawn(pause)
        slot.process, slot.connection, slot.progress = fresh.process, fresh.connection, fresh.progress
        slot.ready = False
        slot.queue.clear()
        slot.reported, slot.done = 0, []

    def close(self) -> None:
        """Let every process finish and leave; kill those that do not in time."""
        self.stop.value = True
        for slot in self.slots:
            try:
                slot.connection.send(None)
            except OSError:
                pass
        deadline = time.monotonic() + CLOSE_TIMEOUT
        for slot in self.slots:
            slot.process.join(max(deadline - time.monotonic(), 0))
            if slot.process.is_alive():
                slot.process.kill()
                slot.process.join(CLOSE_TIMEOUT)
            slot.connection.close()
