"""W10: the handler pool. Quick I/O-like handlers (1 ms each) on 4 handler
processes against ordered mode, and how soon the event of a SIGKILLed
handler process starts again (with the default backoff)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

from subscriptions.db.connection import Database

from .app import insert_sleepy_items, subscribed_items
from .config import Context, Sizes
from .engines import Engine
from .listen import Listener, drain_rate

NAME = "W10"
ENGINES = ("fb5", "fb3")
ORDERED = "1 ms handler, ordered"
KILLED = "handler process killed"
RESTART = "s to start again"
POLL_EVERY = 0.005
LONG_SLEEP_MS = 60_000


def parallel_case(sizes: Sizes) -> str:
    return f"1 ms handler, parallel ({sizes.workers} processes)"


def title(sizes: Sizes) -> str:
    return f"handler processes: {sizes.w10_events:,} handlers of 1 ms; a handler process killed"


def run(ctx: Context, engine: Engine) -> None:
    rec, sizes = ctx.recorder, ctx.sizes
    parallel = parallel_case(sizes)
    workers = ("--workers", str(sizes.workers))
    for repeat in range(1, ctx.repeat + 1):
        rates = {}
        for case, args in ((ORDERED, workers), (parallel, ("--mode", "parallel", *workers))):
            ctx.progress(f"{NAME} {engine.name} repeat {repeat}/{ctx.repeat}: {case}")
            settings = subscribed_items(engine, "w10")
            try:
                insert_sleepy_items(settings, [1] * sizes.w10_events)
                rates[case] = drain_rate(ctx, engine, settings, NAME, *args)
            finally:
                engine.drop(settings)
            rec.add(NAME, engine.name, case, "events/s", "ev/s", rates[case], repeat)
        rec.add(NAME, engine.name, parallel, "x ordered", "x", rates[parallel] / rates[ORDERED], repeat)
        ctx.progress(f"{NAME} {engine.name} repeat {repeat}/{ctx.repeat}: {KILLED}")
        rec.add(NAME, engine.name, KILLED, RESTART, "s", _restart_after_kill(ctx, engine), repeat)
    rec.note(
        NAME,
        engine.name,
        "events/s: handled events over the span from the first handler start to the last finish; "
        f"{KILLED}: one event whose handler sleeps, --workers 1, the default --backoff-min 1 and --lease 30: "
        "seconds from SIGKILL of the handler process to the event's second claim",
    )


def _restart_after_kill(ctx: Context, engine: Engine) -> float:
    settings = subscribed_items(engine, "w10kill")
    try:
        insert_sleepy_items(settings, [LONG_SLEEP_MS])
        args = ("--mode", "parallel", "--workers", "1", "--poll", "30")
        with Listener(engine, settings, ctx.workdir, *args) as listener, Database(settings) as db:
            _wait_for(lambda: _last_span(db) > 0, "the event to be claimed")
            first = _last_span(db)
            (handler,) = _handler_processes(listener.pid)
            time.sleep(0.5)  # in its handler by now
            killed = time.monotonic()
            os.kill(handler, signal.SIGKILL)
            _wait_for(lambda: _last_span(db) > first, "the event to be claimed again")
            return time.monotonic() - killed
    finally:
        engine.drop(settings)


def _last_span(db: Database) -> int:
    """The newest lease a parallel claim took (EVENT_SPAN), 0 before the first."""
    return int(db.fetch_value("SELECT COALESCE(MAX(SPAN_ID), 0) FROM EVENT_SPAN"))


def _handler_processes(listener: int) -> list[int]:
    """The listener's grandchildren: its claimer's handler processes."""
    _wait_for(lambda: len(_children(listener)) == 1, "the claimer process")
    (claimer,) = _children(listener)
    _wait_for(lambda: len(_children(claimer)) == 1, "the handler process")
    return _children(claimer)


def _children(pid: int) -> list[int]:
    """The processes ``pid`` started with multiprocessing's spawn (not its resource tracker)."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [int(child) for child in children if b"spawn_main" in Path(f"/proc/{child}/cmdline").read_bytes()]


def _wait_for(condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"W10: waited {timeout:g} s for {what}")
        time.sleep(POLL_EVERY)
