"""The trigger generator's text, without a database (the engine tests run it)."""

from __future__ import annotations

from subscriptions.capture.metadata import Column, Table
from subscriptions.capture.triggers import Subscription, event_name, generate, probe, trigger_name

TABLE = Table(
    "ORDERS",
    (Column("ID", 8), Column("NOTE", 37, char_length=40, byte_length=160, charset_id=4)),
    ("ID",),
)


def test_only_subscribed_actions_fire_the_trigger():
    text = generate(TABLE, [Subscription(1, "ORDERS", "I", "a"), Subscription(2, "ORDERS", "D", "b")], "SUBS$ORDERS")
    assert text.splitlines()[:2] == [
        'CREATE OR ALTER TRIGGER "SUBS$ORDERS" FOR "ORDERS"',
        "ACTIVE AFTER INSERT OR DELETE POSITION 32000",
    ]
    assert "IF (UPDATING)" not in text
    assert "POST_EVENT 'subs:a';" in text and "POST_EVENT 'subs:b';" in text


def test_inactive_subscriptions_are_left_out():
    subscriptions = [Subscription(1, "ORDERS", "I", "a"), Subscription(2, "ORDERS", "I", "b", active=False)]
    text = generate(TABLE, subscriptions, "T")
    assert "VALUES (1," in text and "VALUES (2," not in text


def test_conditions_are_evaluated_once_and_gate_the_capture():
    subscriptions = [
        Subscription(7, "ORDERS", "U", "a", columns=("NOTE",)),
        Subscription(8, "ORDERS", "U", "b", when="NEW.ID > 10"),
    ]
    text = generate(TABLE, subscriptions, "T")
    assert 'matched_7 = IIF((NEW."NOTE" IS DISTINCT FROM OLD."NOTE"), TRUE, FALSE);' in text
    assert "matched_8 = IIF((NEW.ID > 10), TRUE, FALSE);" in text
    assert "IF (matched_7 IS TRUE OR matched_8 IS TRUE) THEN" in text
    assert text.count("row_key = ") == 1


def test_columns_only_filter_updates():
    text = generate(TABLE, [Subscription(1, "ORDERS", "I", "a", columns=("NOTE",))], "T")
    assert "matched_" not in text and "IS DISTINCT FROM" not in text


def test_probe_compiles_one_condition_for_its_action_alone():
    text = probe(TABLE, Subscription(3, "ORDERS", "D", "a", when="OLD.ID > 1"), "P")
    assert text.splitlines()[:2] == ['CREATE TRIGGER "P" FOR "ORDERS"', "INACTIVE AFTER DELETE POSITION 32000"]
    assert "matched = IIF((OLD.ID > 1), TRUE, FALSE);" in text


def test_identifiers_are_quoted_and_literals_escaped():
    table = Table('we"ird', (Column('i"d', 8),), ('i"d',))
    text = generate(table, [Subscription(1, 'we"ird', "D", "t")], 'SUBS$we"ird')
    assert 'FOR "we""ird"' in text and 'OLD."i""d"' in text and "'3:i\"d'" in text


def test_trigger_names_fit_the_engine_limit():
    assert trigger_name("ORDERS", 31, 31) == "SUBS$ORDERS"
    long = trigger_name("A" * 40, 31, 31)
    assert len(long) == 31 and long.startswith("SUBS$AAAA")
    assert trigger_name("A" * 40, 31, 31) != trigger_name("A" * 39 + "B", 31, 31)
    assert len(trigger_name("é" * 40, 63, 63).encode()) <= 63
    assert event_name("send_email") == "subs:send_email"
