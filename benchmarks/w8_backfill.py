"""W8: `subs backfill` of a large table, against the same capture done by
one statement over every row in one transaction (the generated chunk
statement with CHUNK = all rows): the upper bound, which a real backfill
must not do (one long transaction holding every row's lock). The backfill
runs as a `subs` process; its peak memory is compared with a run over a
tenth of the rows."""

from __future__ import annotations

import subprocess
import time

from subscriptions.db.connection import Database, read_text

from . import PYTHON
from .app import TAG, execute, subs
from .config import Context, Sizes
from .engines import Engine

NAME = "W8"
ENGINES = ("fb5", "fb3")
BACKFILL = "subs backfill --batch 1000"
UPPER_BOUND = "one statement, one transaction"


def title(sizes: Sizes) -> str:
    return f"backfill of {sizes.w8_rows:,} rows (memory against {sizes.w8_rows // 10:,} rows)"


def _table(engine: Engine, rows: int):
    settings = engine.new_database("w8")
    execute(settings, "items_table")
    execute(settings, "items_bulk_insert", params=(1, rows))
    subs(settings, "init")
    subs(settings, "add", "items", "I", TAG)
    return settings


# `subs backfill`, reporting its own peak RSS (KiB) on stderr as it exits.
_MEASURED_SUBS = (
    "import resource, sys\n"
    "from subscriptions.cli import cli\n"
    "try:\n"
    "    cli(prog_name='subs')\n"
    "finally:\n"
    "    print('maxrss', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\n"
)


def _backfill(engine: Engine, settings) -> tuple[float, float]:
    """Seconds and peak RSS (MiB) of a `subs backfill` process."""
    started = time.monotonic()
    done = subprocess.run(
        [PYTHON, "-c", _MEASURED_SUBS, "-d", settings.dsn, "backfill", "items", TAG, "--batch", "1000"],
        env=engine.env(settings),
        check=True,
        capture_output=True,
        text=True,
    )
    seconds = time.monotonic() - started
    peak = next(line.split()[1] for line in done.stderr.splitlines() if line.startswith("maxrss "))
    return seconds, int(peak) / 1024


def _upper_bound(settings, rows: int) -> float:
    with Database(settings) as db:
        with db.transaction() as cursor:
            cursor.execute("SELECT SUB_ID FROM EVENT_SUBSCRIBER")
            (sub_id,) = cursor.fetchone()
            cursor.execute("SELECT FIRST_CHUNK FROM EVENT_BACKFILL_SOURCE(?, NULL)", (sub_id,))
            statement = read_text(cursor.fetchone()[0])
        started = time.monotonic()
        with db.transaction() as cursor:
            cursor.execute(statement, (rows + 1,))
            cursor.fetchall()
        return time.monotonic() - started


def run(ctx: Context, engine: Engine) -> None:
    rec, rows = ctx.recorder, ctx.sizes.w8_rows
    for repeat in range(1, ctx.repeat + 1):
        ctx.progress(f"{NAME} {engine.name} repeat {repeat}/{ctx.repeat}")
        small = _table(engine, rows // 10)
        try:
            _, small_rss = _backfill(engine, small)
        finally:
            engine.drop(small)
        large = _table(engine, rows)
        try:
            seconds, large_rss = _backfill(engine, large)
            execute(large, "w8_clear_log")
            bound = _upper_bound(large, rows)
        finally:
            engine.drop(large)
        rec.add(NAME, engine.name, BACKFILL, "rows/s", "rows/s", rows / seconds, repeat)
        rec.add(NAME, engine.name, BACKFILL, "x upper bound", "x", bound / seconds, repeat)
        rec.add(NAME, engine.name, BACKFILL, "peak RSS", "MiB", large_rss, repeat)
        rec.add(NAME, engine.name, BACKFILL, "RSS x tenth of the rows", "x", large_rss / small_rss, repeat)
        rec.add(NAME, engine.name, UPPER_BOUND, "rows/s", "rows/s", rows / bound, repeat)
    rec.note(
        NAME,
        engine.name,
        "x upper bound: the backfill's rate / the one-statement rate; peak RSS: the `subs backfill` "
        "process's own ru_maxrss (it includes the embedded engine's cache on fb5)",
    )
