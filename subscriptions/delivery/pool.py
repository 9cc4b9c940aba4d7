"""The claimer's pool of handler processes (handler_process.py).

Each process is a slot: it runs one job at a time and reports back over its
own pipe. The pool knows which events each process holds, so when one dies
(SIGKILL, the OOM killer) or runs a handler over --timeout (and is killed for
it) the claimer fails the event it was running at once and a fresh process
takes the slot; the other processes go on. Processes are spawned: forking a
process that has the embedded engine loaded hangs.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess

from . import handler_process
from .claimed import Claimed
from .claims import Stream
from .handler_process import Job, Report
from .options import ListenOptions
from .recovery import exit_reason

log = logging.getLogger("subs.worker")
CLOSE_TIMEOUT = 2.0


@dataclass
class Slot:
    """One handler process and the job it is running (None: idle)."""

    process: BaseProcess
    connection: Connection
    ready: bool = False  # the process has loaded its handlers
    job: Job | None = None
    stream: Stream | None = None  # ordered mode: the stream the job belongs to
    reported: int = 0  # the job's events reported so far, in order
    heard: float = 0.0  # monotonic time of the last report (or of the hand-over)
    done: list[int] = field(default_factory=list)  # the job's handled events
    unstarted: list[int] = field(default_factory=list)  # the job's events reported as not started

    def clear(self) -> None:
        """The job is settled: the slot is idle."""
        self.job, self.stream, self.reported, self.done, self.unstarted = None, None, 0, [], []

    @property
    def running(self) -> Claimed | None:
        """The event the process is on now, if it has a job."""
        return self.job.events[self.reported] if self.job and self.reported < len(self.job.events) else None


class HandlerPool:
    """``options.workers`` handler processes for one claimer."""

    def __init__(self, options: ListenOptions, owner: str) -> None:
        self.options = options
        self.owner = owner
        self.context = multiprocessing.get_context("spawn")
        self.stop = self.context.Event()  # set: start no further handler
        self.slots = [self._spawn() for _ in range(options.workers)]

    def _spawn(self) -> Slot:
        mine, theirs = self.context.Pipe()
        process = self.context.Process(
            target=handler_process.main,
            args=(self.options, theirs, self.stop, self.owner, os.getpid()),
            name="subs-handler",
            daemon=True,
        )
        process.start()
        theirs.close()
        return Slot(process, mine)

    def idle(self) -> list[Slot]:
        """Slots ready for a job; an idle process found dead is replaced."""
        for slot in self.slots:
            if slot.job is None and not slot.process.is_alive():
                log.warning("%s (pid %s, idle); starting a new one", self.reason(slot), slot.process.pid)
                self.replace(slot)
        return [slot for slot in self.slots if slot.job is None and slot.ready]

    def busy(self) -> list[Slot]:
        return [slot for slot in self.slots if slot.job is not None]

    def hand(self, slot: Slot, job: Job, stream: Stream | None = None) -> None:
        slot.job, slot.stream, slot.reported, slot.heard = job, stream, 0, time.monotonic()
        slot.connection.send(job)

    def wait(self, timeout: float) -> list[Slot]:
        """Slots with something to read (reports, readiness, or their
        process's death), waiting up to ``timeout`` seconds for one."""
        watched = [slot for slot in self.slots if slot.job is not None or not slot.ready]
        if not watched:
            return []
        waited: dict[object, Slot] = {}
        for slot in watched:
            waited[slot.connection] = slot
            waited[slot.process.sentinel] = slot
        ready = wait([slot.connection for slot in watched] + [slot.process.sentinel for slot in watched], timeout)
        return list({id(waited[key]): waited[key] for key in ready}.values())

    def receive(self, slot: Slot) -> list[Report] | None:
        """The slot's reports so far; None when its process is gone."""
        reports: list[Report] = []
        heard = False
        try:
            while slot.connection.poll():
                reports.extend(slot.connection.recv())
                heard = True
        except (EOFError, OSError):
            return None
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
        """A fresh process in the slot of one that is gone."""
        slot.connection.close()
        fresh = self._spawn()
        slot.process, slot.connection, slot.ready = fresh.process, fresh.connection, False
        slot.clear()

    def close(self) -> None:
        """Let every process finish and leave; kill those that do not in time."""
        self.stop.set()
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
