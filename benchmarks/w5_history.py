"""W5: does history slow subs down? Claim cost and W1-style drain throughput
on a database through which 1,000,000 events have already gone, vs a fresh one.

Producing a million events through the listener would take hours here, so the
history is made the way the listener leaves it: the events are inserted into
EVENT_LOG for the subscription and deleted (as the listener deletes each
handled event), and committed. The first claim afterwards walks the deleted
entries and collects the garbage (cooperative garbage collection); it is
reported on its own. Then the claim index is rebuilt, as the listener's
housekeeping does at start-up and every 50,000 handled events (without it,
claims after 1M events took 3x as long: the index keeps the emptied pages),
and the steady state is measured.
"""

from __future__ import annotations

import statistics
import time

from subscriptions.db.connection import Database
from subscriptions.db.settings import ConnectionSettings
from subscriptions.delivery import housekeeping
from subscriptions.delivery.claims import Claimer, load_targets, stream_of

from .app import execute, insert_items, sql, subscribed_items
from .config import Context, Sizes
from .engines import Engine
from .listen import Listener

NAME = "W5"
ENGINES = ("fb5",)
CLAIMS = {"claim_head (ordered)": "claim_head", "claim (parallel)": "claim"}
LEASE = 30.0


def title(sizes: Sizes) -> str:
    return (
        f"history: {sizes.w5_history:,} events already processed vs a fresh database; "
        f"{sizes.w5_claims} single-event claims, a {sizes.w5_events:,}-event drain (subs ordered)"
    )


class ItemsDb:
    """A benchmark database and the next free ITEMS key in it."""

    def __init__(self, settings: ConnectionSettings) -> None:
        self.settings = settings
        self.next_key = 1

    def insert(self, count: int) -> None:
        insert_items(self.settings, count, self.next_key)
        self.next_key += count


def make_history(ctx: Context, engine: Engine) -> ItemsDb:
    rec, n = ctx.recorder, ctx.sizes.w5_history
    history = ItemsDb(subscribed_items(engine, "w5-history"))
    with Database(history.settings) as db:
        (target,) = load_targets(db)
        began = time.perf_counter()
        with db.transaction() as cursor:
            cursor.execute(sql()["history_insert"], (target.sub_id, n))
        inserted = time.perf_counter()
        with db.transaction() as cursor:
            cursor.execute(sql()["history_delete"], (target.sub_id,))
        deleted = time.perf_counter()
    rec.add(NAME, engine.name, "history set-up", f"insert {n:,} events", "s", inserted - began)
    rec.add(NAME, engine.name, "history set-up", f"delete {n:,} events", "s", deleted - inserted)
    history.insert(1)
    with Database(history.settings) as db:
        claimer = Claimer(db, "bench", LEASE)
        (target,) = load_targets(db)
        began = time.perf_counter()
        events = claimer.claim_head([target], 1)
        first = time.perf_counter() - began
        claimer.settle_head(stream_of(target), [e.id for e in events])
        began = time.perf_counter()
        if not housekeeping.rebuild_queue_index(db):
            raise RuntimeError("the claim index could not be rebuilt on an idle database")
        rebuild = time.perf_counter() - began
    rec.add(
        NAME, engine.name, "history set-up", "first claim after the deletes (collects the garbage)", "ms", first * 1000
    )
    rec.add(NAME, engine.name, "history set-up", "claim index rebuild (listener housekeeping)", "ms", rebuild * 1000)
    return history


def claim_cost(db: ItemsDb, kind: str, count: int) -> float:
    """Median milliseconds of one claim of one event (its acknowledgement not counted)."""
    db.insert(count)
    times = []
    with Database(db.settings) as attached:
        claimer = Claimer(attached, "bench", LEASE)
        (target,) = load_targets(attached)
        for _ in range(count):
            began = time.perf_counter()
            if kind == "claim_head":
                events = claimer.claim_head([target], 1)
                times.append(time.perf_counter() - began)
                claimer.settle_head(stream_of(target), [e.id for e in events])
            else:
                events = claimer.claim({target.sub_id: target}, 1)
                times.append(time.perf_counter() - began)
                claimer.ack([e.id for e in events])
    return statistics.median(times) * 1000


def drain_rate(ctx: Context, engine: Engine, db: ItemsDb, events: int, *args: str) -> float:
    """Events/s of a `subs listen --drain ARGS` of ``events`` new events."""
    db.insert(events)
    with Listener(engine, db.settings, ctx.workdir, "--drain", *args) as listener:
        outcome = listener.finish()
        if listener.check_drained(db.settings, ctx.recorder, NAME, engine.name):
            execute(db.settings, "delete_all_events")  # so the next drain starts empty
    return len(outcome.handled) / outcome.span if outcome.span else 0.0


def run(ctx: Context, engine: Engine) -> None:
    rec = ctx.recorder
    ctx.progress(f"{NAME} {engine.name}: making {ctx.sizes.w5_history:,} events of history")
    history = make_history(ctx, engine)
    try:
        for repeat in range(1, ctx.repeat + 1):
            ctx.progress(f"{NAME} {engine.name} repeat {repeat}/{ctx.repeat}: claims and drain, fresh vs history")
            fresh = ItemsDb(subscribed_items(engine, "w5-fresh"))
            try:
                for case, kind in CLAIMS.items():
                    costs = {
                        label: claim_cost(db, kind, ctx.sizes.w5_claims)
                        for label, db in (("fresh", fresh), ("history", history))
                    }
                    for label, cost in costs.items():
                        rec.add(NAME, engine.name, case, f"{label}", "ms", cost, repeat)
                    rec.add(NAME, engine.name, case, "x fresh", "x", costs["history"] / costs["fresh"], repeat)
                rates = {
                    label: drain_rate(ctx, engine, db, ctx.sizes.w5_events)
                    for label, db in (("fresh", fresh), ("history", history))
                }
                for label, rate in rates.items():
                    rec.add(NAME, engine.name, "subs ordered", f"{label}", "ev/s", rate, repeat)
                rec.add(NAME, engine.name, "subs ordered", "x fresh", "x", rates["fresh"] / rates["history"], repeat)
            finally:
                engine.drop(fresh.settings)
    finally:
        engine.drop(history.settings)
    rec.note(
        NAME,
        engine.name,
        "history made by inserting the events into EVENT_LOG and deleting them, as the "
        "listener does after handling; claim figures: median of single-event claims; 'x fresh' is history "
        "cost over fresh cost (for the drain: fresh rate / history rate)",
    )
