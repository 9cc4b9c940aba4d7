"""The capture's notifications: a tag's event is posted once per transaction
by the capture trigger, and again by the commit trigger, so that a bulk
write does not pay a POST_EVENT per row and no logged change goes without
its notification."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from firebird.driver import Cursor

from subscriptions.db.connection import Database
from subscriptions.db.settings import ConnectionSettings

from conftest import Subs, events, execute, query

BULK_INSERT = """
EXECUTE BLOCK (FIRST_ID INTEGER = ?, N INTEGER = ?) AS
DECLARE I INTEGER = 0;
BEGIN
    WHILE (I < N) DO
    BEGIN
        INSERT INTO ORDERS (ID, NOTE) VALUES (:FIRST_ID + :I, 'bulk');
        I = I + 1;
    END
END"""
# Seven 40-character tags overflow the 255 characters the transaction's
# context holds for the list of posted tags.
LONG_TAGS = [f"t{number}{'x' * 38}" for number in range(7)]


@pytest.fixture
def orders(settings: ConnectionSettings) -> ConnectionSettings:
    execute(settings, "CREATE TABLE ORDERS (ID INTEGER NOT NULL PRIMARY KEY, NOTE VARCHAR(20))")
    return settings


@contextmanager
def counting(settings: ConnectionSettings, tags: list[str]) -> Iterator[Callable[[], dict[str, int]]]:
    """Counts of the tags' events posted while the block runs; the returned
    function waits (up to 10 s) until every tag has been posted at least once."""
    names = [f"subs:{tag}" for tag in tags]
    with Database(settings) as listener, listener.connection.event_collector(names) as collector:
        collector.wait(1)  # the first notice may only report the counts the engine has
        collector.flush()
        totals = dict.fromkeys(names, 0)

        def counts() -> dict[str, int]:
            deadline = time.monotonic() + 10
            while min(totals.values()) == 0 and time.monotonic() < deadline:
                for name, count in collector.wait(0.5).items():
                    totals[name] += count
                collector.flush()
            for name, count in collector.wait(0.5).items():  # a late notice of the commit's posts
                totals[name] += count
            return {name.removeprefix("subs:"): count for name, count in totals.items()}

        yield counts


def transaction(settings: ConnectionSettings, work: Callable[[Database, Cursor], None]) -> None:
    with Database(settings) as writer:
        writer.connection.begin()
        work(writer, writer.connection.cursor())
        writer.connection.commit()


def test_a_bulk_write_posts_each_tag_twice_not_once_per_row(orders):
    """Once by the first row's trigger, once by the commit trigger."""
    Subs(orders).ok("add", "orders", "I", "mail")
    Subs(orders).ok("add", "orders", "IU", "hook")
    with counting(orders, ["mail", "hook"]) as counts:
        transaction(orders, lambda _, cursor: cursor.execute(BULK_INSERT, (1, 200)))
        assert counts() == {"mail": 2, "hook": 2}
    assert len(events(orders)) == 400


def test_a_post_taken_back_by_a_savepoint_is_made_again_at_commit(orders):
    Subs(orders).ok("add", "orders", "I", "mail")

    def work(_: Database, cursor: Cursor) -> None:
        cursor.execute("SAVEPOINT BEFORE_FIRST")
        cursor.execute("INSERT INTO ORDERS (ID) VALUES (1)")
        cursor.execute("ROLLBACK TO SAVEPOINT BEFORE_FIRST")
        cursor.execute("INSERT INTO ORDERS (ID) VALUES (2)")  # its trigger sees the tag marked as posted

    with counting(orders, ["mail"]) as counts:
        transaction(orders, work)
        assert counts() == {"mail": 1}
    assert [event["pk"] for event in events(orders)] == [{"ID": 2}]


def test_each_commit_retaining_posts_and_leaves_no_mark_behind(orders):
    Subs(orders).ok("add", "orders", "I", "mail")
    marks: list[tuple] = []

    def work(writer: Database, cursor: Cursor) -> None:
        for key in (1, 2):
            cursor.execute("INSERT INTO ORDERS (ID) VALUES (?)", (key,))
            writer.connection.commit(retaining=True)
            cursor.execute(
                "SELECT RDB$GET_CONTEXT('USER_TRANSACTION', 'EVENT_CAPTURE_POSTS'), "
                "RDB$GET_CONTEXT('USER_TRANSACTION', 'EVENT_CAPTURE_POSTED mail') FROM RDB$DATABASE"
            )
            marks.append(cursor.fetchone())

    with counting(orders, ["mail"]) as counts:
        transaction(orders, work)
        assert counts() == {"mail": 4}
    assert marks == [(None, None), (None, None)]


def test_tags_beyond_the_context_s_list_are_posted_on_every_row(orders):
    """The list of posted tags fits six 40-character tags; the seventh is
    posted by its trigger on every row, as before the list."""
    for tag in LONG_TAGS:
        Subs(orders).ok("add", "orders", "I", tag)
    with counting(orders, LONG_TAGS) as counts:
        transaction(orders, lambda _, cursor: cursor.execute(BULK_INSERT, (1, 3)))
        assert counts() == {**dict.fromkeys(LONG_TAGS[:6], 2), LONG_TAGS[6]: 3}
    assert len(events(orders)) == 21


def test_a_rolled_back_write_posts_nothing(orders):
    Subs(orders).ok("add", "orders", "I", "mail")
    with counting(orders, ["mail"]) as counts, Database(orders) as writer:
        writer.connection.begin()
        writer.connection.cursor().execute(BULK_INSERT, (1, 10))
        writer.connection.rollback()
        transaction(orders, lambda _, cursor: cursor.execute("INSERT INTO ORDERS (ID) VALUES (100)"))
        assert counts() == {"mail": 2}
    assert query(orders, "SELECT COUNT(*) FROM EVENT_LOG") == [(1,)]


def test_a_transaction_with_no_room_left_in_its_context_still_writes_and_posts(orders):
    """The engine holds 1,000 variables per context namespace; an
    application that used them all gets its write and its notification,
    without the marks (each row posts)."""
    Subs(orders).ok("add", "orders", "I", "mail")

    def work(_: Database, cursor: Cursor) -> None:
        cursor.execute(
            "EXECUTE BLOCK AS DECLARE I INTEGER = 0; BEGIN "
            "WHILE (I < 1000) DO BEGIN RDB$SET_CONTEXT('USER_TRANSACTION', 'app ' || I, I); I = I + 1; END END"
        )
        cursor.execute(BULK_INSERT, (1, 3))

    with counting(orders, ["mail"]) as counts:
        transaction(orders, work)
        assert counts() == {"mail": 3}
    assert len(events(orders)) == 3
