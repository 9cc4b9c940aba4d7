"""Schema upgrades on real engines: databases of older versions, with
subscriptions and events logged by older triggers, upgraded by `subs init`."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from subscriptions.capture.values import decode
from subscriptions.db import sql as queries
from subscriptions.db.connection import Database, read_text
from subscriptions.delivery.claims import Claimer, load_targets
from subscriptions.schema import upgrade as schema

from conftest import Subs, another_database, assert_one_line_error, events, execute, query, queue_index_segments

TABLE = '"Bücher"'
LAST_ERROR_TYPE = """SELECT F.RDB$FIELD_TYPE FROM RDB$RELATION_FIELDS RF
JOIN RDB$FIELDS F ON F.RDB$FIELD_NAME = RF.RDB$FIELD_SOURCE
WHERE RF.RDB$RELATION_NAME = 'EVENT_LOG' AND RF.RDB$FIELD_NAME = 'LAST_ERROR'"""
# The upgrade's temporary column, gone once it has finished.
LAST_ERROR_TEXT_COLUMNS = "SELECT COUNT(*) FROM RDB$RELATION_FIELDS WHERE RDB$FIELD_NAME = 'LAST_ERROR_TEXT'"
# The key columns of EVENT_LOG: width and NOT NULL.
KEY_COLUMNS = """SELECT TRIM(RF.RDB$FIELD_NAME), F.RDB$CHARACTER_LENGTH, COALESCE(RF.RDB$NULL_FLAG, 0)
FROM RDB$RELATION_FIELDS RF JOIN RDB$FIELDS F ON F.RDB$FIELD_NAME = RF.RDB$FIELD_SOURCE
WHERE RF.RDB$RELATION_NAME = 'EVENT_LOG' AND RF.RDB$FIELD_NAME IN ('PK_KEY', 'ROW_KEY', 'PK_ROW')"""
KEYS = "SELECT EVENT_ID, PK_ROW FROM EVENT_LOG ORDER BY EVENT_ID"
# What the version 1 trigger of "Bücher" (ID INTEGER, TITLE VARCHAR(20))
# captured: the text format of versions up to 7.
V1_KEY = """'2:ID' || IIF(NEW."ID" IS NULL, 'n', 'i' || CHAR_LENGTH(CAST(NEW."ID" AS VARCHAR(42) CHARACTER SET UTF8))
    || ':' || CAST(NEW."ID" AS VARCHAR(42) CHARACTER SET UTF8))"""
V1_VALUES = (
    V1_KEY
    + """ || '5:TITLE' || IIF(NEW."TITLE" IS NULL, 'n', 's'
    || CHAR_LENGTH(CAST(NEW."TITLE" AS VARCHAR(20) CHARACTER SET UTF8))
    || ':' || CAST(NEW."TITLE" AS VARCHAR(20) CHARACTER SET UTF8))"""
)


def decoded_keys(settings) -> list[tuple[int, dict]]:
    return [(event_id, decode(key)) for event_id, key in query(settings, KEYS)]


VERSION = "SELECT EVENT_SCHEMA_VERSION() FROM RDB$DATABASE"


def install_version_1(settings) -> None:
    """What subs 0.1 left behind: schema v1, subscriptions I and U of tag rec on
    "Bücher", and its trigger, which logged events without KEY_HASH."""
    with Database(settings) as db:
        schema.upgrade(db, target=1)
    execute(settings, f"CREATE TABLE {TABLE} (ID INTEGER NOT NULL PRIMARY KEY, TITLE VARCHAR(20))")
    execute(settings, "INSERT INTO EVENT_SUBSCRIBER (TABLE_NAME, ACTION, TAG) VALUES ('Bücher', 'I', 'rec')")
    execute(settings, "INSERT INTO EVENT_SUBSCRIBER (TABLE_NAME, ACTION, TAG) VALUES ('Bücher', 'U', 'rec')")
    execute(
        settings,
        f'CREATE TRIGGER "SUBS$Bücher" FOR {TABLE} ACTIVE AFTER INSERT OR UPDATE POSITION 32000 AS '
        f"BEGIN INSERT INTO EVENT_LOG (SUB_ID, PK_KEY, NEW_VALUES) "
        f"VALUES (IIF(INSERTING, 1, 2), {V1_KEY}, {V1_VALUES}); POST_EVENT 'subs:rec'; END",
    )
    execute(settings, 'GRANT INSERT ON EVENT_LOG TO TRIGGER "SUBS$Bücher"')


def test_version_1_is_upgraded_with_its_triggers_and_events(empty_settings):
    install_version_1(empty_settings)
    execute(empty_settings, f"INSERT INTO {TABLE} VALUES (1, 'Dune')")
    execute(empty_settings, f"INSERT INTO {TABLE} VALUES (2, 'Emma')")
    subs = Subs(empty_settings)
    assert_needs_upgrade = subs("list")
    assert assert_needs_upgrade.exit_code == 1 and "run `subs init` to upgrade" in assert_needs_upgrade.output

    assert subs.ok("init").strip() == f"upgraded schema from version 1 to {schema.LATEST}"
    assert subs.ok("init").strip() == f"schema is up to date (version {schema.LATEST})"

    execute(empty_settings, f"UPDATE {TABLE} SET TITLE = 'Dune!' WHERE ID = 1")
    rows = query(empty_settings, "SELECT EVENT_ID, SUB_ID, KEY_HASH FROM EVENT_LOG ORDER BY EVENT_ID")
    assert [(event_id, sub_id) for event_id, sub_id, _ in rows] == [(1, 1), (2, 1), (3, 2)]
    hashes = [key_hash for *_, key_hash in rows]
    assert None not in hashes and hashes[0] != hashes[1]
    # Captured rows became bytes in version 8: the old text ones still decode.
    assert decoded_keys(empty_settings) == [(1, {"ID": 1}), (2, {"ID": 2}), (3, {"ID": 1})]
    assert "rec" in subs.ok("list")


def install_with_two_events(settings, version: int) -> None:
    """install_version_1 upgraded to ``version``, then two rows inserted (events 1 and 2)."""
    install_version_1(settings)
    with Database(settings) as db:
        schema.upgrade(db, target=version)
    execute(settings, f"INSERT INTO {TABLE} VALUES (1, 'Dune')")
    execute(settings, f"INSERT INTO {TABLE} VALUES (2, 'Emma')")


def test_version_2_dead_events_move_out_of_the_claim_index(empty_settings):
    install_with_two_events(empty_settings, 2)
    execute(empty_settings, "UPDATE EVENT_LOG SET DEAD_AT = LOCALTIMESTAMP WHERE EVENT_ID = 1")

    assert Subs(empty_settings).ok("init").strip() == f"upgraded schema from version 2 to {schema.LATEST}"
    assert query(empty_settings, "SELECT EVENT_ID, DEAD FROM EVENT_LOG ORDER BY EVENT_ID") == [(1, True), (2, False)]
    assert queue_index_segments(empty_settings) == ["SUB_ID", "DEAD", "EVENT_ID"]
    with Database(empty_settings) as db:
        (target, *_) = load_targets(db)
        assert [e.id for e in Claimer(db, "test:1", 30).claim_head([target], 10)] == [2]


def test_version_4_keeps_last_errors_in_a_blob(empty_settings):
    install_with_two_events(empty_settings, 4)
    execute(
        empty_settings,
        "UPDATE EVENT_LOG SET LAST_ERROR = 'SMTP sagt nein: ü', "
        "NEXT_ATTEMPT_AT = DATEADD(1 HOUR TO LOCALTIMESTAMP) WHERE EVENT_ID = 1",
    )

    subs = Subs(empty_settings)
    assert subs.ok("init").strip() == f"upgraded schema from version 4 to {schema.LATEST}"
    assert query(empty_settings, LAST_ERROR_TYPE) == [(261,)]
    assert query(empty_settings, LAST_ERROR_TEXT_COLUMNS) == [(0,)]
    failed = subs.ok("failed")
    assert "SMTP sagt nein: ü" in failed and '"ID": 1' in failed and '"ID": 2' not in failed

    # A second `subs init` that ran its first step after this one finished adds nothing.
    execute(empty_settings, queries.load("migrations/v5")["before/add_error_text"])
    assert query(empty_settings, LAST_ERROR_TEXT_COLUMNS) == [(0,)]


def test_version_5_keys_move_to_the_narrower_row_key(empty_settings):
    install_with_two_events(empty_settings, 5)

    assert Subs(empty_settings).ok("init").strip() == f"upgraded schema from version 5 to {schema.LATEST}"
    assert query(empty_settings, KEY_COLUMNS) == [("PK_ROW", 1000, 1)]
    # The regenerated trigger logs into PK_ROW.
    execute(empty_settings, f"UPDATE {TABLE} SET TITLE = 'Dune!' WHERE ID = 1")
    assert decoded_keys(empty_settings) == [(1, {"ID": 1}), (2, {"ID": 2}), (3, {"ID": 1})]
    assert query(empty_settings, "SELECT NEW_ROW FROM EVENT_LOG WHERE EVENT_ID = 3")[0][0].startswith(b"~")


def test_version_5_with_a_longer_key_logged_is_not_upgraded(empty_settings):
    install_with_two_events(empty_settings, 5)
    execute(empty_settings, "UPDATE EVENT_LOG SET PK_KEY = ? WHERE EVENT_ID = 2", params=("k" * 1001,))

    error = assert_one_line_error(Subs(empty_settings)("init"), "1 event(s) in EVENT_LOG have a key longer than 1000")
    assert "subs init" in error
    assert query(empty_settings, VERSION) == [(5,)]
    assert query(empty_settings, KEY_COLUMNS) == [("PK_KEY", 4000, 1)]


def test_version_5_with_a_table_whose_key_can_be_longer_is_not_upgraded(empty_settings):
    with Database(empty_settings) as db:
        schema.upgrade(db, target=5)
    execute(empty_settings, "CREATE TABLE LONG_KEY (K VARCHAR(1000) CHARACTER SET WIN1252 NOT NULL PRIMARY KEY)")
    execute(empty_settings, "INSERT INTO EVENT_SUBSCRIBER (TABLE_NAME, ACTION, TAG) VALUES ('LONG_KEY', 'I', 'x')")

    assert_one_line_error(
        Subs(empty_settings)("init"), "primary key of LONG_KEY can be longer than 1000", "subs remove"
    )
    assert query(empty_settings, VERSION) == [(5,)]
    assert query(empty_settings, KEY_COLUMNS) == [("PK_KEY", 4000, 1)]


def test_upgrade_waits_for_a_transaction_that_logged_the_old_way(empty_settings, monkeypatch):
    """An application transaction that logged an event through the version 5
    trigger and is still open holds up version 7, which would otherwise drop
    the column its event's key is in."""
    install_with_two_events(empty_settings, 5)
    monkeypatch.setattr(schema, "OLDER_TRANSACTIONS_WAIT", 1.0)
    with Database(empty_settings) as application:
        application.connection.begin()
        with application.connection.cursor() as cursor:
            cursor.execute(f"INSERT INTO {TABLE} VALUES (3, 'Ulysses')")

        assert_one_line_error(
            Subs(empty_settings)("init"), "began before this upgrade and is still open", "run `subs init` again"
        )
        assert query(empty_settings, VERSION) == [(6,)]
        application.connection.commit()

    assert Subs(empty_settings).ok("init").strip() == f"upgraded schema from version 6 to {schema.LATEST}"
    assert decoded_keys(empty_settings) == [(1, {"ID": 1}), (2, {"ID": 2}), (3, {"ID": 3})]


# What `subs init` leaves in the system tables, in a form two databases can be
# compared by: positions and generated names (RDB$n) left out, texts trimmed.
CATALOGUE = {
    "tables": """SELECT TRIM(RDB$RELATION_NAME), RDB$RELATION_TYPE FROM RDB$RELATIONS
                 WHERE COALESCE(RDB$SYSTEM_FLAG, 0) = 0""",
    "columns": """SELECT TRIM(RF.RDB$RELATION_NAME), TRIM(RF.RDB$FIELD_NAME), F.RDB$FIELD_TYPE,
                         COALESCE(F.RDB$FIELD_SUB_TYPE, 0), F.RDB$FIELD_LENGTH, COALESCE(F.RDB$FIELD_SCALE, 0),
                         F.RDB$CHARACTER_LENGTH, COALESCE(F.RDB$CHARACTER_SET_ID, 0),
                         COALESCE(RF.RDB$NULL_FLAG, F.RDB$NULL_FLAG, 0), RF.RDB$IDENTITY_TYPE,
                         TRIM(CAST(COALESCE(RF.RDB$DEFAULT_SOURCE, F.RDB$DEFAULT_SOURCE) AS VARCHAR(200)))
                  FROM RDB$RELATION_FIELDS RF JOIN RDB$FIELDS F ON F.RDB$FIELD_NAME = RF.RDB$FIELD_SOURCE
                  WHERE COALESCE(RF.RDB$SYSTEM_FLAG, 0) = 0""",
    "indexes": """SELECT TRIM(I.RDB$INDEX_NAME), TRIM(I.RDB$RELATION_NAME), COALESCE(I.RDB$UNIQUE_FLAG, 0),
                         COALESCE(I.RDB$INDEX_INACTIVE, 0), S.RDB$FIELD_POSITION, TRIM(S.RDB$FIELD_NAME)
                  FROM RDB$INDICES I JOIN RDB$INDEX_SEGMENTS S ON S.RDB$INDEX_NAME = I.RDB$INDEX_NAME
                  WHERE COALESCE(I.RDB$SYSTEM_FLAG, 0) = 0""",
    "constraints": """SELECT TRIM(RDB$CONSTRAINT_NAME), TRIM(RDB$CONSTRAINT_TYPE), TRIM(RDB$RELATION_NAME),
                             TRIM(RDB$INDEX_NAME) FROM RDB$RELATION_CONSTRAINTS""",
    "procedures": """SELECT TRIM(RDB$PROCEDURE_NAME), RDB$PROCEDURE_SOURCE
                     FROM RDB$PROCEDURES WHERE COALESCE(RDB$SYSTEM_FLAG, 0) = 0""",
    "functions": """SELECT TRIM(RDB$FUNCTION_NAME), RDB$FUNCTION_SOURCE
                    FROM RDB$FUNCTIONS WHERE COALESCE(RDB$SYSTEM_FLAG, 0) = 0""",
    "triggers": """SELECT TRIM(RDB$TRIGGER_NAME), TRIM(RDB$RELATION_NAME), RDB$TRIGGER_TYPE, RDB$TRIGGER_SEQUENCE,
                          COALESCE(RDB$TRIGGER_INACTIVE, 0), RDB$TRIGGER_SOURCE
                   FROM RDB$TRIGGERS WHERE COALESCE(RDB$SYSTEM_FLAG, 0) = 0
                     AND RDB$TRIGGER_NAME NOT STARTING WITH 'CHECK_'""",
    "check constraints": """SELECT TRIM(C.RDB$CONSTRAINT_NAME), T.RDB$TRIGGER_SOURCE
                            FROM RDB$CHECK_CONSTRAINTS C
                            JOIN RDB$TRIGGERS T ON T.RDB$TRIGGER_NAME = C.RDB$TRIGGER_NAME""",
    "generators": """SELECT TRIM(RDB$GENERATOR_NAME) FROM RDB$GENERATORS WHERE COALESCE(RDB$SYSTEM_FLAG, 0) = 0""",
    "grants": """SELECT TRIM(RDB$USER), RDB$USER_TYPE, TRIM(RDB$RELATION_NAME), TRIM(RDB$PRIVILEGE)
                 FROM RDB$USER_PRIVILEGES WHERE RDB$RELATION_NAME IN ('EVENT_LOG', 'EVENT_SUBSCRIBER', 'EVENT_LEASE')
                   AND RDB$USER <> 'SYSDBA'""",
}


# Names the engine makes up (INTEG_12, RDB$PRIMARY3) depend on creation order.
GENERATED_NAME = re.compile(r"^(INTEG_|RDB\$PRIMARY|RDB\$FOREIGN|RDB\$INDEX_|RDB\$)\d+$")


def catalogue(settings) -> dict[str, list[tuple]]:
    def clean(value: object) -> object:
        text = value if isinstance(value, str) else read_text(value) if hasattr(value, "read") else None
        if text is None:
            return value
        return GENERATED_NAME.sub(r"\1#", " ".join(text.split()))

    with Database(settings) as db, db.transaction() as cursor:
        found = {}
        for name, statement in CATALOGUE.items():
            cursor.execute(statement)
            found[name] = sorted((tuple(map(clean, row)) for row in cursor.fetchall()), key=repr)
        return found


def test_version_13_upgraded_follows_the_application_s_ddl_at_its_commit(empty_settings):
    """Version 13 regenerated the capture trigger at the DDL statement: an
    attachment made before the migration committed failed its writes
    ("column ISBN is not defined"). Upgraded, it writes and is captured."""
    install_version_1(empty_settings)
    with Database(empty_settings) as db:
        schema.upgrade(db, target=13)
    assert Subs(empty_settings).ok("init").strip() == f"upgraded schema from version 13 to {schema.LATEST}"
    with Database(empty_settings) as migration:
        migration.connection.begin()
        migration.connection.cursor().execute(f"ALTER TABLE {TABLE} ADD ISBN VARCHAR(20)")
        execute(empty_settings, f"INSERT INTO {TABLE} (ID, TITLE) VALUES (1, 'Dune')")
        migration.connection.commit()
    execute(empty_settings, f"INSERT INTO {TABLE} VALUES (2, 'Emma', '978-0')")
    assert [e["new"] for e in events(empty_settings)] == [
        {"ID": 1, "TITLE": "Dune"},
        {"ID": 2, "TITLE": "Emma", "ISBN": "978-0"},
    ]


# An application process on one attachment: runs each line it reads as a
# statement in a transaction of its own, and says how the commit went.
APPLICATION = """
import os, sys
from subscriptions.db.connection import Database
from subscriptions.db.settings import ConnectionSettings
with Database(ConnectionSettings(sys.argv[1], sys.argv[2], os.environ.get("ISC_PASSWORD"))) as db:
    for line in sys.stdin:
        try:
            with db.transaction() as cursor:
                cursor.execute(line)
            print("committed", flush=True)
        except Exception as exc:
            print(str(exc).splitlines()[-1], flush=True)
"""


class Application:
    """APPLICATION in a process of its own, attached until ``close``."""

    def __init__(self, settings) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", APPLICATION, settings.dsn, settings.effective_user],
            env={**os.environ, "ISC_PASSWORD": settings.password or ""},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def run(self, statement: str) -> str:
        assert self.process.stdin and self.process.stdout
        self.process.stdin.write(statement + "\n")
        self.process.stdin.flush()
        return self.process.stdout.readline().strip()

    def close(self) -> None:
        assert self.process.stdin
        self.process.stdin.close()
        self.process.wait(30)


@pytest.mark.parametrize("install_ends", ["rollback", "commit"])
def test_an_application_attached_while_subs_is_installed_goes_on_committing(empty_settings, install_ends):
    """An attachment loads the database's triggers once, when it attaches;
    one made while `subs init` installs them commits as before, whether the
    install then commits or rolls back. (The commit trigger names subs's
    tables only in dynamic statements: when it named EVENT_SUBSCRIBER, the
    second of two `subs init` at once, attached while the first committed,
    failed to commit with "column TABLE_NAME is not defined in table
    EVENT_SUBSCRIBER". This test does not hit that moment.)"""
    with Database(empty_settings) as install:
        install.connection.begin()
        cursor = install.connection.cursor()
        for statement in schema.fresh_install().values():
            cursor.execute(statement)
        application = Application(empty_settings)
        try:
            commits = [application.run("SELECT 1 FROM RDB$DATABASE")]
            getattr(install.connection, install_ends)()
            commits.append(application.run("SELECT 1 FROM RDB$DATABASE"))
        finally:
            application.close()
    assert commits == ["committed", "committed"]


def test_an_application_attached_across_the_last_upgrade_writes_and_migrates(empty_settings):
    """The last migration changes triggers every attachment loaded when it
    attached (version 17: the commit trigger): one attached before `subs
    init` goes on writing, and its own DDL is followed, with what it loaded."""
    install_version_1(empty_settings)
    with Database(empty_settings) as db:
        schema.upgrade(db, target=schema.LATEST - 1)
    application = Application(empty_settings)
    try:
        commits = [application.run(f"INSERT INTO {TABLE} (ID, TITLE) VALUES (1, 'Dune')")]
        Subs(empty_settings).ok("init")
        commits += [
            application.run(f"INSERT INTO {TABLE} (ID, TITLE) VALUES (2, 'Emma')"),
            application.run(f"ALTER TABLE {TABLE} ADD ISBN VARCHAR(20)"),
            application.run(f"INSERT INTO {TABLE} VALUES (3, 'Ulysses', '978-0')"),
        ]
    finally:
        application.close()
    assert commits == ["committed"] * 4
    assert [e["new"] for e in events(empty_settings)][-3:] == [
        {"ID": 1, "TITLE": "Dune"},
        {"ID": 2, "TITLE": "Emma"},
        {"ID": 3, "TITLE": "Ulysses", "ISBN": "978-0"},
    ]


def test_an_upgraded_database_has_the_system_tables_of_a_fresh_install(empty_settings):
    """Version 1 with a subscribed table, brought up by the frozen migrations
    and `subs init`'s trigger refresh, ends where a fresh install of the
    current schema plus the same `subs add` ends."""
    install_version_1(empty_settings)
    Subs(empty_settings).ok("init")

    fresh_settings = another_database(empty_settings)
    subs = Subs(fresh_settings)
    subs.ok("init")
    execute(fresh_settings, f"CREATE TABLE {TABLE} (ID INTEGER NOT NULL PRIMARY KEY, TITLE VARCHAR(20))")
    subs.ok("add", TABLE, "IU", "rec")

    upgraded, installed = catalogue(empty_settings), catalogue(fresh_settings)
    assert upgraded["triggers"], "the subscribed table's trigger is compared too"
    for name in CATALOGUE:
        assert upgraded[name] == installed[name], name


def test_version_23_moves_stored_lease_and_retry_times_to_its_clock(empty_settings, engine):
    """Version 23 runs leases and retry times on EVENT_NOW(), UTC on Firebird
    4 and later, where they were the wall time of subs's zone: the times
    stored before move with them (a lease taken in +05:00 would otherwise
    look held for 5 hours more, and a retry wait as long)."""
    with Database(empty_settings) as db:
        schema.upgrade(db, target=22)
    if engine != "fb3":
        execute(
            empty_settings,
            "CREATE OR ALTER FUNCTION EVENT_TIME_ZONE RETURNS VARCHAR(63) CHARACTER SET UTF8 "
            "AS BEGIN RETURN '+05:00'; END",
        )
    execute(
        empty_settings,
        "INSERT INTO EVENT_SUBSCRIBER (TABLE_NAME, ACTION, TAG) VALUES ('T', 'I', 'rec')",
        "INSERT INTO EVENT_LOG (SUB_ID, PK_ROW, NEXT_ATTEMPT_AT) VALUES (1, '', DATEADD(60 SECOND TO LOCALTIMESTAMP))",
        "INSERT INTO EVENT_LEASE (SUB_ID, HOLDER, EXPIRES_AT) VALUES (1, 'a:1', DATEADD(30 SECOND TO LOCALTIMESTAMP))",
        "INSERT INTO EVENT_SPAN (SPAN_ID, SUB_ID, FIRST_EVENT, LAST_EVENT, HOLDER, EXPIRES_AT) "
        "VALUES (1, 1, 1, 1, 'a:1', DATEADD(30 SECOND TO LOCALTIMESTAMP))",
    )
    assert Subs(empty_settings).ok("init").strip() == f"upgraded schema from version 22 to {schema.LATEST}"
    left = query(
        empty_settings,
        "SELECT DATEDIFF(SECOND FROM EVENT_NOW() TO EXPIRES_AT) FROM EVENT_LEASE "
        "UNION ALL SELECT DATEDIFF(SECOND FROM EVENT_NOW() TO EXPIRES_AT) FROM EVENT_SPAN "
        "UNION ALL SELECT DATEDIFF(SECOND FROM EVENT_NOW() TO NEXT_ATTEMPT_AT) FROM EVENT_LOG",
    )
    (lease,), (span,), (retry,) = left
    assert 0 < lease <= 30 and 0 < span <= 30 and 30 < retry <= 60, left
