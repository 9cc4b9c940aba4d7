"""The application side of the benchmarks: its tables, how it writes rows, and
how it sets subs up (through the subs command line, as a user would)."""

from __future__ import annotations

import functools
import random
from collections.abc import Sequence

from click.testing import CliRunner

from subscriptions.cli import cli
from subscriptions.db.connection import Database
from subscriptions.db.settings import ConnectionSettings
from subscriptions.db.sql import parse

from . import PACKAGE_DIR
from .engines import Engine

TAG = "bench"  # the tag the benchmark handler plugin (recorder.py) handles


@functools.cache
def sql() -> dict[str, str]:
    """The named statements of statements.sql."""
    return parse((PACKAGE_DIR / "statements.sql").read_text("utf-8"))


def execute(settings: ConnectionSettings, *names: str, params: tuple = ()) -> None:
    """Run named statements in one transaction."""
    with Database(settings) as db, db.transaction() as cursor:
        for name in names:
            cursor.execute(sql()[name], params or None)


def subs(settings: ConnectionSettings, *args: str) -> str:
    """One ``subs`` command on this database through its click CLI, the
    password passed in ISC_PASSWORD as the README recommends."""
    env = {
        "ISC_USER": settings.effective_user,
        "ISC_PASSWORD": settings.password or "",
        "SUBS_CONFIG": None,
        "SUBS_PLUGINS": None,
    }
    result = CliRunner().invoke(cli, ["-d", settings.dsn, *args], env=env)
    if result.exit_code != 0:
        raise RuntimeError(f"subs {' '.join(args)} failed: {result.output}{result.stderr}")
    return result.stdout


def subscribed_items(engine: Engine, label: str, tags: Sequence[str] = (TAG,)) -> ConnectionSettings:
    """A fresh database with ITEMS and, for each tag, ``subs add items I TAG``."""
    settings = engine.new_database(label)
    execute(settings, "items_table")
    subs(settings, "init")
    for tag in tags:
        subs(settings, "add", "items", "I", tag)
    return settings


def insert_items(settings: ConnectionSettings, count: int, first_id: int = 1) -> None:
    """``count`` rows (no handler work) in one transaction."""
    with Database(settings) as db, db.transaction() as cursor:
        cursor.execute(sql()["items_bulk_insert"], (first_id, count))


def insert_sleepy_items(settings: ConnectionSettings, sleeps_ms: Sequence[int]) -> None:
    """One row per sleep, in one transaction; the handler sleeps that long."""
    with Database(settings) as db, db.transaction() as cursor:
        cursor.executemany(sql()["items_insert"], [(key, f"item {key}", ms) for key, ms in enumerate(sleeps_ms, 1)])


def pending(settings: ConnectionSettings) -> int:
    """Events still in the log (after a --drain listener exited there should be none)."""
    with Database(settings) as db, db.transaction() as cursor:
        cursor.execute("SELECT COUNT(*) FROM EVENT_LOG")
        return cursor.fetchone()[0]


def random_sleeps(count: int, bounds: tuple[int, int], seed: int) -> list[int]:
    """The same sleeps for subs and the baseline in one repeat."""
    generator = random.Random(seed)
    return [generator.randint(*bounds) for _ in range(count)]
