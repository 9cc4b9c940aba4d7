"""W3: latency of an idle listener: a writer commits single-row inserts one
at a time; the time from its commit returning to the handler starting."""

from __future__ import annotations

import random
import time

from subscriptions.db.connection import Database

from .app import sql, subscribed_items
from .config import Context, Sizes
from .engines import Engine
from .listen import Listener
from .results import percentile

NAME = "W3"
ENGINES = ("fb5", "fb3")
CASE = "idle listener"
READY_TIMEOUT = 60.0


def title(sizes: Sizes) -> str:
    low, high = sizes.w3_gap_ms
    return f"latency, {sizes.w3_events:,} single-row commits {low}-{high} ms apart, `subs listen` (ordered)"


def _wait_for(listener: Listener, count: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while listener.count() < count:
        if listener.process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"listener handled {listener.count()} of {count} events:\n{listener.log()[-2000:]}")
        time.sleep(0.05)


def run(ctx: Context, engine: Engine) -> None:
    rec, sizes = ctx.recorder, ctx.sizes
    pause = random.Random(0)
    for repeat in range(1, ctx.repeat + 1):
        ctx.progress(f"{NAME} {engine.name} repeat {repeat}/{ctx.repeat}: {CASE}")
        settings = subscribed_items(engine, "w3")
        committed: dict[int, int] = {}
        try:
            with Listener(engine, settings, ctx.workdir) as listener, Database(settings) as db:
                insert = sql()["items_insert"]
                # Warm-up: the listener has registered for events once it handled this one.
                with db.transaction() as cursor:
                    cursor.execute(insert, (0, "warm-up", 0))
                _wait_for(listener, 1, READY_TIMEOUT)
                for key in range(1, sizes.w3_events + 1):
                    time.sleep(pause.uniform(*sizes.w3_gap_ms) / 1000)
                    with db.transaction() as cursor:
                        cursor.execute(insert, (key, f"item {key}", 0))
                    committed[key] = time.monotonic_ns()
                _wait_for(listener, sizes.w3_events + 1, READY_TIMEOUT)
                outcome = listener.stop()
        finally:
            engine.drop(settings)
        latencies = [(h.started - committed[h.key]) / 1e6 for h in outcome.handled if h.key in committed]
        for label, q in (("p50", 50), ("p95", 95), ("p99", 99)):
            rec.add(NAME, engine.name, CASE, label, "ms", percentile(latencies, q), repeat)
        rec.add(NAME, engine.name, CASE, "max", "ms", max(latencies), repeat)
        rec.add(NAME, engine.name, CASE, "handled", "events", len(latencies), repeat)
    rec.note(
        NAME,
        engine.name,
        "latency: from the writer's commit() returning to the handler's first line "
        "(both read CLOCK_MONOTONIC); percentiles per repeat, then the median over repeats",
    )
