"""The application's own DDL runs unchanged on subscribed tables, and no
committed change is lost across it: database triggers regenerate the
capture trigger as the DDL's transaction commits (sql/capture.sql)."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable

import pytest
from firebird.driver import Connection, DatabaseError, connect

from subscriptions.capture.trigger_sync import ChangedTriggerSettler
from subscriptions.capture.values import decode
from subscriptions.db import runtime
from subscriptions.db.connection import Database, read_blob

from conftest import Subs, events, execute, query, wait_until
from listening import Listener

TABLE = "CREATE TABLE PEOPLE (ID INTEGER NOT NULL PRIMARY KEY, NAME VARCHAR(10), AGE INTEGER)"


@pytest.fixture
def people(settings):
    execute(settings, TABLE)
    Subs(settings).ok("add", "people", "IUD", "audit")
    return settings


def last_new(settings) -> dict:
    return events(settings)[-1]["new"]


def test_added_columns_are_captured_from_the_next_write_on(people):
    execute(people, "INSERT INTO PEOPLE VALUES (1, 'Ann', 30)")
    execute(people, "ALTER TABLE PEOPLE ADD EMAIL VARCHAR(40)")
    execute(people, "INSERT INTO PEOPLE VALUES (2, 'Bob', 40, 'bob@example.com')")
    before, after = (e["new"] for e in events(people))
    assert "EMAIL" not in before and after["EMAIL"] == "bob@example.com"


def test_a_column_named_with_leading_spaces_can_be_added(people):
    """The catalogue pads names on the right only: a name's leading spaces
    are part of it (until version 17 the commit failed on "NEW.LEAD")."""
    execute(people, 'ALTER TABLE PEOPLE ADD "  LEAD" INTEGER')
    execute(people, 'INSERT INTO PEOPLE (ID, "  LEAD") VALUES (1, 5)')
    assert last_new(people)["  LEAD"] == 5
    assert Subs(people)("status", "--check").exit_code == 0


def test_a_column_added_to_a_wide_table_is_captured(settings):
    """The trigger is regenerated only when its text differs: here the two
    texts, about 40 KB each, differ only at their end."""
    columns = ", ".join(f"C{number} VARCHAR(20)" for number in range(200))
    execute(settings, f"CREATE TABLE WIDE (ID INTEGER NOT NULL PRIMARY KEY, {columns})")
    Subs(settings).ok("add", "wide", "I", "audit")
    execute(settings, "ALTER TABLE WIDE ADD LAST_ONE INTEGER")
    execute(settings, "INSERT INTO WIDE (ID, LAST_ONE) VALUES (1, 7)")
    assert events(settings)[-1]["new"]["LAST_ONE"] == 7
    assert Subs(settings)("status", "--check").exit_code == 0


def test_dropped_columns_retyped_widened_and_moved_columns(people):
    execute(people, "INSERT INTO PEOPLE VALUES (1, 'Ann', 30)")
    execute(people, "ALTER TABLE PEOPLE DROP AGE")
    execute(people, "INSERT INTO PEOPLE VALUES (2, 'Bob')")
    assert last_new(people) == {"ID": 2, "NAME": "Bob"}
    execute(people, "ALTER TABLE PEOPLE ALTER NAME TYPE VARCHAR(50)")
    execute(people, "INSERT INTO PEOPLE VALUES (3, ?)", params=("a name longer than ten characters",))
    assert last_new(people)["NAME"] == "a name longer than ten characters"
    execute(people, "ALTER TABLE PEOPLE ALTER NAME POSITION 1")
    execute(people, "INSERT INTO PEOPLE VALUES ('Cy', 4)")
    assert list(last_new(people)) == ["NAME", "ID"]
    # Events captured before the changes decode with the shape they had.
    assert events(people)[0]["new"] == {"ID": 1, "NAME": "Ann", "AGE": 30}


def test_a_type_change_keeps_earlier_events_as_captured(people):
    execute(people, "INSERT INTO PEOPLE VALUES (1, 'Ann', 30)")
    execute(people, "ALTER TABLE PEOPLE ALTER AGE TYPE VARCHAR(20)")
    execute(people, "INSERT INTO PEOPLE VALUES (2, 'Bob', 'forty')")
    assert [e["new"]["AGE"] for e in events(people)] == [30, "forty"]


def test_columns_widened_through_a_domain(settings):
    execute(settings, "CREATE DOMAIN D_NAME AS VARCHAR(5)")
    execute(settings, "CREATE TABLE TAGS (ID INTEGER NOT NULL PRIMARY KEY, LABEL D_NAME)")
    Subs(settings).ok("add", "tags", "I", "audit")
    execute(settings, "ALTER DOMAIN D_NAME TYPE VARCHAR(30)")
    execute(settings, "INSERT INTO TAGS VALUES (1, 'longer than five')")
    assert last_new(settings)["LABEL"] == "longer than five"


def primary_key_constraint(settings) -> str:
    ((name,),) = query(
        settings,
        "SELECT TRIM(RDB$CONSTRAINT_NAME) FROM RDB$RELATION_CONSTRAINTS "
        "WHERE RDB$RELATION_NAME = 'PEOPLE' AND RDB$CONSTRAINT_TYPE = 'PRIMARY KEY'",
    )
    return str(name)


def test_a_new_primary_key_is_used(people):
    execute(people, "UPDATE PEOPLE SET AGE = 0")
    execute(people, "ALTER TABLE PEOPLE ALTER AGE SET NOT NULL")
    execute(
        people,
        f'ALTER TABLE PEOPLE DROP CONSTRAINT "{primary_key_constraint(people)}"',
        "ALTER TABLE PEOPLE ADD PRIMARY KEY (AGE)",
    )
    execute(people, "INSERT INTO PEOPLE VALUES (1, 'Ann', 30)")
    assert events(people)[-1]["pk"] == {"AGE": 30}


def test_changes_between_dropping_a_primary_key_and_adding_the_next_are_captured_without_a_key(people):
    """A migration may drop the key in one transaction and add the next in
    a later one: what is written in between is logged with an empty key,
    and `status --check` names the table meanwhile."""
    execute(people, "INSERT INTO PEOPLE VALUES (1, 'Ann', 30)")
    execute(people, f'ALTER TABLE PEOPLE DROP CONSTRAINT "{primary_key_constraint(people)}"')
    execute(people, "INSERT INTO PEOPLE VALUES (2, 'Bob', 40)", "UPDATE PEOPLE SET AGE = 31 WHERE ID = 1")
    execute(people, "DELETE FROM PEOPLE WHERE ID = 2")
    code, output = check(people)
    assert code == 1 and output.splitlines()[0] == (
        "subscription 1 (PEOPLE I audit): table has no primary key: captured with an empty key"
    )
    refused = Subs(people)("backfill", "people", "audit")
    assert refused.exit_code == 1 and "no primary key" in refused.output

    execute(people, "ALTER TABLE PEOPLE ALTER AGE SET NOT NULL", "ALTER TABLE PEOPLE ADD PRIMARY KEY (AGE)")
    execute(people, "INSERT INTO PEOPLE VALUES (3, 'Cy', 50)")
    assert [(e["action"], e["pk"], e["old"], e["new"]) for e in events(people)] == [
        ("I", {"ID": 1}, None, {"ID": 1, "NAME": "Ann", "AGE": 30}),
        ("I", {}, None, {"ID": 2, "NAME": "Bob", "AGE": 40}),
        ("U", {}, {"ID": 1, "NAME": "Ann", "AGE": 30}, {"ID": 1, "NAME": "Ann", "AGE": 31}),
        ("D", {}, {"ID": 2, "NAME": "Bob", "AGE": 40}, None),
        ("I", {"AGE": 50}, None, {"ID": 3, "NAME": "Cy", "AGE": 50}),
    ]
    assert check(people)[0] == 0


def test_a_primary_key_too_long_to_capture_is_left_out_and_the_migration_runs(people):
    """A key longer than EVENT_LOG.PK_ROW holds (1,000 bytes of captured key)
    no longer refuses the application's migration: its changes are logged
    with an empty key, and `status --check` says why."""
    execute(
        people,
        "ALTER TABLE PEOPLE ADD CODE VARCHAR(300) CHARACTER SET UTF8 NOT NULL",
        f'ALTER TABLE PEOPLE DROP CONSTRAINT "{primary_key_constraint(people)}"',
        "ALTER TABLE PEOPLE ADD PRIMARY KEY (CODE)",
    )
    execute(people, "INSERT INTO PEOPLE VALUES (1, 'Ann', 30, 'ann')", "DELETE FROM PEOPLE")
    assert [(e["action"], e["pk"], (e["new"] or e["old"])["CODE"]) for e in events(people)] == [
        ("I", {}, "ann"),
        ("D", {}, "ann"),
    ]
    code, output = check(people)
    assert code == 1
    assert output.splitlines()[0] == (
        "subscription 1 (PEOPLE I audit): primary key too long to capture: captured with an empty key"
    )
    assert Subs(people).ok("add", "people", "IUD", "audit").count("already subscribed") == 3
    refused = Subs(people)("add", "people", "I", "other")
    assert refused.exit_code == 1 and "too long to capture" in refused.output
    assert query(people, "SELECT COUNT(*) FROM EVENT_SUBSCRIBER") == [(3,)]


def test_a_table_dropped_and_created_again_is_captured_again(people):
    execute(people, "INSERT INTO PEOPLE VALUES (1, 'Ann', 30)")
    execute(people, "DROP TABLE PEOPLE")
    execute(people, "CREATE TABLE PEOPLE (ID BIGINT NOT NULL PRIMARY KEY, NICK VARCHAR(10))")
    execute(people, "INSERT INTO PEOPLE VALUES (7, 'a')")
    assert [e["new"] for e in events(people)] == [{"ID": 1, "NAME": "Ann", "AGE": 30}, {"ID": 7, "NICK": "a"}]


def test_renaming_a_column_is_refused_with_the_way_to_do_it(people):
    with pytest.raises(DatabaseError) as refused:
        execute(people, "ALTER TABLE PEOPLE ALTER NAME TO FULL_NAME")
    assert "add the new column, copy the values (UPDATE), then drop the old one" in str(refused.value)
    execute(
        people,
        "ALTER TABLE PEOPLE ADD FULL_NAME VARCHAR(10)",
    )
    execute(people, "UPDATE PEOPLE SET FULL_NAME = NAME", "ALTER TABLE PEOPLE DROP NAME")
    execute(people, "INSERT INTO PEOPLE VALUES (1, 30, 'Ann')")
    assert last_new(people) == {"ID": 1, "AGE": 30, "FULL_NAME": "Ann"}


def test_a_change_a_when_condition_cannot_follow_is_refused_and_changes_nothing(people):
    """The trigger is regenerated at commit: Firebird refuses the commit
    with its own message, and nothing changes."""
    Subs(people).ok("add", "people", "I", "adults", "--when", "NEW.AGE >= 18")
    before = query(people, "SELECT RDB$TRIGGER_SOURCE FROM RDB$TRIGGERS WHERE RDB$TRIGGER_NAME = 'SUBS$PEOPLE'")
    with pytest.raises(DatabaseError) as refused:
        execute(people, "ALTER TABLE PEOPLE DROP AGE")
    assert "CREATE OR ALTER TRIGGER SUBS$PEOPLE failed" in str(refused.value)
    assert "NEW.AGE" in str(refused.value)
    assert query(people, "SELECT RDB$TRIGGER_SOURCE FROM RDB$TRIGGERS WHERE RDB$TRIGGER_NAME = 'SUBS$PEOPLE'") == before
    execute(people, "INSERT INTO PEOPLE VALUES (1, 'Ann', 30)")
    assert sorted(e["tag"] for e in events(people)) == ["adults", "audit"]


def test_tables_without_subscriptions_are_left_alone(settings):
    execute(settings, "CREATE TABLE OTHER (ID INTEGER NOT NULL PRIMARY KEY, A INTEGER)")
    execute(settings, "ALTER TABLE OTHER ALTER A TO B", "ALTER TABLE OTHER DROP B")
    assert query(settings, "SELECT COUNT(*) FROM RDB$TRIGGERS WHERE RDB$RELATION_NAME = 'OTHER'") == [(0,)]


def attach(settings, charset: str) -> Connection:
    """An application's attachment in ``charset`` (subs attaches in UTF8)."""
    runtime.load()
    return connect(settings.target, user=settings.effective_user, password=settings.password, charset=charset)


@pytest.mark.parametrize(
    ("charset", "table", "column", "value"),
    [
        ("WIN1252", "STRAßEN", "STRAßE", "Bahnhofstraße"),
        ("WIN1251", "УЛИЦЫ", "ИМЯ", "Тверская"),
        ("NONE", "名前", "ИМЯ", "Тверская"),
    ],
)
def test_ddl_from_an_attachment_in_another_character_set_keeps_names_and_keys(settings, charset, table, column, value):
    """The application's DDL regenerates the capture trigger in the
    application's attachment, whose character set its literals would take:
    until version 21 a WIN1252 attachment made the header STRAßE 6 bytes
    where it counts 7 (every later event undecodable), and put other bytes
    of the table's name into KEY_HASH than the trigger `subs add` made. An
    attachment in NONE stores the trigger's text with a '?' for each byte
    beyond ASCII: `subs status --check` called such a trigger stale."""
    execute(settings, f'CREATE TABLE "{table}" (ID INTEGER NOT NULL PRIMARY KEY, "{column}" VARCHAR(40))')
    Subs(settings).ok("add", f'"{table}"', "IU", "audit")
    execute(settings, f'INSERT INTO "{table}" VALUES (1, ?)', params=(value,))
    application = attach(settings, charset)
    try:
        application.execute_immediate(f'ALTER TABLE "{table}" ADD NOTE VARCHAR(10)')
        application.commit()
        cursor = application.cursor()
        cursor.execute(f'UPDATE "{table}" SET "{column}" = ?, NOTE = ? WHERE ID = 1', (value + "!", "n"))
        application.commit()
    finally:
        application.close()
    inserted, updated = events(settings)
    assert (inserted["pk"], inserted["new"]) == ({"ID": 1}, {"ID": 1, column: value})
    assert (updated["pk"], updated["old"]) == ({"ID": 1}, {"ID": 1, column: value, "NOTE": None})
    assert updated["new"] == {"ID": 1, column: value + "!", "NOTE": "n"}
    assert query(settings, "SELECT COUNT(DISTINCT KEY_HASH) FROM EVENT_LOG") == [(1,)]
    assert Subs(settings).ok("status", "--check").startswith("all 2 subscription(s) are captured")


def test_when_conditions_mean_the_same_after_ddl_from_an_attachment_in_another_character_set(settings):
    """A --when condition's quoted literals would take the character set of
    the application's attachment that regenerated the trigger: until
    version 21, from WIN1252 a literal holding Ł failed the ALTER TABLE, and
    NEW.CITY <> 'plain' raised for a CITY holding Ł (its changes logged
    dead). A literal with an introducer, which the engine stores as hex in
    the trigger's source, left the trigger looking stale. Until version 22
    q'...' literals kept the attachment's character set."""
    execute(
        settings,
        "CREATE TABLE CITIES (ID INTEGER NOT NULL PRIMARY KEY, CITY VARCHAR(40) CHARACTER SET UTF8, FOUNDED DATE)",
    )
    conditions = {
        "other": "NEW.city <> 'plain'",
        "listed": "NEW.city IN ('Łódź', 'it''s')",
        "introduced": "NEW.city = _UTF8 'Köln' OR NEW.city=_UTF8'plain'",
        "typed": "NEW.founded > DATE '2000-01-01' AND NEW.city STARTING WITH 'Ł'",
        "empty": "COALESCE(NEW.city, '') = ''",
        "alternative": "NEW.city <> q'!plain!' AND NEW.city IN (q'{it's}', Q'[Łódź]', q'<Ł>')",
    }
    for tag, condition in conditions.items():
        Subs(settings).ok("add", "cities", "I", tag, "--when", condition)
    application = attach(settings, "WIN1252")
    try:
        application.execute_immediate("ALTER TABLE CITIES ADD NOTE VARCHAR(10)")
        application.commit()
    finally:
        application.close()
    rows = [(1, "Łódź", dt.date(2001, 1, 1)), (2, "it's", None), (3, "Köln", None), (4, "plain", None)]
    for row in [*rows, (5, "Ł", dt.date(1999, 1, 1)), (6, "", None)]:
        execute(settings, "INSERT INTO CITIES (ID, CITY, FOUNDED) VALUES (?, ?, ?)", params=row)
    logged = events(settings)
    assert {tag: [e["pk"]["ID"] for e in logged if e["tag"] == tag] for tag in conditions} == {
        "other": [1, 2, 3, 5, 6],
        "listed": [1, 2],
        "introduced": [3, 4],
        "typed": [1],
        "empty": [6],
        "alternative": [1, 2, 5],
    }
    assert query(settings, "SELECT COUNT(*) FROM EVENT_LOG WHERE DEAD") == [(0,)]
    assert logged[0]["new"] == {"ID": 1, "CITY": "Łódź", "FOUNDED": dt.date(2001, 1, 1), "NOTE": None}
    assert Subs(settings).ok("status", "--check").startswith("all 6 subscription(s) are captured")


def test_ddl_from_an_attachment_lacking_a_character_of_a_captured_name_says_what_to_do(settings):
    """A name the attachment's character set lacks cannot be written in the
    trigger that attachment compiles: the DDL fails with what to do instead
    of the engine's "Cannot transliterate character between character
    sets", and changes nothing."""
    execute(settings, 'CREATE TABLE TOWNS (ID INTEGER NOT NULL PRIMARY KEY, "ИМЯ" VARCHAR(40))')
    Subs(settings).ok("add", "towns", "I", "audit")
    application = attach(settings, "WIN1252")
    try:
        application.execute_immediate("ALTER TABLE TOWNS ADD NOTE VARCHAR(10)")
        with pytest.raises(DatabaseError) as refused:
            application.commit()
        application.rollback()
    finally:
        application.close()
    assert (
        "subs cannot write the capture trigger of table TOWNS in this attachment: a name it captures or a "
        "--when condition uses has a character the attachment's character set lacks; run this statement from "
        "an attachment in UTF8"
    ) in str(refused.value)
    assert query(settings, "SELECT COUNT(*) FROM RDB$RELATION_FIELDS WHERE RDB$RELATION_NAME = 'TOWNS'") == [(2,)]
    assert Subs(settings).ok("status", "--check").startswith("all 1 subscription(s) are captured")


def insert(db: Database, *values: object) -> None:
    with db.transaction() as cursor:
        cursor.execute("INSERT INTO PEOPLE (ID, NAME, AGE) VALUES (?, ?, ?)", values)


def test_an_application_that_connects_while_a_migration_is_open_writes_as_without_subs(people):
    """The capture trigger changes as the DDL commits, never before: the
    engine shows an attachment that first reads a table while a DDL
    transaction is open that transaction's uncommitted triggers, and keeps
    them after a rollback. Until schema version 14 the trigger that read the
    added column failed this attachment's writes ("column EMAIL is not
    defined in table PEOPLE"), during the migration and after its rollback."""
    with Database(people) as migration:
        migration.connection.begin()
        migration.connection.cursor().execute("ALTER TABLE PEOPLE ADD EMAIL VARCHAR(40)")
        with Database(people) as application:
            insert(application, 1, "Ann", 30)
            migration.connection.rollback()
            insert(application, 2, "Bob", 40)
            migration.connection.begin()
            migration.connection.cursor().execute("ALTER TABLE PEOPLE ADD EMAIL VARCHAR(40)")
            insert(application, 3, "Cy", 50)
            migration.connection.commit()
            insert(application, 4, "Di", 60)
    execute(people, "INSERT INTO PEOPLE VALUES (5, 'Ed', 70, 'ed@example.com')")
    assert [e["new"] for e in events(people)] == [
        {"ID": 1, "NAME": "Ann", "AGE": 30},
        {"ID": 2, "NAME": "Bob", "AGE": 40},
        {"ID": 3, "NAME": "Cy", "AGE": 50},
        {"ID": 4, "NAME": "Di", "AGE": 60, "EMAIL": None},
        {"ID": 5, "NAME": "Ed", "AGE": 70, "EMAIL": "ed@example.com"},
    ]
    assert Subs(people)("status", "--check").exit_code == 0


def test_a_migration_that_writes_the_table_in_its_own_transaction(people):
    """Its writes see the table as it was: they are captured in that shape,
    and the new column from the next transaction on."""
    execute(
        people,
        "ALTER TABLE PEOPLE ADD EMAIL VARCHAR(40)",
        "INSERT INTO PEOPLE (ID, NAME) VALUES (1, 'Ann')",
        "UPDATE PEOPLE SET AGE = 30 WHERE ID = 1",
    )
    execute(people, "UPDATE PEOPLE SET EMAIL = 'ann@example.com' WHERE ID = 1")
    assert [e["new"] for e in events(people)] == [
        {"ID": 1, "NAME": "Ann", "AGE": None},
        {"ID": 1, "NAME": "Ann", "AGE": 30},
        {"ID": 1, "NAME": "Ann", "AGE": 30, "EMAIL": "ann@example.com"},
    ]


def test_ddl_committed_with_commit_retaining(people):
    """Commit triggers run on COMMIT RETAINING too: a dropped column's
    dependencies are checked then, against the regenerated trigger."""
    with Database(people) as db:
        db.connection.begin()
        cursor = db.connection.cursor()
        cursor.execute("ALTER TABLE PEOPLE DROP AGE")
        db.connection.commit(retaining=True)
        cursor.execute("ALTER TABLE PEOPLE ADD EMAIL VARCHAR(40)")
        db.connection.commit(retaining=True)
        db.connection.commit()
    execute(people, "INSERT INTO PEOPLE VALUES (1, 'Ann', 'ann@example.com')")
    assert last_new(people) == {"ID": 1, "NAME": "Ann", "EMAIL": "ann@example.com"}


def trigger_version(settings) -> int:
    """The transaction that wrote the capture trigger's catalogue row last."""
    ((version,),) = query(
        settings, "SELECT RDB$RECORD_VERSION FROM RDB$TRIGGERS WHERE RDB$TRIGGER_NAME = 'SUBS$PEOPLE'"
    )
    return int(version)


def test_a_trigger_the_application_s_ddl_regenerated_is_settled_once(people):
    """The listener touches a capture trigger whose text changed since its
    last look, so that a writer process that reloaded the table's metadata
    while the DDL committed drops the old trigger (capture/trigger_sync.py)."""
    settler = ChangedTriggerSettler()
    with Database(people) as db:
        assert settler.settle(db) == []  # the first look
        execute(people, "ALTER TABLE PEOPLE ALTER NAME SET DEFAULT 'n/a'")  # the trigger stays as it was
        assert settler.settle(db) == []
        execute(people, "ALTER TABLE PEOPLE ADD EMAIL VARCHAR(40)")
        regenerated = trigger_version(people)
        assert settler.settle(db) == ["PEOPLE"]
        assert trigger_version(people) > regenerated
        assert settler.settle(db) == []  # a touch leaves the text as it was
        execute(people, "DROP TABLE PEOPLE")
        execute(people, TABLE)
        assert settler.settle(db) == ["PEOPLE"]  # the new table's trigger, without EMAIL
    execute(people, "INSERT INTO PEOPLE VALUES (1, 'Ann', 30)")
    assert last_new(people) == {"ID": 1, "NAME": "Ann", "AGE": 30}


def test_the_listener_settles_the_trigger_after_the_application_s_ddl(items, tmp_path, listeners):
    listener = Listener(items, tmp_path)
    listeners.append(listener)
    wait_until(lambda: "watching 1 capture trigger(s)" in listener.output(), what="the listener's first look")
    execute(items, "ALTER TABLE ITEMS ADD EMAIL VARCHAR(40)")
    execute(items, "INSERT INTO ITEMS (ID, EMAIL) VALUES (1, 'ann@example.com')")
    listener.wait_for(lambda lines: len(lines) >= 2)  # handled: the listener's housekeeping connects
    wait_until(
        lambda: "settled the capture trigger of ITEMS after a schema change" in listener.output(),
        what=f"the listener to settle the trigger; log: {listener.output()[-1500:]}",
    )


class Writer(threading.Thread):
    """Inserts, updates and deletes rows of PEOPLE in short transactions until
    stopped; a write that fails is kept in ``refused`` and not counted (the
    witness trigger counts what committed). An attachment made while a DDL
    commits can read the new capture trigger before the table's new shape,
    and a write of it fail (docs/ARCHITECTURE.md, "Schema changes"). With
    ``connect_each_time`` it attaches anew for every transaction, as an
    application that connects per request does: such an attachment reads the
    table's triggers while DDL may be under way."""

    def __init__(self, settings, first_id: int, connect_each_time: bool = False) -> None:
        super().__init__(daemon=True)
        self.settings = settings
        self.next_id = first_id
        self.connect_each_time = connect_each_time
        self.stop = threading.Event()
        self.committed = 0
        self.refused: list[str] = []

    def run(self) -> None:
        while not self.stop.is_set():
            with Database(self.settings) as db:
                self._write(db)
                while not self.connect_each_time and not self.stop.is_set():
                    self._write(db)

    def _write(self, db: Database) -> None:
        row = self.next_id
        self.next_id += 1
        try:
            with db.transaction() as cursor:
                cursor.execute("INSERT INTO PEOPLE (ID) VALUES (?)", (row,))
                cursor.execute("UPDATE PEOPLE SET ID = ID WHERE ID = ?", (row,))
                if row % 3 == 0:
                    cursor.execute("DELETE FROM PEOPLE WHERE ID = ?", (row,))
            self.committed += 1
        except DatabaseError as exc:
            self.refused.append(str(exc).splitlines()[-1])


def test_no_committed_change_is_lost_while_the_application_migrates(people):
    """Every DDL above, while writers keep writing: each committed change is in
    the log exactly once, counted against an independent witness trigger.
    Until schema version 13 the capture trigger was emptied for the length of
    an ALTER TABLE, and an attachment made meanwhile used the empty one: about
    one change per DDL of the writer that connects each time was lost."""
    execute(people, "CREATE TABLE WITNESS (ID INTEGER, ACTION CHAR(1))")
    execute(
        people,
        "CREATE TRIGGER WITNESS_PEOPLE FOR PEOPLE AFTER INSERT OR UPDATE OR DELETE POSITION 1 AS BEGIN "
        "INSERT INTO WITNESS VALUES (IIF(DELETING, OLD.ID, NEW.ID), IIF(INSERTING, 'I', IIF(UPDATING, 'U', 'D'))); END",
    )
    execute(people, "CREATE DOMAIN D_AGE AS SMALLINT")
    writers = [Writer(people, 1), Writer(people, 1_000_000), Writer(people, 2_000_000, connect_each_time=True)]
    for writer in writers:
        writer.start()

    def after_some_writes(*statements: str) -> None:
        goal = sum(w.committed for w in writers) + 20
        while sum(w.committed for w in writers) < goal:
            threading.Event().wait(0.01)
        execute(people, *statements)

    migrations: list[Callable[[], None]] = [
        lambda: after_some_writes("ALTER TABLE PEOPLE ADD EMAIL VARCHAR(40)"),
        lambda: after_some_writes("ALTER TABLE PEOPLE DROP AGE"),
        lambda: after_some_writes("ALTER TABLE PEOPLE ALTER NAME TYPE VARCHAR(80)"),
        lambda: after_some_writes("ALTER TABLE PEOPLE ADD AGE D_AGE"),
        lambda: after_some_writes("ALTER DOMAIN D_AGE TYPE INTEGER"),
        lambda: after_some_writes("ALTER TABLE PEOPLE ALTER EMAIL POSITION 1"),
        lambda: after_some_writes("ALTER TABLE PEOPLE ALTER NAME SET DEFAULT 'n/a'"),
        lambda: after_some_writes("ALTER TABLE PEOPLE ADD NOTE VARCHAR(10)", "ALTER TABLE PEOPLE DROP NOTE"),
    ]
    # (A primary key cannot change while writers write: Firebird refuses to
    # drop its index with "object TABLE is in use", with or without subs.)
    try:
        for migrate in migrations:
            migrate()
        after_some_writes("ALTER TABLE PEOPLE ADD LAST_SEEN TIMESTAMP")
    finally:
        for writer in writers:
            writer.stop.set()
            writer.join(30)

    witnessed = sorted(query(people, "SELECT ID, ACTION FROM WITNESS"))
    logged = sorted((e["pk"]["ID"], e["action"]) for e in events(people))
    assert len(witnessed) > 100
    assert logged == witnessed


def check(settings) -> tuple[int, str]:
    result = Subs(settings)("status", "--check")
    return result.exit_code, result.stdout


def test_drift_is_visible_and_add_repairs_it(people):
    assert check(people) == (0, "all 3 subscription(s) are captured\n")
    assert {row["capture"] for row in json.loads(Subs(people).ok("list", "--json"))} == {"ok"}

    execute(people, 'ALTER TRIGGER "SUBS$PEOPLE" INACTIVE')
    assert {row["capture"] for row in json.loads(Subs(people).ok("status", "--json"))} == {"trigger inactive"}
    assert "again" not in Subs(people).ok("init")  # an operator's choice, not drift `subs init` repairs
    assert {row["capture"] for row in json.loads(Subs(people).ok("status", "--json"))} == {"trigger inactive"}
    execute(people, 'CREATE OR ALTER TRIGGER "SUBS$PEOPLE" FOR PEOPLE ACTIVE AFTER INSERT POSITION 32000 AS BEGIN END')
    code, output = check(people)
    assert code == 1 and output.splitlines()[0] == "subscription 1 (PEOPLE I audit): trigger stale"
    assert len(output.splitlines()) == 3
    as_json = Subs(people)("status", "--check", "--json")
    assert as_json.exit_code == 1
    assert json.loads(as_json.stdout) == [
        {
            "sub_id": sub_id,
            "table": "PEOPLE",
            "action": action,
            "tag": "audit",
            "check": "capture",
            "problem": "trigger stale",
        }
        for sub_id, action in ((1, "I"), (2, "U"), (3, "D"))
    ]
    assert "trigger stale" in Subs(people).ok("list")

    assert "its capture trigger had drifted and was made again" in Subs(people).ok("add", "people", "IUD", "audit")
    assert json.loads(Subs(people).ok("status", "--check", "--json")) == []
    assert check(people)[0] == 0
    execute(people, 'CREATE OR ALTER TRIGGER "SUBS$PEOPLE" FOR PEOPLE ACTIVE AFTER INSERT POSITION 32000 AS BEGIN END')
    assert "made the capture trigger of PEOPLE again" in Subs(people).ok("init")  # so does `subs init`
    assert check(people)[0] == 0
    execute(people, "INSERT INTO PEOPLE VALUES (1, 'Ann', 30)")
    assert last_new(people)["NAME"] == "Ann"

    execute(people, 'REVOKE INSERT ON EVENT_LOG FROM TRIGGER "SUBS$PEOPLE"')
    assert check(people)[1].splitlines()[0].endswith(": trigger may not write EVENT_LOG")
    assert "its capture trigger had drifted and was made again" in Subs(people).ok("add", "people", "IUD", "audit")
    assert check(people)[0] == 0

    execute(people, 'DROP TRIGGER "SUBS$PEOPLE"')
    assert check(people)[1].splitlines()[0].endswith(": trigger missing")
    execute(people, "DROP TABLE PEOPLE")
    missing = [f"subscription {i} (PEOPLE {a} audit): table missing" for i, a in ((1, "I"), (2, "U"), (3, "D"))]
    assert check(people) == (1, "\n".join(missing) + "\n")
    execute(people, "CREATE TABLE PEOPLE (ID INTEGER)")
    assert check(people)[1].splitlines()[0].endswith(": table has no primary key: captured with an empty key")
    execute(people, "ALTER TABLE PEOPLE ALTER ID SET NOT NULL", "ALTER TABLE PEOPLE ADD PRIMARY KEY (ID)")
    assert check(people)[0] == 0


def test_ddl_that_skips_database_triggers_shows_as_drift_until_add_repairs_it(people):
    """An attachment without database triggers (isql -nodbtriggers; the owner
    or SYSDBA only) changes the table behind subs's back: the trigger is not
    regenerated, and Firebird refuses to drop a column it reads."""
    runtime.load()
    owner = connect(people.target, user=people.effective_user, password=people.password, no_db_triggers=True)
    try:
        owner.execute_immediate("ALTER TABLE PEOPLE ADD CITY VARCHAR(20)")
        owner.commit()
        owner.execute_immediate("ALTER TABLE PEOPLE DROP AGE")
        with pytest.raises(DatabaseError, match="COLUMN PEOPLE.AGE"):
            owner.commit()
        owner.rollback()
    finally:
        owner.close()
    assert check(people)[1].splitlines()[0] == "subscription 1 (PEOPLE I audit): trigger stale"
    assert "its capture trigger had drifted and was made again" in Subs(people).ok("add", "people", "IUD", "audit")
    execute(people, "INSERT INTO PEOPLE (ID, CITY) VALUES (1, 'Oslo')")
    assert last_new(people) == {"ID": 1, "NAME": None, "AGE": None, "CITY": "Oslo"}


# A writer of its own process: under SuperClassic each process keeps its own
# metadata cache, which must pick up every regenerated trigger.
WRITER_PROCESS = """
import os, sys, time
from firebird.driver import DatabaseError
from subscriptions.db.connection import Database
from subscriptions.db.settings import ConnectionSettings
dsn, user, first, stop = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
end = time.monotonic() + 60
with Database(ConnectionSettings(dsn, user, os.environ.get("ISC_PASSWORD"))) as db:
    row = first
    while time.monotonic() < end and not os.path.exists(stop):
        try:
            with db.transaction() as cursor:
                cursor.execute("INSERT INTO PEOPLE (ID) VALUES (?)", (row,))
                cursor.execute("UPDATE PEOPLE SET ID = ID WHERE ID = ?", (row,))
        except DatabaseError:
            pass
        row += 1
"""


def newest_columns_per_writer(settings) -> dict[bool, list[str]]:
    """The columns of each writer's newest captured row (True: the writer of
    keys from 1,000,000), among the newest events."""
    with Database(settings) as db, db.transaction() as cursor:
        cursor.execute("SELECT FIRST 20 PK_ROW, NEW_ROW FROM EVENT_LOG ORDER BY EVENT_ID DESC")
        rows = cursor.fetchall()
    newest: dict[bool, list[str]] = {}
    for key, new in rows:
        newest.setdefault(decode(key)["ID"] >= 1_000_000, list(decode(read_blob(new))))
    return newest


@pytest.mark.alone
def test_no_change_is_lost_with_writers_in_processes_of_their_own(people, tmp_path):
    """A writer process that reloads the table's metadata while a DDL
    commits can keep the old capture trigger until the next change to it:
    with two busy loops beside this test, a writer captured the dropped
    EMAIL for 30 s (1 run in 5 failed on schema version 12, 3 in 18 on 13,
    4 in about 40 on 14), and a touch of the trigger ended it within 0.1 s. So
    the test settles the trigger after each DDL, as the listener's
    housekeeping does. Alone: its time bounds assume an idle machine."""
    execute(people, "CREATE TABLE WITNESS (ID INTEGER, ACTION CHAR(1))")
    execute(
        people,
        "CREATE TRIGGER WITNESS_PEOPLE FOR PEOPLE AFTER INSERT OR UPDATE POSITION 1 AS BEGIN "
        "INSERT INTO WITNESS VALUES (NEW.ID, IIF(INSERTING, 'I', 'U')); END",
    )
    environment = {**os.environ, "ISC_PASSWORD": people.password or ""}
    # The writers stop when told, once both capture rows without EMAIL: on a
    # busy machine DDL took so long that they had stopped, by a clock of their
    # own, before the last one; and a process's metadata cache can take a
    # while to see a change committed by another (in a run with another test
    # process busy, one writer captured AGE for dozens of transactions after
    # DROP AGE had committed: what it wrote, in the format it still knew).
    stop = tmp_path / "stop"
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER_PROCESS, people.dsn, people.effective_user, str(first), str(stop)],
            env=environment,
        )
        for first in (1, 1_000_000)
    ]
    settler = ChangedTriggerSettler()
    try:
        time.sleep(1)
        with Database(people) as db:
            settler.settle(db)
        for statement in (
            "ALTER TABLE PEOPLE ADD EMAIL VARCHAR(40)",
            "ALTER TABLE PEOPLE DROP AGE",
            "ALTER TABLE PEOPLE ALTER NAME TYPE VARCHAR(80)",
            "ALTER TABLE PEOPLE DROP EMAIL",
        ):
            execute(people, statement)
            time.sleep(1)
            with Database(people) as db:
                assert settler.settle(db) == ["PEOPLE"]
        seen: list[dict[bool, list[str]]] = []

        def both_without_email() -> bool:
            seen.append(newest_columns_per_writer(people))
            return seen[-1] == {False: ["ID", "NAME"], True: ["ID", "NAME"]}

        try:
            wait_until(both_without_email, what="both writers' changes to be captured without EMAIL")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; newest columns per writer: {seen[-1]}") from None
    finally:
        stop.touch()
        for writer in writers:
            assert writer.wait(60) == 0

    witnessed = sorted(query(people, "SELECT ID, ACTION FROM WITNESS"))
    logged = sorted((e["pk"]["ID"], e["action"]) for e in events(people))
    assert len(witnessed) > 100
    assert logged == witnessed
    assert list(events(people)[-1]["new"]) == ["ID", "NAME"]
