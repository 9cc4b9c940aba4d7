"""W12: many subscriptions. The same events logged for one subscription, or
spread evenly over many tables each subscribed IUD: how fast `subs listen
--drain` gets through them, ordered and parallel. A claim looks at every
subscription its listener serves, so this is what a large schema costs.

The rows go to the tables in turn, so each subscription's events lie far
apart in the log. Each mode also drains the same events logged table by
table, which tells what that spread costs from what the number of
subscriptions costs."""

from __future__ import annotations

from subscriptions.capture import subscribers
from subscriptions.db.connection import Database
from subscriptions.db.settings import ConnectionSettings
from subscriptions.db.sql import with_identifiers

from .app import TAG, insert_items, sql, subscribed_items
from .config import Context, Sizes
from .engines import Engine
from .listen import drain_rate

NAME = "W12"
ENGINES = ("fb5", "fb3")
ORDERED = "ordered"
SPREAD_RATE = "x one subscription"


def parallel_case(sizes: Sizes) -> str:
    return f"parallel ({sizes.workers} processes)"


def spread_case(mode: str, sizes: Sizes) -> str:
    return f"{mode}, {sizes.w12_tables} tables"


def grouped_case(mode: str, sizes: Sizes) -> str:
    return f"{spread_case(mode, sizes)}, logged table by table"


def title(sizes: Sizes) -> str:
    return (
        f"many subscriptions: {sizes.w12_events:,} events of 1 subscription, or spread over "
        f"{sizes.w12_tables} tables subscribed IUD ({3 * sizes.w12_tables + 1} subscriptions)"
    )


def _spread(settings: ConnectionSettings, tables: int, events: int, grouped: bool = False) -> None:
    """``tables`` tables beside ITEMS, each subscribed IUD, and ``events``
    rows inserted over them in one transaction: in turn, or ``grouped``,
    one table's rows after another's."""
    names = [f"OTHER_{number:03}" for number in range(1, tables + 1)]
    keys = sorted(range(1, events + 1), key=(lambda key: (key % tables, key)) if grouped else None)
    with Database(settings) as db:
        for name in names:
            with db.transaction() as cursor:
                cursor.execute(with_identifiers(sql()["w3_other_table"], table=name))
            subscribers.add(db, name, "IUD", TAG)
        with db.transaction() as cursor:
            for key in keys:
                table = names[key % tables]
                cursor.execute(with_identifiers(sql()["w12_other_insert"], table=table), (key, f"row {key}"))


def run(ctx: Context, engine: Engine) -> None:
    rec, sizes = ctx.recorder, ctx.sizes
    workers = ("--workers", str(sizes.workers))
    modes = {ORDERED: workers, parallel_case(sizes): ("--mode", "parallel", *workers)}
    for repeat in range(1, ctx.repeat + 1):
        for mode, args in modes.items():
            rates = {}
            spread, grouped = spread_case(mode, sizes), grouped_case(mode, sizes)
            cases = (mode, spread, grouped)
            for case in cases:
                ctx.progress(f"{NAME} {engine.name} repeat {repeat}/{ctx.repeat}: {case}")
                settings = subscribed_items(engine, "w12")
                try:
                    if case == mode:
                        insert_items(settings, sizes.w12_events)
                    else:
                        _spread(settings, sizes.w12_tables, sizes.w12_events, grouped=case == grouped)
                    rates[case] = drain_rate(ctx, engine, settings, NAME, *args)
                finally:
                    engine.drop(settings)
                rec.add(NAME, engine.name, case, "events/s", "ev/s", rates[case], repeat)
            for case in cases[1:]:
                rec.add(NAME, engine.name, case, SPREAD_RATE, "x", rates[case] / rates[mode], repeat)
    rec.note(
        NAME,
        engine.name,
        f"{sizes.w12_events:,} rows committed before the listener starts, then `subs listen --drain`; "
        "rate: events over the time from the first handler's start to the last one's end; "
        "no-op handler",
    )
