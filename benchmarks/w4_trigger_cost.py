"""W4: what subs's trigger costs the writer: the same rows written to a plain
table, to one with one subscription and to one with five (each capturing the
row: new values on insert, old and new on update), and to one with the
design probe of statements.sql (a typed copy of the row per change, which a
listener would encode later) for comparison, with what that encoding would
cost the listener."""

from __future__ import annotations

import contextlib
import datetime as dt
import time
from decimal import Decimal

from subscriptions.db.connection import Database
from subscriptions.db.settings import ConnectionSettings

from .app import execute, sql, subs
from .config import Context, Sizes
from .engines import Engine

NAME = "W4"
ENGINES = ("fb5", "fb3")
PROBE = "typed copy (design probe)"
# Subscriptions per case; the probe has its own trigger instead.
CASES = {"plain table": 0, "1 subscription": 1, "5 subscriptions": 5, PROBE: 0}
PHASES = ("client inserts", "client updates", "bulk insert (PSQL)", "bulk update (one statement)")
# The probe's copies, encoded into EVENT_LOG as a listener would.
INTAKE = "listener encodes the copies (one statement)"
# Rows a case writes before the next case takes its turn (client phases).
CHUNK = 500


def title(sizes: Sizes) -> str:
    return f"trigger cost on the writer, {sizes.w4_rows:,} rows per phase in one transaction; `subs add orders IU tagN`"


def _database(engine: Engine, case: str) -> ConnectionSettings:
    settings = engine.new_database("w4")
    execute(settings, "wide_table")
    if case == PROBE:
        execute(settings, "typed_copy_table", "typed_copy_ids")
        execute(settings, "typed_copy_trigger")  # after the commit that made its table
        subs(settings, "init")  # EVENT_LOG, for the copies' intake
    subscriptions = CASES[case]
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


def _interleaved(dbs: dict[str, Database], rows: int, write) -> dict[str, float]:
    """Seconds each case took to ``write(cursor, keys)`` all rows in one
    transaction, commit included. The cases take turns of CHUNK rows (in
    alternating order) instead of running one after the other: the machine's
    own slow spells, seconds long on a shared VM, then fall on every case
    alike rather than on whichever ran during them."""
    seconds = dict.fromkeys(dbs, 0.0)
    cursors = {}
    for case, db in dbs.items():
        db.connection.begin()
        cursors[case] = db.connection.cursor()
    order = list(dbs)
    for first in range(1, rows + 1, CHUNK):
        keys = range(first, min(first + CHUNK, rows + 1))
        for case in order:
            began = time.perf_counter()
            write(cursors[case], keys)
            seconds[case] += time.perf_counter() - began
        order.reverse()
    for case, db in dbs.items():
        began = time.perf_counter()
        cursors[case].close()
        db.connection.commit()
        seconds[case] += time.perf_counter() - began
    return seconds


def _phases(databases: dict[str, ConnectionSettings], rows: int) -> dict[str, dict[str, float]]:
    """Seconds per case and phase. Client phases interleave the cases; each
    bulk phase is one statement, run case after case."""
    placed = dt.datetime(2024, 5, 1, 12, 30)
    statements = sql()

    def insert(cursor, keys: range) -> None:
        for key in keys:
            cursor.execute(
                statements["wide_insert"],
                (key, f"customer {key % 997}", Decimal(key) / 4, placed, False, f"note for order {key}"),
            )

    def update(cursor, keys: range) -> None:
        for key in keys:
            cursor.execute(statements["wide_update"], (Decimal(key) / 2, key))

    with contextlib.ExitStack() as stack:
        dbs = {case: stack.enter_context(Database(settings)) for case, settings in databases.items()}
        seconds: dict[str, dict[str, float]] = {case: {} for case in dbs}
        for phase, write in ((PHASES[0], insert), (PHASES[1], update)):
            for case, elapsed in _interleaved(dbs, rows, write).items():
                seconds[case][phase] = elapsed
        for case, db in dbs.items():
            seconds[case][PHASES[2]] = _timed(
                db, lambda cursor: cursor.execute(statements["wide_bulk_insert"], (rows + 1, rows))
            )
            seconds[case][PHASES[3]] = _timed(
                db, lambda cursor: cursor.execute(statements["wide_bulk_update"], (rows + 1,))
            )

        def take_in(cursor) -> None:
            cursor.execute(statements["typed_copy_intake"])
            if cursor.affected_rows != rows * len(PHASES):
                raise RuntimeError(
                    f"the probe's intake logged {cursor.affected_rows} changes, not {rows * len(PHASES)}"
                )
            cursor.execute(statements["typed_copy_taken"])

        seconds[PROBE][INTAKE] = _timed(dbs[PROBE], take_in)
    return seconds


def run(ctx: Context, engine: Engine) -> None:
    rec, rows = ctx.recorder, ctx.sizes.w4_rows
    for repeat in range(1, ctx.repeat + 1):
        ctx.progress(f"{NAME} {engine.name} repeat {repeat}/{ctx.repeat}: {', '.join(CASES)}")
        databases = {case: _database(engine, case) for case in CASES}
        try:
            seconds = _phases(databases, rows)
        finally:
            for settings in databases.values():
                engine.drop(settings)
        for case in CASES:
            for phase, elapsed in seconds[case].items():
                # The intake takes every change of the four phases at once.
                changes = rows * len(PHASES) if phase == INTAKE else rows
                rec.add(NAME, engine.name, case, f"{phase}", "rows/s", changes / elapsed, repeat)
        plain = seconds["plain table"]
        for case in list(CASES)[1:]:
            for phase in PHASES:
                rec.add(NAME, engine.name, case, f"x plain, {phase}", "x", seconds[case][phase] / plain[phase], repeat)
    rec.note(
        NAME,
        engine.name,
        "client phases: one prepared statement executed per row from Python, as an "
        f"application writes, the {len(CASES)} tables taking turns of {CHUNK} rows (each table's rows in "
        "one transaction); bulk phases: the rows written inside the engine (EXECUTE BLOCK loop, one "
        "UPDATE), which shows the trigger's own cost without client round trips; ratios are time ratios; "
        f"'{PROBE}' is not subs's capture but the alternative in benchmarks/statements.sql; its "
        f"'{INTAKE}' times the work it leaves to the listener: each of the four phases' copies encoded "
        "and logged for one subscription, then deleted",
    )
