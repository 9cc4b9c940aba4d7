"""Schema upgrades on real engines: databases of older versions, with
subscriptions and events logged by older triggers, upgraded by `subs init`."""

from __future__ import annotations

from subscriptions import queries, schema
from subscriptions.capture import row_expression
from subscriptions.claims import Claimer, load_targets
from subscriptions.db import Database
from subscriptions.metadata import load_table

from conftest import Subs, assert_one_line_error, execute, query, queue_index_segments

TABLE = '"Bücher"'
LAST_ERROR_TYPE = """SELECT F.RDB$FIELD_TYPE FROM RDB$RELATION_FIELDS RF
JOIN RDB$FIELDS F ON F.RDB$FIELD_NAME = RF.RDB$FIELD_SOURCE
WHERE RF.RDB$RELATION_NAME = 'EVENT_LOG' AND RF.RDB$FIELD_NAME = 'LAST_ERROR'"""
# The upgrade's temporary column, gone once it has finished.
LAST_ERROR_TEXT_COLUMNS = "SELECT COUNT(*) FROM RDB$RELATION_FIELDS WHERE RDB$FIELD_NAME = 'LAST_ERROR_TEXT'"
# The key columns of EVENT_LOG: width and NOT NULL.
KEY_COLUMNS = """SELECT TRIM(RF.RDB$FIELD_NAME), F.RDB$CHARACTER_LENGTH, COALESCE(RF.RDB$NULL_FLAG, 0)
FROM RDB$RELATION_FIELDS RF JOIN RDB$FIELDS F ON F.RDB$FIELD_NAME = RF.RDB$FIELD_SOURCE
WHERE RF.RDB$RELATION_NAME = 'EVENT_LOG' AND RF.RDB$FIELD_NAME IN ('PK_KEY', 'ROW_KEY')"""
KEYS = "SELECT EVENT_ID, ROW_KEY FROM EVENT_LOG ORDER BY EVENT_ID"
VERSION = "SELECT EVENT_SCHEMA_VERSION() FROM RDB$DATABASE"


def install_version_1(settings) -> None:
    """What subs 0.1 left behind: schema v1, subscriptions I and U of tag rec on
    "Bücher", and its trigger, which logged events without KEY_HASH."""
    with Database(settings) as db:
        schema.upgrade(db, target=1)
    execute(settings, f"CREATE TABLE {TABLE} (ID INTEGER NOT NULL PRIMARY KEY, TITLE VARCHAR(20))")
    execute(settings, "INSERT INTO EVENT_SUBSCRIBER (TABLE_NAME, ACTION, TAG) VALUES ('Bücher', 'I', 'rec')")
    execute(settings, "INSERT INTO EVENT_SUBSCRIBER (TABLE_NAME, ACTION, TAG) VALUES ('Bücher', 'U', 'rec')")
    with Database(settings) as db, db.transaction() as cursor:
        table = load_table(cursor, TABLE)
        key, new = row_expression(table.key_columns, "NEW"), row_expression(table.columns, "NEW")
    execute(
        settings,
        f'CREATE TRIGGER "SUBS$Bücher" FOR {TABLE} ACTIVE AFTER INSERT OR UPDATE POSITION 32000 AS '
        f"BEGIN INSERT INTO EVENT_LOG (SUB_ID, PK_KEY, NEW_VALUES) "
        f"VALUES (IIF(INSERTING, 1, 2), {key}, {new}); POST_EVENT 'subs:rec'; END",
    )
    execute(settings, "GRANT INSERT ON EVENT_LOG TO TRIGGER \"SUBS$Bücher\"")


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
    assert None not in hashes
    assert hashes[0] == hashes[2], "the backfilled event and the new trigger's event of row 1 share a group"
    assert hashes[0] != hashes[1]
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
        assert [e.id for e in Claimer(db, "test:1", 30).claim_head(target, 10)] == [2]


def test_version_4_keeps_last_errors_in_a_blob(empty_settings):
    install_with_two_events(empty_settings, 4)
    execute(empty_settings, "UPDATE EVENT_LOG SET LAST_ERROR = 'SMTP sagt nein: ü', "
                            "NEXT_ATTEMPT_AT = DATEADD(1 HOUR TO LOCALTIMESTAMP) WHERE EVENT_ID = 1")

    subs = Subs(empty_settings)
    assert subs.ok("init").strip() == f"upgraded schema from version 4 to {schema.LATEST}"
    assert query(empty_settings, LAST_ERROR_TYPE) == [(261,)]
    assert query(empty_settings, LAST_ERROR_TEXT_COLUMNS) == [(0,)]
    failed = subs.ok("failed")
    assert "SMTP sagt nein: ü" in failed and '"ID": 1' in failed and '"ID": 2' not in failed

    # A second `subs init` that ran its first step after this one finished adds nothing.
    execute(empty_settings, queries.load("schema_v5")["add_error_text"])
    assert query(empty_settings, LAST_ERROR_TEXT_COLUMNS) == [(0,)]


def test_version_5_keys_move_to_the_narrower_row_key(empty_settings):
    install_with_two_events(empty_settings, 5)

    assert Subs(empty_settings).ok("init").strip() == f"upgraded schema from version 5 to {schema.LATEST}"
    assert query(empty_settings, KEY_COLUMNS) == [("ROW_KEY", 1000, 1)]
    # The regenerated trigger logs into ROW_KEY.
    execute(empty_settings, f"UPDATE {TABLE} SET TITLE = 'Dune!' WHERE ID = 1")
    assert query(empty_settings, KEYS) == [(1, "2:IDi1:1"), (2, "2:IDi1:2"), (3, "2:IDi1:1")]


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

    assert_one_line_error(Subs(empty_settings)("init"), "primary key of LONG_KEY can be longer than 1000", "subs remove")
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

        assert_one_line_error(Subs(empty_settings)("init"), "began before this upgrade and is still open",
                              "run `subs init` again")
        assert query(empty_settings, VERSION) == [(6,)]
        application.connection.commit()

    assert Subs(empty_settings).ok("init").strip() == f"upgraded schema from version 6 to {schema.LATEST}"
    assert query(empty_settings, KEYS) == [(1, "2:IDi1:1"), (2, "2:IDi1:2"), (3, "2:IDi1:3")]
