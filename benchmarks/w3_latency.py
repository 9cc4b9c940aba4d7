"""W3: latency of an idle listener: a writer commits single-row inserts one
at a time; the time from its commit returning to the handler starting."""

from __future__ import annotations

import random
import time

from subscriptions.db.connection import Database
from subscriptions.db.settings import ConnectionSettings
from subscriptions.db.sql import with_identifiers

from .app import TAG, execute, sql, subs, subscribed_items
from .config import Context, Sizes
from .engines import Engine
from .listen import Listener
from .results import percentile

NAME = "W3"
ENGINES = ("fb5", "fb3")
CASE = "idle listener"
SIXTY = "idle listener, 60 subscriptions"
READY_TIMEOUT = 60.0


def title(sizes: Sizes) -> str:
    low, high = sizes.w3_gap_ms
    return (
        f"latency, {sizes.w3_events:,} single-row commits {low}-{high} ms apart, then a drain of "
        f"{sizes.w3_drain:,} events, `subs listen` (ordered), with 1 and with 60 subscriptions"
    )


def _wait_for(listener: Listener, count: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while listener.count() < count:
        if listener.process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"listener handled {listener.count()} of {count} events:\n{listener.log()[-2000:]}")
        time.sleep(0.05)


def _sixty_subscriptions(settings: ConnectionSettings) -> None:
    """ITEMS and 19 more tables, each subscribed IUD by the benchmark tag."""
    with Database(settings) as db:
        for number in range(1, 20):
            with db.transaction() as cursor:
                cursor.execute(with_identifiers(sql()["w3_other_table"], table=f"OTHER_{number:02}"))
    subs(settings, "add", "items", "UD", TAG)
    for number in range(1, 20):
        subs(settings, "add", f"other_{number:02}", "IUD", TAG)


def _measure(ctx: Context, engine: Engine, settings: ConnectionSettings) -> tuple[list[float], float]:
    """Latencies (ms) of single-row commits to an idle listener, then the
    rate (events/s) at which the same listener drains a bulk insert."""
    sizes = ctx.sizes
    pause = random.Random(0)
    committed: dict[int, int] = {}
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
        first = sizes.w3_events + 1
        execute(settings, "items_bulk_insert", params=(first, sizes.w3_drain))
        bulk_committed = time.monotonic_ns()
        _wait_for(listener, sizes.w3_events + 1 + sizes.w3_drain, READY_TIMEOUT)
        outcome = listener.stop()
    latencies = [(h.started - committed[h.key]) / 1e6 for h in outcome.handled if h.key in committed]
    last = max(h.finished for h in outcome.handled if h.key >= first)
    return latencies, sizes.w3_drain / ((last - bulk_committed) / 1e9)


def run(ctx: Context, engine: Engine) -> None:
    rec = ctx.recorder
    for repeat in range(1, ctx.repeat + 1):
        rates = {}
        for case in (CASE, SIXTY):
            ctx.progress(f"{NAME} {engine.name} repeat {repeat}/{ctx.repeat}: {case}")
            settings = subscribed_items(engine, "w3")
            try:
                if case == SIXTY:
                    _sixty_subscriptions(settings)
                latencies, rates[case] = _measure(ctx, engine, settings)
            finally:
                engine.drop(settings)
            for label, q in (("p50", 50), ("p95", 95), ("p99", 99)):
                rec.add(NAME, engine.name, case, label, "ms", percentile(latencies, q), repeat)
            rec.add(NAME, engine.name, case, "max", "ms", max(latencies), repeat)
            rec.add(NAME, engine.name, case, "handled", "events", len(latencies), repeat)
            rec.add(NAME, engine.name, case, "drain events/s", "events/s", rates[case], repeat)
        rec.add(NAME, engine.name, SIXTY, "x drain rate with 1", "x", rates[SIXTY] / rates[CASE], repeat)
    rec.note(
        NAME,
        engine.name,
        "latency: from the writer's commit() returning to the handler's first line "
        "(both read CLOCK_MONOTONIC); percentiles per repeat, then the median over repeats; "
        f"drain: {ctx.sizes.w3_drain:,} rows inserted in one statement, from its commit to the last "
        "handler's end; 60 subscriptions: ITEMS and 19 idle tables, each IUD",
    )
