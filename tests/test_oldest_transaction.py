"""A transaction left open keeps what later ones delete from being
collected, EVENT_LOG's handled events included: the listener says which
one until it ends, its metrics show how long, and `subs status` and the
console name it."""

from __future__ import annotations

import json
import logging
import re
import time

from subscriptions.db.connection import Database
from subscriptions.db.settings import ConnectionSettings
from subscriptions.delivery import oldest_transaction, stats
from subscriptions.delivery.oldest_transaction import OldestTransactionWatch
from subscriptions.ops import status
from subscriptions.web.app import Console as WebConsole

from conftest import Subs
from listening import insert, supervise


class LeftOpen:
    """A transaction of another attachment that read ITEMS and stays open, as
    a report or an idle tool session does."""

    def __init__(self, settings: ConnectionSettings) -> None:
        self.db = Database(settings)
        self.db.connection.begin()
        self.db.connection.cursor().execute("SELECT COUNT(*) FROM ITEMS").fetchall()
        self.id = self.db.connection.main_transaction.info.id

    def end(self) -> None:
        self.db.connection.commit()
        self.db.close()


def observe(watch: OldestTransactionWatch, settings: ConnectionSettings) -> None:
    with Database(settings) as db:  # a fresh attachment each time, as the supervisor's
        watch.observe(db)


def test_a_transaction_left_open_is_reported_until_it_ends(items, monkeypatch, caplog):
    caplog.set_level(logging.INFO, "subs.listener")
    monkeypatch.setattr(oldest_transaction, "OLD_AFTER", 1.0)
    monkeypatch.setattr(oldest_transaction, "BEHIND", 1)
    watch = OldestTransactionWatch()
    left_open = LeftOpen(items)
    try:
        observe(watch, items)
        insert(items, 1, 3)  # later transactions come and go
        observe(watch, items)
        assert not caplog.records
        time.sleep(1.1)
        observe(watch, items)
        (warning,) = caplog.records
        assert warning.levelno == logging.WARNING
        assert re.match(
            rf"transaction {left_open.id} has been the oldest active one for \d+ s or more, \d+ transactions ago: "
            "while it stays open, the events handled since it started stay in EVENT_LOG as garbage",
            warning.getMessage(),
        ), warning.getMessage()
        assert warning.getMessage().endswith(
            f"(MON$TRANSACTIONS names its attachment: MON$TRANSACTION_ID = {left_open.id})"
        )
        caplog.clear()
        observe(watch, items)  # again only once the time doubled
        assert not caplog.records
        assert watch.held_for() >= 1.0
    finally:
        left_open.end()
    insert(items, 4, 1)
    observe(watch, items)
    (ended,) = caplog.records
    assert ended.levelno == logging.INFO
    assert re.match(rf"transaction {left_open.id}, the oldest active one for \d+ s, ended", ended.getMessage())
    assert watch.held_for() < 1.0


def test_a_transaction_that_ends_in_time_is_not_reported(items, monkeypatch, caplog):
    caplog.set_level(logging.INFO, "subs.listener")
    monkeypatch.setattr(oldest_transaction, "OLD_AFTER", 1.0)
    watch = OldestTransactionWatch()
    left_open = LeftOpen(items)
    observe(watch, items)
    left_open.end()
    time.sleep(1.1)
    observe(watch, items)
    assert not caplog.records


def test_a_transaction_with_few_started_after_it_is_not_reported(items, monkeypatch, caplog):
    """What it keeps grows with the transactions after it; and the embedded
    engine's header can show a long-gone one as the oldest while few
    transactions have started in a fresh database."""
    caplog.set_level(logging.INFO, "subs.listener")
    monkeypatch.setattr(oldest_transaction, "OLD_AFTER", 1.0)
    monkeypatch.setattr(oldest_transaction, "BEHIND", 1_000)
    watch = OldestTransactionWatch()
    left_open = LeftOpen(items)
    try:
        observe(watch, items)
        time.sleep(1.1)
        observe(watch, items)
        assert not caplog.records
        assert watch.held_for() == 0.0
    finally:
        left_open.end()


def test_the_listener_warns_and_its_metrics_show_how_long(items, tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(oldest_transaction, "OLD_AFTER", 1.0)
    monkeypatch.setattr(oldest_transaction, "BEHIND", 1)
    monkeypatch.setattr(stats, "BACKLOG_INTERVAL", 0.3)
    caplog.set_level(logging.WARNING, "subs.listener")
    left_open = LeftOpen(items)

    def drive(supervisor, record) -> None:
        insert(items, 1, 3)
        deadline = time.monotonic() + 30
        while "has been the oldest active one" not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.1)

    try:
        supervisor, _ = supervise(items, tmp_path, monkeypatch, drive, poll=0.3)
    finally:
        left_open.end()
    assert f"transaction {left_open.id} has been the oldest active one" in caplog.text
    (gauge,) = [
        line for line in supervisor.metrics.render().splitlines() if line.startswith("subs_oldest_transaction_seconds ")
    ]
    assert float(gauge.split()[1]) >= 1.0


def test_status_and_the_console_name_a_transaction_open_for_long(items, monkeypatch):
    monkeypatch.setattr(oldest_transaction, "OLD_AFTER", 3.0)
    attachments: list[Database] = []

    def attach(settings: ConnectionSettings) -> Database:
        attachments.append(Database(settings))
        return attachments[-1]

    monkeypatch.setattr(status, "Database", attach)
    left_open = LeftOpen(items)
    try:
        assert "note: transaction" not in Subs(items).ok("status")
        time.sleep(3.1)
        attachments.clear()
        note = Subs(items).ok("status").splitlines()[-1]
        assert len(attachments) == 1, "the note comes from the status's own attachment"
        expected = (
            rf"note: transaction {left_open.id} \(SYSDBA(, .+)?\) has been open for \d+\.\ds: the events handled "
            r"since it started stay in EVENT_LOG as garbage, and the log grows with them; commit or roll it back"
        )
        assert re.fullmatch(expected, note), note
        as_json = Subs(items)("status", "--json")
        assert as_json.exit_code == 0 and isinstance(json.loads(as_json.stdout), list), as_json.output
        assert re.fullmatch(expected + "\n", as_json.stderr), as_json.stderr
        page = console_figures(items)
        assert f"Note: transaction {left_open.id} (SYSDBA" in page and 'id="open-transaction"' in page
    finally:
        left_open.end()
    assert "note: transaction" not in Subs(items).ok("status")
    assert 'id="open-transaction"' not in console_figures(items)


def console_figures(settings: ConnectionSettings) -> str:
    """The overview's figures as the console renders them, in this process."""
    console = WebConsole(settings)
    try:
        return console.templates.get_template("figures.html").render(console._figures(), csrf="", read_only=True)
    finally:
        console.attachments.close()
