"""W11: what the capture costs on wide tables, by column type. For each type
a table of 100 columns of it, plain and subscribed for I, U and D: a bulk
insert in PSQL (the trigger's per-column cost, which W4's six-column table
hides), and the first insert of a fresh attachment (which compiles the
trigger: its text grows with the table's width)."""

from __future__ import annotations

import time

from subscriptions.db.connection import Database
from subscriptions.db.settings import ConnectionSettings

from .app import subs
from .config import Context, Sizes
from .engines import Engine

NAME = "W11"
ENGINES = ("fb5", "fb3")
COLUMNS = 100
# Column type -> the literal every column of a row gets.
TYPES = {
    "INTEGER": "1234",
    "NUMERIC(12,2)": "1.25",
    "DOUBLE PRECISION": "0.30000000000000004",
    "TIMESTAMP": "TIMESTAMP '2024-01-02 03:04:05'",
    "VARCHAR(40)": "'abcdef'",
}
BULK = "bulk insert (PSQL) x plain"
# Fresh attachments per case and repeat for the first-insert figure.
ATTACHMENTS = 5


def title(sizes: Sizes) -> str:
    return (
        f"capture cost on {COLUMNS}-column tables, {sizes.w11_rows:,} rows per bulk insert; `subs add wide_N IUD tag`"
    )


def _tables(settings: ConnectionSettings) -> None:
    with Database(settings) as db, db.transaction() as cursor:
        for number, kind in enumerate(TYPES):
            columns = ", ".join(f"C{i} {kind}" for i in range(COLUMNS))
            for prefix in ("PLAIN", "WIDE"):
                cursor.execute(f"CREATE TABLE {prefix}_{number} (ID INTEGER NOT NULL PRIMARY KEY, {columns})")
    subs(settings, "init")
    for number in range(len(TYPES)):
        subs(settings, "add", f"wide_{number}", "IUD", "tag")


def _bulk(db: Database, table: str, literal: str, first: int, rows: int) -> float:
    values = ", ".join([literal] * COLUMNS)
    began = time.perf_counter()
    with db.transaction() as cursor:
        cursor.execute(
            "EXECUTE BLOCK AS DECLARE i INTEGER = 0; BEGIN "
            f"WHILE (i < {rows}) DO BEGIN INSERT INTO {table} VALUES ({first} + :i, {values}); i = i + 1; END END"
        )
    return time.perf_counter() - began


def _first_insert(settings: ConnectionSettings, table: str, literal: str, key: int) -> float:
    """Attach, insert one row and commit: the first write of an attachment."""
    values = ", ".join([literal] * COLUMNS)
    with Database(settings) as db:
        began = time.perf_counter()
        with db.transaction() as cursor:
            cursor.execute(f"INSERT INTO {table} VALUES (?, {values})", (key,))
        return time.perf_counter() - began


def run(ctx: Context, engine: Engine) -> None:
    rec, rows = ctx.recorder, ctx.sizes.w11_rows
    for repeat in range(1, ctx.repeat + 1):
        ctx.progress(f"{NAME} {engine.name} repeat {repeat}/{ctx.repeat}: {', '.join(TYPES)}")
        settings = engine.new_database("w11")
        try:
            _tables(settings)
            first = 1
            with Database(settings) as db:
                for number, (kind, literal) in enumerate(TYPES.items()):
                    # Plain and subscribed take turns, in alternating order.
                    seconds = {"PLAIN": 0.0, "WIDE": 0.0}
                    for turn in range(2):
                        for prefix in ("PLAIN", "WIDE") if turn == 0 else ("WIDE", "PLAIN"):
                            seconds[prefix] += _bulk(db, f"{prefix}_{number}", literal, first, rows // 2)
                        first += rows // 2
                    plain, wide = seconds["PLAIN"], seconds["WIDE"]
                    rec.add(NAME, engine.name, kind, BULK, "x", wide / plain, repeat)
                    per_column = (wide - plain) / (2 * (rows // 2)) / COLUMNS * 1e6
                    rec.add(NAME, engine.name, kind, "capture per column", "µs", per_column, repeat)
            for number, (kind, literal) in enumerate(TYPES.items()):
                for prefix in ("PLAIN", "WIDE"):
                    times = sorted(
                        _first_insert(settings, f"{prefix}_{number}", literal, first + attachment)
                        for attachment in range(ATTACHMENTS)
                    )
                    first += ATTACHMENTS
                    case = kind if prefix == "WIDE" else f"{kind}, plain table"
                    rec.add(
                        NAME,
                        engine.name,
                        case,
                        "first insert of an attachment",
                        "ms",
                        times[len(times) // 2] * 1e3,
                        repeat,
                    )
        finally:
            engine.drop(settings)
    rec.note(
        NAME,
        engine.name,
        f"bulk: an EXECUTE BLOCK loop inserting the rows, plain and subscribed tables taking turns of "
        f"{rows // 2:,}; per column: the subscribed table's extra time per row over {COLUMNS} columns; "
        f"first insert: median of {ATTACHMENTS} fresh attachments, insert and commit",
    )
