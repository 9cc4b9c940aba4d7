"""W14: a transaction left open. While one stays open (a report, a tool's
session), the engine cannot collect what later transactions delete, and
every event handled since it started stays in EVENT_LOG as garbage that the
walks of the log pass over. The drain rate after that many handled events,
with such a transaction open and with none, per mode.

The handled events are made as W5 makes its history: inserted into
EVENT_LOG for the subscription and deleted, as the listener deletes each
handled event; the open transaction started before them.
"""

from __future__ import annotations

from subscriptions.db.connection import Database

from .app import execute, sql, subscribed_items
from .config import Context, Sizes
from .engines import Engine
from .w5_history import ItemsDb, drain_rate

NAME = "W14"
ENGINES = ("fb5", "fb3")
MODES = ("ordered", "parallel")
CASES = ("none open", "one open")


def title(sizes: Sizes) -> str:
    return (
        f"a transaction left open: drain of {sizes.w14_events:,} events after {sizes.w14_history:,} handled, "
        "with a transaction open since before them and with none"
    )


def drain_behind(ctx: Context, engine: Engine, mode: str, case: str) -> float:
    """Events/s of a drain after ``w14_history`` handled events."""
    db = ItemsDb(subscribed_items(engine, f"w14-{mode}"))
    left_open = Database(db.settings)
    try:
        if case == "one open":
            left_open.connection.begin()
            left_open.connection.cursor().execute("SELECT COUNT(*) FROM ITEMS").fetchall()
        with Database(db.settings) as attached:
            sub_id = attached.fetch_value("SELECT SUB_ID FROM EVENT_SUBSCRIBER")
            with attached.transaction() as cursor:
                cursor.execute(sql()["history_insert"], (sub_id, ctx.sizes.w14_history))
            with attached.transaction() as cursor:
                cursor.execute(sql()["history_delete"], (sub_id,))
        return drain_rate(ctx, engine, db, ctx.sizes.w14_events, "--mode", mode)
    finally:
        left_open.close()  # rolls its transaction back
        execute(db.settings, "delete_all_events")
        engine.drop(db.settings)


def run(ctx: Context, engine: Engine) -> None:
    rec = ctx.recorder
    for repeat in range(1, ctx.repeat + 1):
        ctx.progress(f"{NAME} {engine.name} repeat {repeat}/{ctx.repeat}: drains behind a transaction left open")
        for mode in MODES:
            rates = {case: drain_behind(ctx, engine, mode, case) for case in CASES}
            for case, rate in rates.items():
                rec.add(NAME, engine.name, f"subs {mode}", case, "ev/s", rate, repeat)
            ratio = rates["one open"] / rates["none open"]
            rec.add(NAME, engine.name, f"subs {mode}", "x none open", "x", ratio, repeat)
    rec.note(
        NAME,
        engine.name,
        "handled events made by inserting them into EVENT_LOG and deleting them; 'one open': a transaction of "
        "another attachment that read ITEMS, open from before them to the end of the drain; 'x none open': "
        "the rate with it over the rate without",
    )
