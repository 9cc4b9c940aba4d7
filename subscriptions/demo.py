"""``subs demo``: the whole path from a row change to the event log, on a
fresh embedded database."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from . import queries, schema, subscribers
from .capture import decode
from .config import ConnectionSettings
from .db import Database, read_text
from .tables import render

LANGUAGES = [
    ("Lisp", 1958), ("Smalltalk", 1972), ("Python", 1991), ("Dylan", 1992), ("Rust", 2015),
]


def run(path: str, rows: int, echo: Callable[[str], None]) -> None:
    """(Re)create ``path``, subscribe two tags to inserts and insert ``rows`` rows."""
    sql = queries.load("demo")
    Path(path).unlink(missing_ok=True)
    settings = ConnectionSettings(path)
    with Database(settings, create=True) as db:
        echo(f"created embedded database {settings.target}")
        schema.upgrade(db)
        with db.transaction() as cursor:
            cursor.execute(sql["create_languages"])
        for tag in ("send_email", "ring_bell"):
            for change in subscribers.add(db, "languages", "I", tag):
                echo(f"$ subs add languages I {tag}  ->  {change.outcome}")
        with db.transaction() as cursor:
            for index in range(rows):
                name, year = LANGUAGES[index % len(LANGUAGES)]
                cursor.execute(sql["insert_language"], (name, year))
        echo(f"inserted {rows} row(s) into LANGUAGES in one transaction; EVENT_LOG now holds:")
        with db.transaction() as cursor:
            cursor.execute(sql["event_log"])
            log = [
                (event_id, tag, f"{table} {action}", decode(key), decode(read_text(new)))
                for event_id, tag, table, action, key, new in cursor.fetchall()
            ]
        echo(render(("EVENT_ID", "TAG", "CHANGE", "KEY", "NEW VALUES"), log))
