"""Captured keys and values: key shapes, identifiers, wide rows and the
captured-row format (every type: test_capture_types.py)."""

from __future__ import annotations

import datetime as dt
import json
import math
from collections import Counter
from decimal import Decimal

import pytest
from firebird.driver import connect

from subscriptions.capture.values import UndecodableEvent, decode
from subscriptions.db import runtime
from subscriptions.db.connection import Database, read_text
from subscriptions.db.events import EventWatch
from subscriptions.delivery.claimed import Claimed
from subscriptions.delivery.claims import Claimer, load_targets, streams
from subscriptions.events import Event

from conftest import Subs, events, execute, query


def test_booleans_round_trip(settings):
    execute(settings, "CREATE TABLE FLAGS (ID INTEGER NOT NULL PRIMARY KEY, FLAG BOOLEAN)")
    Subs(settings).ok("add", "flags", "I", "audit")
    execute(
        settings,
        "INSERT INTO FLAGS VALUES (1, TRUE)",
        "INSERT INTO FLAGS VALUES (2, FALSE)",
        "INSERT INTO FLAGS VALUES (3, NULL)",
    )
    flags = [e["new"]["FLAG"] for e in events(settings)]
    assert flags == [True, False, None] and [type(f) for f in flags] == [bool, bool, type(None)]


def test_composite_varchar_and_bigint_keys(settings):
    execute(
        settings,
        "CREATE TABLE ORDER_LINES (REGION VARCHAR(10) NOT NULL, ORDER_NO BIGINT NOT NULL, "
        "LINE SMALLINT NOT NULL, QTY INTEGER, PRIMARY KEY (REGION, ORDER_NO, LINE))",
    )
    Subs(settings).ok("add", "order_lines", "IUD", "sync")
    execute(settings, "INSERT INTO ORDER_LINES VALUES ('eu:1', 9000000000000, 3, 7)")
    execute(settings, "UPDATE ORDER_LINES SET REGION = 'eu''2'")
    execute(settings, "DELETE FROM ORDER_LINES")
    keys = [e["pk"] for e in events(settings)]
    assert keys == [
        {"REGION": "eu:1", "ORDER_NO": 9000000000000, "LINE": 3},
        {"REGION": "eu'2", "ORDER_NO": 9000000000000, "LINE": 3},
        {"REGION": "eu'2", "ORDER_NO": 9000000000000, "LINE": 3},
    ]
    assert list(keys[0]) == ["REGION", "ORDER_NO", "LINE"]


def test_quoted_mixed_case_and_non_ascii_identifiers(settings, engine):
    execute(
        settings,
        'CREATE TABLE "Ünïcode Tåble" ("Kéy" VARCHAR(10) NOT NULL, "order" INTEGER NOT NULL, '
        '"Value ""x""" VARCHAR(20), PRIMARY KEY ("Kéy", "order"))',
    )
    execute(settings, 'CREATE TABLE "mixedCase" ("id" INTEGER NOT NULL PRIMARY KEY, "Name" VARCHAR(10))')
    subs = Subs(settings)
    assert "added: Ünïcode Tåble U t" in subs.ok("add", "Ünïcode Tåble", "IU", "t", "--columns", '"Value ""x"""')
    subs.ok("add", '"mixedCase"', "I", "t")
    subs.ok("add", "mixedCase", "U", "t")  # the exact name, since MIXEDCASE does not exist
    execute(settings, "INSERT INTO \"Ünïcode Tåble\" VALUES ('ä', 1, 'a \"b\"')")
    execute(settings, 'UPDATE "Ünïcode Tåble" SET "order" = 2')  # watched column unchanged
    execute(settings, 'UPDATE "Ünïcode Tåble" SET "Value ""x""" = NULL')
    execute(settings, "INSERT INTO \"mixedCase\" VALUES (1, 'x')")
    logged = events(settings)
    assert [(e["table"], e["action"]) for e in logged] == [
        ("Ünïcode Tåble", "I"),
        ("Ünïcode Tåble", "U"),
        ("mixedCase", "I"),
    ]
    assert logged[0]["pk"] == {"Kéy": "ä", "order": 1}
    assert logged[0]["new"]['Value "x"'] == 'a "b"'
    assert logged[1]["old"]['Value "x"'] == 'a "b"' and logged[1]["new"]['Value "x"'] is None


def test_names_keep_their_leading_spaces(settings):
    execute(settings, 'CREATE TABLE "  SPACED" (" ID" INTEGER NOT NULL PRIMARY KEY, " V" INTEGER)')
    subs = Subs(settings)
    subs.ok("add", '"  SPACED"', "IU", "t", "--columns", '" V"')
    execute(settings, 'INSERT INTO "  SPACED" VALUES (1, 2)', 'UPDATE "  SPACED" SET " V" = 3')
    logged = events(settings)
    assert [(e["table"], e["action"], e["pk"]) for e in logged] == [
        ("  SPACED", "I", {" ID": 1}),
        ("  SPACED", "U", {" ID": 1}),
    ]
    assert logged[1]["old"] == {" ID": 1, " V": 2} and logged[1]["new"] == {" ID": 1, " V": 3}
    assert subs("status", "--check").exit_code == 0
    assert "backfilled   SPACED for t: 1 event(s)" in subs.ok("backfill", '"  SPACED"', "t")


def test_long_table_names_get_a_shortened_trigger_name(settings, engine):
    name = "T" * (31 if engine == "fb3" else 63)
    execute(settings, f"CREATE TABLE {name} (ID INTEGER NOT NULL PRIMARY KEY)")
    Subs(settings).ok("add", name, "I", "t")
    (trigger,) = query(settings, f"SELECT TRIM(RDB$TRIGGER_NAME) FROM RDB$TRIGGERS WHERE RDB$RELATION_NAME = '{name}'")
    assert trigger[0].startswith("SUBS$T") and len(trigger[0]) == (31 if engine == "fb3" else 63)
    execute(settings, f"INSERT INTO {name} VALUES (5)")
    assert events(settings)[0]["pk"] == {"ID": 5}


@pytest.mark.parametrize("zone", ["Asia/Tokyo", "America/New_York", "+05:45"])
def test_a_writer_in_another_session_time_zone_stamps_events_in_subs_time(settings, engine, zone):
    """The trigger runs in the writer's attachment, whose session time zone
    may be another than subs's (Jaybird sets the JVM's): with LOCALTIMESTAMP
    a writer in Asia/Tokyo stamped its events 9 hours ahead of the
    listener's clock, and `subs status` gave them an age of -9 hours. The
    stamps of a change logged dead by its --when condition too."""
    if engine == "fb3":
        pytest.skip("Firebird 3 has no session time zones")
    execute(settings, "CREATE TABLE PLACES (ID INTEGER NOT NULL PRIMARY KEY, N INTEGER)")
    Subs(settings).ok("add", "places", "I", "audit")
    Subs(settings).ok("add", "places", "I", "strict", "--when", "1 / NEW.n > 0")
    runtime.load()
    writer = connect(settings.target, user=settings.effective_user, password=settings.password, session_time_zone=zone)
    try:
        writer.cursor().execute("INSERT INTO PLACES VALUES (1, 0)")
        writer.commit()
    finally:
        writer.close()
    ages = query(
        settings,
        "SELECT DEAD, DATEDIFF(SECOND FROM CREATED_AT TO LOCALTIMESTAMP), "
        "DATEDIFF(SECOND FROM COALESCE(DEAD_AT, CREATED_AT) TO LOCALTIMESTAMP) FROM EVENT_LOG ORDER BY EVENT_ID",
    )
    assert [dead for dead, _, _ in ages] == [False, True]
    assert all(0 <= created < 60 and 0 <= died < 60 for _, created, died in ages), ages
    audit, _strict = json.loads(Subs(settings).ok("status", "--json"))
    assert 0 <= audit["oldest_pending_age"] < 60


def test_wide_rows_are_captured_as_blobs(settings):
    names = [f"C{i}" for i in range(12)]
    columns = ", ".join(f"{name} VARCHAR(1000)" for name in names)
    execute(settings, f"CREATE TABLE WIDE (ID INTEGER NOT NULL PRIMARY KEY, {columns})")
    Subs(settings).ok("add", "wide", "I", "t")
    marks = ", ".join("?" * len(names))
    values = ("é" * 1000,) * len(names)
    execute(settings, f"INSERT INTO WIDE (ID, {', '.join(names)}) VALUES (1, {marks})", params=values)
    (event,) = events(settings)
    assert event["new"]["C11"] == "é" * 1000 and len(event["new"]) == 13


def test_rows_with_many_blobs_are_captured_whole(settings):
    """130 BLOBs and a run of VARCHARs longer than one VARCHAR holds: the
    image's parts pass BLOB_APPEND's 255 arguments (fb4, fb5) and make one
    long chain of BLOB concatenations (fb3), its BLOB values after the other
    columns' parts; the columns keep the table's order."""
    blobs = [f"T{i} BLOB SUB_TYPE TEXT, B{i} BLOB SUB_TYPE BINARY" for i in range(65)]
    texts = [f"V{i} VARCHAR(1000)" for i in range(12)]
    columns = ", ".join(blobs[:30] + texts + blobs[30:])
    execute(settings, f"CREATE TABLE MANY_BLOBS (ID INTEGER NOT NULL PRIMARY KEY, {columns})")
    Subs(settings).ok("add", "many_blobs", "IUD", "t")
    values = {f"T{i}": "é" * (i * 300) for i in range(65)} | {f"B{i}": bytes([i]) * (i * 500) for i in range(65)}
    values |= {f"V{i}": "ü" * 1000 for i in range(12)}
    values |= {"T3": None, "B64": None, "V5": None}
    given = {name: value for name, value in values.items() if value is not None}
    marks = ", ".join("?" * len(given))
    execute(
        settings, f"INSERT INTO MANY_BLOBS (ID, {', '.join(given)}) VALUES (1, {marks})", params=tuple(given.values())
    )
    execute(settings, "UPDATE MANY_BLOBS SET T0 = 'changed', B1 = NULL WHERE ID = 1", "DELETE FROM MANY_BLOBS")
    inserted, updated, deleted = events(settings)
    assert inserted["new"] == {"ID": 1, **values}
    in_table_order = ["ID", *(column.split()[0] for column in columns.split(", "))]
    assert list(inserted["new"]) == list(deleted["old"]) == in_table_order
    changed = {"ID": 1, **values, "T0": "changed", "B1": None}
    assert (updated["old"], updated["new"]) == (inserted["new"], changed)
    assert deleted["old"] == changed


def test_a_blob_row_whose_other_columns_nearly_fill_a_varchar(settings):
    """On Firebird 3 the other columns' parts of such a row are one VARCHAR
    of almost 32,000 bytes, which its BLOB values then follow."""
    columns = ", ".join(f"C{i} VARCHAR(7000) CHARACTER SET WIN1252" for i in range(4))
    execute(settings, f"CREATE TABLE NEARLY (ID INTEGER NOT NULL PRIMARY KEY, {columns}, B BLOB SUB_TYPE BINARY)")
    Subs(settings).ok("add", "nearly", "IU", "t")
    values = ("€" * 7000, "é" * 7000, "x" * 7000, "ü" * 7000, bytes(range(256)) * 100)
    execute(settings, "INSERT INTO NEARLY VALUES (1, ?, ?, ?, ?, ?)", params=values)
    execute(settings, "UPDATE NEARLY SET B = NULL")
    inserted, updated = events(settings)
    assert inserted["new"] == dict(zip(["ID", "C0", "C1", "C2", "C3", "B"], (1, *values), strict=True))
    assert updated["new"] == {**inserted["new"], "B": None}


def decoded(batch: list[Claimed]) -> list[Event]:
    """Claimed events as their handler process gets them."""
    events = [claimed.event() for claimed in batch]
    assert all(error is None for _, error in events)
    return [event for event, _ in events]


def test_claims_hand_over_short_and_long_values_alike(settings):
    """Claims read values of up to 8,000 characters as VARCHAR and longer ones
    as BLOB; handlers get the same either way, in both claim modes."""
    names = [f"C{i}" for i in range(12)]
    columns = ", ".join(f"{name} VARCHAR(1000)" for name in names)
    execute(settings, f"CREATE TABLE WIDE (ID INTEGER NOT NULL PRIMARY KEY, {columns})")
    Subs(settings).ok("add", "wide", "IU", "t")
    marks = ", ".join("?" * len(names))
    execute(settings, f"INSERT INTO WIDE (ID, {', '.join(names)}) VALUES (1, {marks})", params=("é" * 1000,) * 12)
    execute(settings, f"INSERT INTO WIDE (ID, {', '.join(names)}) VALUES (2, {marks})", params=("a'\\",) * 12)
    execute(settings, "UPDATE WIDE SET C0 = 'x' WHERE ID = 1")
    logged = [(e["pk"], e["old"], e["new"]) for e in events(settings)]
    assert len(logged) == 3 and len(logged[0][2]["C11"]) == 1000
    with Database(settings) as db:
        claimer = Claimer(db, "test:1", 30)
        targets = {t.sub_id: t for t in load_targets(db)}
        taken = claimer.claim(targets, 10)
        claimed = decoded(taken)
        assert [(e.pk, e.old, e.new) for e in claimed] == logged
        claimer.ack([], {e.span for e in taken})
        streams_of = streams(targets.values()).values()
        in_order = decoded([e for stream in streams_of for e in claimer.claim_head(stream, 10)])
        assert sorted((e.id, e.pk, e.old, e.new) for e in in_order) == [(e.id, e.pk, e.old, e.new) for e in claimed]


def test_claims_larger_than_one_read_come_whole_and_in_order(settings):
    execute(settings, "CREATE TABLE MANY (ID INTEGER NOT NULL PRIMARY KEY)")
    Subs(settings).ok("add", "many", "I", "t")
    execute(
        settings,
        "EXECUTE BLOCK AS DECLARE I INTEGER = 1; BEGIN WHILE (I <= 250) DO "
        "BEGIN INSERT INTO MANY VALUES (:I); I = I + 1; END END",
    )
    with Database(settings) as db:
        claimer = Claimer(db, "test:1", 30)
        (target,) = load_targets(db)
        taken = claimer.claim({target.sub_id: target}, 250)
        assert [e.pk["ID"] for e in decoded(taken)] == list(range(1, 251))
        claimer.ack([], {e.span for e in taken})
        assert [e.pk["ID"] for e in decoded(claimer.claim_head([target], 203))] == list(range(1, 204))


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"~", {}),
        (b"~2:ID1:i1:5", {"ID": 5}),
        (b"~2:ID1:i-", {"ID": None}),
        (b"~1:x5:sUTF81: ", {"x": " "}),
        ("~3:a:b5:sUTF83:a:b4:Kéy1:N4:1.50".encode(), {"a:b": "a:b", "Kéy": Decimal("1.50")}),
        (b"~1:b1:b4:TRUE1:D1:D10:2024-02-29", {"b": True, "D": dt.date(2024, 2, 29)}),
        (b"~1:f1:f23:1383505805528216576p-62", {"f": 0.30000000000000004}),
        (b"~1:n5:sNONE2:\xff\x00", {"n": b"\xff\x00"}),
        (b"~1:w8:sWIN12521:\x80", {"w": "\u20ac"}),
        (b"~1:o1:x0:", {"o": b""}),
        # Since schema version 18 row images delimit the types whose text holds no ';'.
        (b"~2:ID1:i=5;1:t5:sUTF82:=;", {"ID": 5, "t": "=;"}),
        (
            b"~1:f1:f=0.30000000000000004;1:g1:f=-inf;1:N1:N=-1.5E+3;",
            {"f": 0.30000000000000004, "g": -math.inf, "N": Decimal("-1.5E+3")},
        ),
        (b"~1:S1:S=2024-02-29 10:11:12.3456;1:b1:b-", {"S": dt.datetime(2024, 2, 29, 10, 11, 12, 345600), "b": None}),
        # Since version 26 images built by concatenation put BLOB values after a '^', in order.
        (b"~1:a1:x>3:1:t1:i=7;1:b5:sNONE>2:^ab\xffc\xfe", {"a": b"ab\xff", "t": 7, "b": b"c\xfe"}),
        (b"~1:a1:x-1:b1:x>0:^", {"a": None, "b": b""}),
        (b"~2:ID1:i=1;^", {"ID": 1}),
        # Rows captured before schema version 8: text, counted in characters.
        ("2:IDi1:5", {"ID": 5}),
        ("3:Kéys2:é:2:IDn", {"Kéy": "é:", "ID": None}),
    ],
)
def test_decode_reads_the_documented_format(data, expected):
    assert decode(data) == expected


@pytest.mark.parametrize(
    "data",
    [
        b"~2:ID1:i9:5",
        b"~2:ID1:q1:5",
        b"~2:ID1:i1:x",
        "2:IDz1:5",
        b"~2:ID1:i=5",
        b"~2:ID1:i=x;",
        b"~1:a1:x>3:^ab",
        b"~1:a1:x>1:^ab",
        b"~1:a1:x>x:^a",
    ],
)
def test_undecodable_rows_raise_one_kind_of_error(data):
    with pytest.raises(UndecodableEvent, match="cannot decode the captured row"):
        decode(data)


def test_a_table_with_more_logging_statements_than_a_trigger_can_hold(settings, db, make_user):
    """Firebird compiles a trigger with at most 256 contexts, and each INSERT
    takes one: 270 logging statements (30 IUD subscriptions with --when, two
    each per action, and 30 without) were refused with 'Too many Contexts'.
    Past 200 the trigger logs through a sub-procedure, with the trigger's
    rights: an application user with table rights only writes, every
    subscription gets its events, values and notification, and a condition
    that raises logs its change dead. An ALTER of the table keeps it so."""
    app = make_user("app")
    execute(settings, "CREATE TABLE ORDERS (ID INTEGER NOT NULL PRIMARY KEY, NOTE VARCHAR(10))")
    execute(settings, f"GRANT SELECT, INSERT, UPDATE, DELETE ON ORDERS TO USER {app.user}")
    subs = Subs(settings)
    tags = [f"tag{number}" for number in range(60)]
    for number, tag in enumerate(tags):
        subs.ok("add", "orders", "IUD", tag, *(("--when", "CURRENT_USER <> 'NOBODY'") if number % 2 else ()))
    subs.ok("add", "orders", "I", "broken", "--when", "CAST(NEW.NOTE AS INTEGER) > 0")
    watch = EventWatch(db.connection, ["subs:tag0", "subs:tag59"])
    try:
        watch.wait(1)  # the first notice may only report the counts the engine has
        execute(
            app,
            "INSERT INTO ORDERS VALUES (1, 'a')",
            "INSERT INTO ORDERS VALUES (2, 'b')",
            "UPDATE ORDERS SET NOTE = 'z' WHERE ID = 1",
            "DELETE FROM ORDERS WHERE ID = 2",
        )
        assert watch.wait(10), "no notification"
    finally:
        watch.close()

    logged = events(settings)
    assert Counter((e["tag"], e["action"]) for e in logged) == {
        **{(tag, "I"): 2 for tag in tags},
        **{(tag, "U"): 1 for tag in tags},
        **{(tag, "D"): 1 for tag in tags},
        ("broken", "I"): 2,
    }
    update = next(e for e in logged if e["tag"] == "tag59" and e["action"] == "U")
    assert (update["pk"], update["old"], update["new"]) == ({"ID": 1}, {"ID": 1, "NOTE": "a"}, {"ID": 1, "NOTE": "z"})
    dead = query(
        settings,
        "SELECT TRIM(s.TAG), l.LAST_ERROR FROM EVENT_LOG l JOIN EVENT_SUBSCRIBER s ON s.SUB_ID = l.SUB_ID WHERE l.DEAD",
    )
    assert [tag for tag, _ in dead] == ["broken", "broken"]
    assert all(read_text(error).startswith("the --when condition raised: ") for _, error in dead)

    # The application's own migration regenerates that trigger at its commit.
    execute(settings, "ALTER TABLE ORDERS ADD EXTRA INTEGER")
    execute(app, "INSERT INTO ORDERS VALUES (3, '7', 8)")
    inserted = [e for e in events(settings)[len(logged) :] if e["tag"] in ("tag0", "tag59", "broken")]
    assert [e["new"] for e in inserted] == [{"ID": 3, "NOTE": "7", "EXTRA": 8}] * 3
