"""W13: what the capture costs on rows that carry BLOBs. A table of documents
(a title, a text BLOB and a binary BLOB of the same size), plain and
subscribed for I, U and D: rows inserted from a client, then one statement
updating every row's title, which copies no BLOB in the table itself but puts
both BLOBs in each event twice (old and new). Besides the times, how much the
database grew for the bytes the events carry: every concatenation of a BLOB
in the trigger leaves a temporary BLOB behind until the commit. A third
table has one binary BLOB between other columns and a BLOB column left
NULL after it, the shape where that mattered most (Firebird 3 before schema
version 26)."""

from __future__ import annotations

import os
import time

from subscriptions.db.connection import Database
from subscriptions.db.settings import ConnectionSettings

from .app import subs
from .config import Context, Sizes
from .engines import Engine

NAME = "W13"
ENGINES = ("fb5", "fb3")
# Bytes of each of a row's two BLOBs -> the share of the workload's rows.
SIZES = {10_000: 1.0, 200_000: 0.2}
LARGE = 200_000
# The table with one BLOB: its rows' share, the BLOB's bytes.
ONE_BLOB_SHARE, ONE_BLOB_SIZE = 0.2, 200_000
ONE_BLOB = "one BLOB of 200 KB between other columns, one NULL"
INSERTS, UPDATE = "client inserts", "update of every row (one statement)"
GROWTH = "database growth / bytes the events carry"


def title(sizes: Sizes) -> str:
    return f"capture cost on rows with BLOBs; `subs add docs_N IUD tag`, {sizes.w13_rows:,} rows of two 10 KB BLOBs"


def case(size: int) -> str:
    return f"two BLOBs of {size // 1000} KB"


def _tables(settings: ConnectionSettings) -> None:
    with Database(settings) as db, db.transaction() as cursor:
        for prefix in ("PLAIN", "DOCS"):
            for size in SIZES:
                cursor.execute(
                    f"CREATE TABLE {prefix}_{size} (ID INTEGER NOT NULL PRIMARY KEY, TITLE VARCHAR(100), "
                    "BODY BLOB SUB_TYPE TEXT, DATA BLOB SUB_TYPE BINARY)"
                )
            cursor.execute(
                f"CREATE TABLE {prefix}_ONE (ID INTEGER NOT NULL PRIMARY KEY, TITLE VARCHAR(100), "
                "DATA BLOB SUB_TYPE BINARY, EXTRA BLOB SUB_TYPE BINARY, NOTE VARCHAR(100), "
                "CHANGED_AT TIMESTAMP DEFAULT LOCALTIMESTAMP)"
            )
    subs(settings, "init")
    for size in SIZES:
        subs(settings, "add", f"docs_{size}", "IUD", "tag")
    subs(settings, "add", "docs_one", "IUD", "tag")


def _allocated(db: Database) -> int:
    """Bytes of the database file's allocated pages, as the engine counts them."""
    with db.transaction() as cursor:
        cursor.execute("SELECT MON$PAGES * MON$PAGE_SIZE FROM MON$DATABASE")
        return int(cursor.fetchone()[0])


def _write(db: Database, table: str, rows: int, size: int, blobs: int = 2) -> tuple[float, float, int]:
    """Insert ``rows`` rows, then update them all: the two times and the
    database's growth over both."""
    text, data = "x" * size, os.urandom(size)
    before = _allocated(db)
    began = time.perf_counter()
    with db.transaction() as cursor:
        for key in range(rows):
            if blobs == 2:
                cursor.execute(
                    f"INSERT INTO {table} (ID, TITLE, BODY, DATA) VALUES (?, 'draft', ?, ?)", (key, text, data)
                )
            else:
                cursor.execute(f"INSERT INTO {table} (ID, TITLE, DATA, NOTE) VALUES (?, 'draft', ?, 'n')", (key, data))
    inserted = time.perf_counter()
    with db.transaction() as cursor:
        cursor.execute(f"UPDATE {table} SET TITLE = 'final'")
    updated = time.perf_counter()
    return inserted - began, updated - inserted, _allocated(db) - before


def run(ctx: Context, engine: Engine) -> None:
    rec = ctx.recorder
    for repeat in range(1, ctx.repeat + 1):
        ctx.progress(f"{NAME} {engine.name} repeat {repeat}/{ctx.repeat}")
        settings = engine.new_database("w13")
        try:
            _tables(settings)
            with Database(settings) as db:
                shapes = [(case(size), str(size), size, 2, share) for size, share in SIZES.items()]
                shapes.append((ONE_BLOB, "ONE", ONE_BLOB_SIZE, 1, ONE_BLOB_SHARE))
                for name, table, size, blobs, share in shapes:
                    rows = max(1, int(ctx.sizes.w13_rows * share))
                    plain = _write(db, f"PLAIN_{table}", rows, size, blobs)
                    captured = _write(db, f"DOCS_{table}", rows, size, blobs)
                    rec.add(NAME, engine.name, name, f"x plain, {INSERTS}", "x", captured[0] / plain[0], repeat)
                    rec.add(NAME, engine.name, name, f"x plain, {UPDATE}", "x", captured[1] / plain[1], repeat)
                    rec.add(NAME, engine.name, name, f"{UPDATE}, per row", "ms", captured[1] / rows * 1e3, repeat)
                    # An insert's event carries its BLOBs once, an update's twice.
                    carried = rows * blobs * size * 3
                    rec.add(NAME, engine.name, name, GROWTH, "x", (captured[2] - plain[2]) / carried, repeat)
        finally:
            engine.drop(settings)
    rec.note(
        NAME,
        engine.name,
        "each table: its rows inserted in one transaction, then one UPDATE of every row's title; growth: "
        "allocated pages (MON$DATABASE) after both, less the plain table's growth",
    )
