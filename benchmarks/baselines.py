"""The naive approaches subs is measured against, written from their
descriptions (the seed articles), as plainly as their authors wrote them.

1. Polling worker: select every pending row of the subscription; for each,
   set its "work started" timestamp and commit, then delete it and commit.
2. Five processes, each taking one random pending row in a NO WAIT snapshot
   transaction (``ORDER BY RAND() ROWS 1 FOR UPDATE WITH LOCK``), sleeping
   0.3 s after each lock conflict.
3. The Firebird 5 SKIP LOCKED task queue: four processes, each taking the
   first unstarted task, marking it started, running it, writing its status.

Each process attaches through subscriptions.db.connection.Database (which loads the
embedded engine); the multi-process ones are started with spawn, since a
forked copy of a process with the engine loaded hangs.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

from firebird.driver import DatabaseError, Isolation, tpb

from subscriptions.db.connection import Database
from subscriptions.db.errors import is_conflict
from subscriptions.db.settings import ConnectionSettings

from .app import execute, sql

B2_PROCESSES = 5
B2_CONFLICT_PAUSE = 0.3
B3_PROCESSES = 4


@dataclass
class Report:
    """What one baseline process did; times are monotonic ns."""

    processed: int = 0
    conflicts: int = 0
    first: int | None = None
    last: int | None = None
    tasks: list[tuple[int, int, int]] = field(default_factory=list)  # (start, finish, sleep ms)

    def started(self) -> None:
        if self.first is None:
            self.first = time.monotonic_ns()

    def done(self) -> None:
        self.processed += 1
        self.last = time.monotonic_ns()


@dataclass(frozen=True)
class Result:
    processed: int
    conflicts: int
    span: float  # seconds from the first row taken to the last one finished
    wall: float  # seconds including starting the processes
    tasks: list[tuple[int, int, int]]
    stagger: float  # seconds from the first process's first row to the last process's


def combine(reports: Sequence[Report], wall: float) -> Result:
    firsts = [r.first for r in reports if r.first is not None]
    lasts = [r.last for r in reports if r.last is not None]
    span = (max(lasts) - min(firsts)) / 1e9 if firsts and lasts else 0.0
    stagger = (max(firsts) - min(firsts)) / 1e9 if firsts else 0.0
    return Result(
        sum(r.processed for r in reports),
        sum(r.conflicts for r in reports),
        span,
        wall,
        [task for r in reports for task in r.tasks],
        stagger,
    )


def naive_schema(settings: ConnectionSettings) -> int:
    """The seed article's tables and trigger on ITEMS, one subscription; its id."""
    for name in ("naive_subscriber", "naive_log", "naive_log_index", "naive_log_trigger", "naive_items_trigger"):
        execute(settings, name)
    with Database(settings) as db, db.transaction() as cursor:
        cursor.execute(sql()["naive_subscribe"], ("bench",))
        return cursor.fetchone()[0]


def polling(settings: ConnectionSettings, sub_id: int, deadline: float) -> Result:
    """Baseline 1, in this process (nothing to start)."""
    began = time.monotonic()
    report = Report()
    with Database(settings) as db:
        while time.monotonic() < deadline:
            with db.transaction() as cursor:
                cursor.execute(sql()["b1_pending"], (sub_id,))
                rows = cursor.fetchall()
            if not rows:
                break
            for log_id, _sub_id, _pk in rows:
                if time.monotonic() >= deadline:
                    break
                report.started()
                with db.transaction() as cursor:
                    cursor.execute(sql()["naive_start"], (log_id,))
                # the no-op handler runs here
                with db.transaction() as cursor:
                    cursor.execute(sql()["naive_delete"], (log_id,))
                report.done()
    return combine([report], time.monotonic() - began)


def random_lock_worker(settings: ConnectionSettings, sub_id: int, deadline: float) -> Report:
    """Baseline 2, one of its processes."""
    report = Report()
    with Database(settings) as db:
        no_wait_snapshot = tpb(Isolation.SNAPSHOT, lock_timeout=0)
        while time.monotonic() < deadline:
            try:
                with db.transaction(no_wait_snapshot) as cursor:
                    cursor.execute(sql()["b2_next"], (sub_id,))
                    row = cursor.fetchone()
                    if row is not None:
                        report.started()
                        cursor.execute(sql()["naive_start"], (row[0],))
            except DatabaseError as exc:
                if not is_conflict(exc):
                    raise
                report.conflicts += 1
                time.sleep(B2_CONFLICT_PAUSE)
                continue
            if row is None:
                break
            # the no-op handler runs here
            with db.transaction() as cursor:
                cursor.execute(sql()["naive_delete"], (row[0],))
            report.done()
    return report


def random_lock(settings: ConnectionSettings, sub_id: int, deadline: float) -> Result:
    return _processes(B2_PROCESSES, random_lock_worker, settings, sub_id, deadline)


def queue_schema(settings: ConnectionSettings, sleeps_ms: Sequence[int]) -> None:
    """QUEUE_TASK filled with one task per sleep, in one transaction."""
    execute(settings, "queue_task")
    with Database(settings) as db, db.transaction() as cursor:
        cursor.executemany(sql()["queue_task_insert"], [(f"Task {i}", ms) for i, ms in enumerate(sleeps_ms, 1)])


def skip_locked_worker(settings: ConnectionSettings, worker_id: int, deadline: float) -> Report:
    """Baseline 3, one of its executors (the article's Worker.run)."""
    report = Report()
    with Database(settings) as db:
        no_wait_snapshot = tpb(Isolation.SNAPSHOT, lock_timeout=0)
        while time.monotonic() < deadline:
            try:
                with db.transaction(no_wait_snapshot) as cursor:
                    cursor.execute(sql()["b3_next"])
                    task = cursor.fetchone()
                    if task is not None:
                        cursor.execute(sql()["b3_start"], (worker_id, task[0]))
            except DatabaseError as exc:
                if not is_conflict(exc):
                    raise
                report.conflicts += 1
                continue
            if task is None:
                break
            task_id, _name, sleep_ms = task
            report.started()
            started = time.monotonic_ns()
            time.sleep(sleep_ms / 1000)  # the task
            finished = time.monotonic_ns()
            try:
                with db.transaction(no_wait_snapshot) as cursor:
                    cursor.execute(sql()["b3_finish"], (0, "OK", task_id))
            except DatabaseError as exc:
                if not is_conflict(exc):
                    raise
                report.conflicts += 1
            report.tasks.append((started, finished, sleep_ms))
            report.done()
    return report


def skip_locked(settings: ConnectionSettings, deadline: float) -> Result:
    return _processes(B3_PROCESSES, skip_locked_worker, settings, None, deadline)


def _processes(
    count: int, worker: Callable[..., Report], settings: ConnectionSettings, argument: int | None, deadline: float
) -> Result:
    """Run ``count`` spawned processes of ``worker``; baseline 3 gets each its worker id."""
    began = time.monotonic()
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=count, mp_context=context) as pool:
        futures = [
            pool.submit(worker, settings, argument if argument is not None else index, deadline)
            for index in range(1, count + 1)
        ]
        reports = [future.result() for future in futures]
    return combine(reports, time.monotonic() - began)
