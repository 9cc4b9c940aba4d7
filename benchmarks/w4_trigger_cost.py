"""W4: what subs's trigger costs the writer: the same rows written to a plain
table, to one with one subscription and to one with five (each capturing the
row: new values on insert, old and new on update)."""

from __future__ import annotations

import datetime as dt
import time
from decimal import Decimal

from subscriptions.config import ConnectionSettings
from subscriptions.db import Database

from .app import execute, sql, subs
from .config import Context, Sizes
from .engines import Engine

NAME = "W4"
ENGINES = ("fb5",)
CASES = {"plain table": 0, "1 subscription": 1, "5 subscriptions": 5}
PHASES = ("client inserts", "client updates", "bulk insert (PSQL)", "bulk update (one statement)")


def title(sizes: Sizes) -> str:
    return (f"trigger cost on the writer, {sizes.w4_rows:,} rows per phase in one transaction; "
            "`subs add orders IU tagN`")


def _database(engine: Engine, subscriptions: int) -> ConnectionSettings:
    settings = engine.new_database("w4")
    execute(settings, "wide_table")
    if subscriptions:
        subs(settings, "init")
        for number in range(1, subscriptions + 1):
            subs(settings, "add", "orders", "IU", f"tag{number}")
    return settings


def _timed(db: Database, work) -> float:
    began = time.perf_counter()
    with db.transaction() as cursor:
        work(cursor)
    return time.perf_counter() - began


def _phases(settings: ConnectionSettings, rows: int) -> dict[str, float]:
    """Seconds per phase, commit included."""
    placed = dt.datetime(2024, 5, 1, 12, 30)
    statements = sql()
    with Database(settings) as db:
        def insert(cursor) -> None:
            for key in range(1, rows + 1):
                cursor.execute(statements["wide_insert"], (key, f"customer {key % 997}", Decimal(key) / 4,
                                                           placed, False, f"note for order {key}"))

        def update(cursor) -> None:
            for key in range(1, rows + 1):
                cursor.execute(statements["wide_update"], (Decimal(key) / 2, key))

        return {
            PHASES[0]: _timed(db, insert),
            PHASES[1]: _timed(db, update),
            PHASES[2]: _timed(db, lambda cursor: cursor.execute(statements["wide_bulk_insert"], (rows + 1, rows))),
            PHASES[3]: _timed(db, lambda cursor: cursor.execute(statements["wide_bulk_update"], (rows + 1,))),
        }


def run(ctx: Context, engine: Engine) -> None:
    rec, rows = ctx.recorder, ctx.sizes.w4_rows
    for repeat in range(1, ctx.repeat + 1):
        seconds: dict[str, dict[str, float]] = {}
        for case, subscriptions in CASES.items():
            ctx.progress(f"{NAME} {engine.name} repeat {repeat}/{ctx.repeat}: {case}")
            settings = _database(engine, subscriptions)
            try:
                seconds[case] = _phases(settings, rows)
            finally:
                engine.drop(settings)
            for phase, elapsed in seconds[case].items():
                rec.add(NAME, engine.name, case, f"{phase}", "rows/s", rows / elapsed, repeat)
        plain = seconds["plain table"]
        for case in list(CASES)[1:]:
            for phase in PHASES:
                rec.add(NAME, engine.name, case, f"x plain, {phase}", "x", seconds[case][phase] / plain[phase], repeat)
    rec.note(NAME, engine.name, "client phases: one prepared statement executed per row from Python, as an "
             "application writes; bulk phases: the rows written inside the engine (EXECUTE BLOCK loop, one "
             "UPDATE), which shows the trigger's own cost without client round trips; ratios are time ratios")
