"""``subs demo``: the whole path from a row change through the event log to
the handlers, on a fresh embedded database. This module is also the demo's
handler plugin (``--plugin subscriptions.demo``)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from . import hookimpl, queries, schema, subscribers
from .capture import decode
from .config import ConnectionSettings
from .db import Database, read_text
from .events import Event
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
    echo(f"$ subs -d {path} listen --drain --plugin subscriptions.demo")
    subprocess.run(
        [sys.executable, "-m", "subscriptions", "-d", settings.target, "listen", "--drain",
         "--plugin", "subscriptions.demo", "--log-level", "WARNING"],
        check=True,
    )
    with Database(settings) as db:
        left = db.fetch_value(sql["count_events"])
    echo(f"EVENT_LOG now holds {left} event(s)")


@hookimpl
def register_handlers(register) -> None:
    register("send_email", send_email)
    register("ring_bell", ring_bell)


def send_email(event: Event) -> None:
    print(f"send_email: would email about new language {event.new['NAME']} (event {event.id})", flush=True)


def ring_bell(event: Event) -> None:
    print(f"ring_bell: ding for {event.table} {event.pk} (event {event.id})", flush=True)
