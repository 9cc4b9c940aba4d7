"""``subs demo``: the whole path from a row change through the event log to
the handlers, on a fresh embedded database. This module is also the demo's
handler plugin (``--plugin subscriptions.ops.demo``)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from firebird.driver import DatabaseError

from subscriptions import hookimpl
from subscriptions.capture import subscribers
from subscriptions.capture.values import decode
from subscriptions.db import sql
from subscriptions.db.connection import Database, read_blob, read_text
from subscriptions.db.errors import first_line
from subscriptions.db.settings import ConnectionSettings
from subscriptions.errors import SubsError
from subscriptions.events import Event
from subscriptions.plugins import Register

from .setup import init_database
from .text_table import render

DEMO_MARK = "made by subs demo"  # sql/demo.sql, "mark"
LANGUAGES = [
    ("Lisp", 1958),
    ("Smalltalk", 1972),
    ("Python", 1991),
    ("Dylan", 1992),
    ("Rust", 2015),
]


def _drop_earlier_demo(settings: ConnectionSettings) -> None:
    """Drop the database an earlier demo made at this path, and refuse any
    other file: ``--path app.fdb`` deleted the application's database."""
    if not Path(settings.target).exists():
        return
    not_ours = SubsError(
        f"{settings.dsn} exists and is not a database the demo made, which it would delete: "
        "choose another --path (or delete the file yourself)"
    )
    try:
        db = Database(settings)
    except (DatabaseError, SubsError):
        raise not_ours from None
    try:
        if read_text(db.fetch_value(sql.load("demo")["marked"])) != DEMO_MARK:
            raise not_ours
        db.connection.drop_database()
    except DatabaseError as exc:
        raise SubsError(
            f"cannot make the demo database {settings.dsn} again: {first_line(exc)}; "
            "stop what uses it (a listener?) and run the demo again"
        ) from None
    finally:
        db.close()


def run(path: str, rows: int, echo: Callable[[str], None]) -> None:
    """(Re)create ``path``, subscribe two tags to inserts and insert ``rows`` rows."""
    statements = sql.load("demo")
    settings = ConnectionSettings(path)
    _drop_earlier_demo(settings)
    with Database(settings, create=True) as db:
        echo(f"created embedded database {settings.target}")
        with db.transaction() as cursor:
            cursor.execute(statements["mark"])
        init_database(db)
        with db.transaction() as cursor:
            cursor.execute(statements["create_languages"])
        for tag in ("send_email", "ring_bell"):
            for change in subscribers.add(db, "languages", "I", tag):
                echo(f"$ subs add languages I {tag}  ->  {change.outcome}")
        with db.transaction() as cursor:
            for index in range(rows):
                name, year = LANGUAGES[index % len(LANGUAGES)]
                cursor.execute(statements["insert_language"], (name, year))
        echo(f"inserted {rows} row(s) into LANGUAGES in one transaction; EVENT_LOG now holds:")
        with db.transaction() as cursor:
            cursor.execute(statements["event_log"])
            log = [
                (event_id, tag, f"{table} {action}", decode(key), decode(read_blob(new)))
                for event_id, tag, table, action, key, new in cursor.fetchall()
            ]
        echo(render(("EVENT_ID", "TAG", "CHANGE", "KEY", "NEW VALUES"), log))
    echo(f"$ subs -d {path} listen --drain --plugin subscriptions.ops.demo")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "subscriptions",
            "-d",
            settings.target,
            "listen",
            "--drain",
            "--plugin",
            "subscriptions.ops.demo",
            "--log-level",
            "WARNING",
        ],
        check=True,
    )
    with Database(settings) as db:
        left = db.fetch_value(statements["count_events"])
    echo(f"EVENT_LOG now holds {left} event(s)")


@hookimpl
def register_handlers(register: Register) -> None:
    register("send_email", send_email)
    register("ring_bell", ring_bell)


def send_email(event: Event) -> None:
    print(f"send_email: would email about new language {(event.new or {}).get('NAME')} (event {event.id})", flush=True)


def ring_bell(event: Event) -> None:
    print(f"ring_bell: ding for {event.table} {event.pk} (event {event.id})", flush=True)
