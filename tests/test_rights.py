"""Rights: an application user holding only its own table rights writes to
subscribed tables and migrates its own tables; a listener runs as a user of
its own with what `subs grant` gives it. On the Firebird 3 server the users
are real (CREATE USER); the embedded engine takes the user name as given."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pytest
from firebird.driver import DatabaseError

from subscriptions.capture.trigger_sync import ChangedTriggerSettler
from subscriptions.db import sql
from subscriptions.db.connection import Database
from subscriptions.schema.upgrade import upgrade
from subscriptions.schema.version import LATEST

from conftest import Subs, another_database, assert_one_line_error, events, execute, query
from listening import Listener, handled, insert, remaining
from webconsole import Console


def test_an_application_user_with_table_rights_only_writes_and_is_captured(settings, make_user):
    app = make_user("app")
    execute(settings, "CREATE TABLE ORDERS (ID INTEGER NOT NULL PRIMARY KEY, NOTE VARCHAR(10))")
    execute(settings, f"GRANT SELECT, INSERT, UPDATE, DELETE ON ORDERS TO USER {app.user}")
    Subs(settings).ok("add", "orders", "IUD", "audit")

    execute(app, "INSERT INTO ORDERS VALUES (1, 'a')", "UPDATE ORDERS SET NOTE = 'b'", "DELETE FROM ORDERS")
    assert [e["action"] for e in events(settings)] == ["I", "U", "D"]
    with pytest.raises(DatabaseError, match="no permission"):
        query(app, "SELECT COUNT(*) FROM EVENT_LOG")


def test_a_when_condition_reading_other_tables_carries_its_own_rights(settings, make_user):
    """The condition reads tables (its own among them) and calls a function
    the writer may not use: the trigger is granted them, and the writer's
    inserts succeed."""
    app = make_user("app")
    execute(
        settings,
        "CREATE TABLE CUSTOMERS (ID INTEGER NOT NULL PRIMARY KEY, VIP BOOLEAN)",
        "CREATE TABLE ORDERS (ID INTEGER NOT NULL PRIMARY KEY, CUSTOMER INTEGER)",
        "CREATE FUNCTION IS_BIG (N INTEGER) RETURNS BOOLEAN AS BEGIN RETURN N > 100; END",
    )
    execute(settings, "INSERT INTO CUSTOMERS VALUES (1, TRUE)", f"GRANT INSERT ON ORDERS TO USER {app.user}")
    condition = (
        "EXISTS (SELECT 1 FROM CUSTOMERS C WHERE C.ID = NEW.CUSTOMER AND C.VIP) OR IS_BIG(NEW.ID) "
        "OR NOT EXISTS (SELECT 1 FROM ORDERS O WHERE O.ID < NEW.ID)"
    )
    Subs(settings).ok("add", "orders", "I", "vip", "--when", condition)

    execute(
        app,
        "INSERT INTO ORDERS VALUES (1, 1)",
        "INSERT INTO ORDERS VALUES (2, 2)",
        "INSERT INTO ORDERS VALUES (101, 2)",
    )
    assert [e["pk"]["ID"] for e in events(settings)] == [1, 101]
    assert query(settings, "SELECT COUNT(*) FROM EVENT_LOG WHERE DEAD") == [(0,)]
    with pytest.raises(DatabaseError, match="no permission"):
        query(app, "SELECT COUNT(*) FROM CUSTOMERS")

    # A right the trigger lost is drift, and `subs add` gives it back.
    execute(settings, "REVOKE SELECT ON CUSTOMERS FROM TRIGGER SUBS$ORDERS")
    check = Subs(settings)("status", "--check")
    assert check.exit_code == 1 and "trigger may not use CUSTOMERS" in check.stdout
    assert "was made again" in Subs(settings).ok("add", "orders", "I", "vip", "--when", condition)
    execute(app, "INSERT INTO ORDERS VALUES (3, 1)")
    assert Subs(settings)("status", "--check").exit_code == 0


def test_an_application_user_migrates_its_own_subscribed_table(settings, make_user):
    app = make_user("app")
    execute(settings, f"GRANT CREATE TABLE TO USER {app.user}")
    execute(app, "CREATE TABLE APP_ITEMS (ID INTEGER NOT NULL PRIMARY KEY, NOTE VARCHAR(10))")
    Subs(settings).ok("add", "app_items", "IU", "audit")

    execute(app, "ALTER TABLE APP_ITEMS ADD EMAIL VARCHAR(40)", "ALTER TABLE APP_ITEMS DROP NOTE")
    execute(app, "ALTER TABLE APP_ITEMS ALTER EMAIL TYPE VARCHAR(80)")
    execute(app, "INSERT INTO APP_ITEMS VALUES (1, 'a@example.com')")
    assert events(settings)[-1]["new"] == {"ID": 1, "EMAIL": "a@example.com"}
    assert Subs(settings)("status", "--check").exit_code == 0
    # subs's own refusal reaches a user other than subs's.
    with pytest.raises(DatabaseError, match="Firebird cannot rename its columns under a trigger"):
        execute(app, "ALTER TABLE APP_ITEMS ALTER EMAIL TO MAIL")


def test_a_listener_runs_as_its_own_user_with_the_granted_rights(items, make_user, tmp_path, listeners):
    listener_user = make_user("listener")
    insert(items, 1, 3)

    refused = Subs(listener_user)("listen", "--drain")
    assert_one_line_error(
        refused,
        f"user {listener_user.user!r} has no rights on subs's tables in {items.dsn} (no permission for EXECUTE",
        f"as their owner, give it a listener's rights with `subs grant {listener_user.user}`, or give them to a "
        "role it connects with (`subs grant --to-role ROLE`, then --role ROLE)",
    )

    assert f"granted {listener_user.user}" in Subs(items).ok("grant", listener_user.user.lower())
    listener = Listener(listener_user, tmp_path, "--drain")
    listeners.append(listener)
    assert listener.finish() == 0, listener.output()
    assert len(handled(listener.lines())) == 3 and remaining(items) == 0
    assert "this user sees only its own user's listeners in MON$: one of another user" in listener.output()


def test_a_user_who_sees_only_its_own_attachments_is_told_so(items, make_user, tmp_path, listeners, engine):
    """MON$ shows a user other than SYSDBA, the owner and RDB$ADMIN only the
    attachments of its own user: to a monitoring user of its own, `status
    --check --max-lag` said "no listener takes tag rec" while the owner's
    listener took it, and `status` and the console showed no listener. They
    now say what they cannot see. On Firebird 4 and later a role with
    MONITOR_ANY_ATTACHMENT sees every attachment."""
    viewer = make_user("viewer")
    Subs(items).ok("grant", viewer.user)
    insert(items, 1, 1, "hang")  # its handler hangs: the event stays live
    listener = Listener(items, tmp_path)
    listeners.append(listener)
    listener.wait_for(lambda lines: any(line["phase"] == "start" for line in lines))
    time.sleep(1.1)
    assert "listening: ordered" in Subs(items)("status", "--check", "--max-lag", "1").output
    assert "note:" not in Subs(items).ok("status")

    limited = Subs(viewer)("status", "--check", "--max-lag", "1")
    assert limited.exit_code == 1 and limited.output.endswith("; no listener of this user takes tag rec\n")
    assert "\nnote: this user sees only its own user's attachments in MON$, so listeners and running" in (
        Subs(viewer).ok("status")
    )
    console = Console(viewer, tmp_path)
    try:
        assert 'id="partial-view">Note: this user sees only its own' in console.get_text("/figures")
    finally:
        console.stop()

    if engine == "fb3":
        return  # no system privileges
    execute(items, "CREATE ROLE SUBS_MONITOR SET SYSTEM PRIVILEGES TO MONITOR_ANY_ATTACHMENT")
    execute(items, f"GRANT DEFAULT SUBS_MONITOR TO USER {viewer.user}")
    assert "listening: ordered" in Subs(viewer)("status", "--check", "--max-lag", "1").output
    assert "note:" not in Subs(viewer).ok("status")


def test_a_command_refused_a_right_says_who_may_run_it(items, make_user, tmp_path):
    """A user with a listener's rights only (`subs grant`) that changed
    subscriptions was told `Error: database error: no permission for UPDATE
    access to TABLE EVENT_SUBSCRIBER`, and the console answered 503 "Not
    available now"; both now say it lacks a right and who has it."""
    execute(items, "CREATE TABLE OTHER (ID INTEGER NOT NULL PRIMARY KEY)")
    viewer = make_user("viewer")
    Subs(items).ok("grant", viewer.user)
    before = query(items, "SELECT SUB_ID, ACTIVE, PAUSED FROM EVENT_SUBSCRIBER ORDER BY SUB_ID")
    for command, refused in (
        (("pause", "items", "I", "rec"), "UPDATE access to TABLE EVENT_SUBSCRIBER"),
        (("add", "other", "I", "rec"), "INSERT access to TABLE EVENT_SUBSCRIBER"),
        (("remove", "items", "IUD", "rec"), "UPDATE access to TABLE EVENT_BACKFILL"),
    ):
        assert_one_line_error(
            Subs(viewer)(*command),
            f"Error: user {viewer.user!r} lacks a right this needs (no permission for {refused}",
            "run it as the user that owns subs's tables (the one that ran `subs init`) or SYSDBA",
        )
    assert query(items, "SELECT SUB_ID, ACTIVE, PAUSED FROM EVENT_SUBSCRIBER ORDER BY SUB_ID") == before
    console = Console(viewer, tmp_path)
    try:
        status, _, body = console.request("POST", "/api/subscriptions/1/pause")
    finally:
        console.stop()
    assert status == 403 and f"user {viewer.user!r} lacks a right this needs" in body.decode(), (status, body)
    assert query(items, "SELECT SUB_ID, ACTIVE, PAUSED FROM EVENT_SUBSCRIBER ORDER BY SUB_ID") == before


def test_a_listener_without_alter_rights_warns_once_that_it_cannot_settle_triggers(items, make_user, caplog):
    listener_user = make_user("listener")
    Subs(items).ok("grant", listener_user.user)
    settler = ChangedTriggerSettler()
    with Database(listener_user) as db:
        settler.settle(db)
        execute(items, "ALTER TABLE ITEMS ADD EMAIL VARCHAR(40)")
        assert settler.settle(db) == []
        execute(items, "ALTER TABLE ITEMS DROP EMAIL")
        assert settler.settle(db) == []
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "cannot settle capture triggers" in warnings[0], warnings
    assert "grant this user ALTER ANY TABLE" in warnings[0]


def test_a_listener_takes_its_rights_from_a_role_it_connects_with(items, make_user, tmp_path, listeners):
    """Granting to roles is how many shops give rights; on Firebird 3 a role's
    rights count only for an attachment that names it."""
    listener_user = make_user("listener")
    execute(items, "CREATE ROLE SUBS_LISTENERS")
    execute(items, f"GRANT SUBS_LISTENERS TO USER {listener_user.user}")
    in_role = replace(listener_user, role="SUBS_LISTENERS")
    insert(items, 1, 3)
    assert_one_line_error(Subs(in_role)("listen", "--drain"), "has no rights on subs's tables")

    assert Subs(items).ok("grant", "--to-role", "subs_listeners") == (
        "granted role SUBS_LISTENERS what `subs listen` needs\n"
    )
    listener = Listener(in_role, tmp_path, "--drain")
    listeners.append(listener)
    assert listener.finish() == 0, listener.output()
    assert len(handled(listener.lines())) == 3 and remaining(items) == 0
    assert_one_line_error(Subs(listener_user)("listen", "--drain"), "has no rights on subs's tables")


def test_a_role_the_user_does_not_have_is_a_one_line_error(items, make_user, tmp_path):
    """The engine attaches with no role at all, silently, when the role named
    does not exist or is not the user's: without the check the listener
    failed later on a missing right that the role would have given."""
    listener_user = make_user("listener")
    execute(items, "CREATE ROLE SUBS_LISTENERS")
    Subs(items).ok("grant", "--to-role", "SUBS_LISTENERS")
    for role in ("SUBS_LISTENERS", "NO_SUCH_ROLE"):
        result = Subs(replace(listener_user, role=role))("status")
        assert_one_line_error(
            result,
            f"user {listener_user.user!r} has no role {role!r}",
            f"GRANT it TO USER {listener_user.user} (as its owner), or leave out --role/SUBS_ROLE",
        )
    config = tmp_path / "subs.toml"
    config.write_text('[database]\nrole = "no_such_role"\n')
    assert_one_line_error(
        Subs(listener_user)("--config", str(config), "status"),
        f"user {listener_user.user!r} has no role 'NO_SUCH_ROLE'",
    )
    assert_one_line_error(Subs(items)("--role", "two words", "status"), "'two words' is not a role name")
    new_dsn = items.dsn.rpartition("/")[0] + "/new-with-a-role.fdb"
    result = Subs(replace(items, dsn=new_dsn))("--role", "SUBS_LISTENERS", "init", "--create")
    assert_one_line_error(result, "a new database has no roles; create it without --role/SUBS_ROLE")
    assert not Path(new_dsn.removeprefix("inet://127.0.0.1:3050")).exists()
    assert_one_line_error(
        Subs(items)("grant", "--to-role", "NO_SUCH_ROLE"),
        "there is no role NO_SUCH_ROLE in this database: create it first (CREATE ROLE)",
    )


@pytest.mark.parametrize("typed", ["two words", "x;DROP TABLE EVENT_LOG", '"unclosed', ""])
def test_grant_refuses_what_is_not_a_user_name(settings, typed):
    assert_one_line_error(Subs(settings)("grant", typed), "is not a user name")


def test_a_table_dropped_and_created_again_by_its_owner_is_captured_for_every_writer(settings, make_user):
    app, clerk = make_user("app"), make_user("clerk")
    execute(settings, f"GRANT CREATE TABLE TO USER {app.user}")
    execute(app, "CREATE TABLE APP_ITEMS (ID INTEGER NOT NULL PRIMARY KEY)")
    Subs(settings).ok("add", "app_items", "I", "audit")

    execute(app, "DROP TABLE APP_ITEMS")
    execute(app, "CREATE TABLE APP_ITEMS (ID BIGINT NOT NULL PRIMARY KEY, NOTE VARCHAR(10))")
    execute(app, f"GRANT INSERT ON APP_ITEMS TO USER {clerk.user}")
    execute(app, "INSERT INTO APP_ITEMS VALUES (1, 'owner')")
    execute(clerk, "INSERT INTO APP_ITEMS VALUES (2, 'clerk')")
    assert [e["new"]["NOTE"] for e in events(settings)] == ["owner", "clerk"]
    assert Subs(settings)("status", "--check").exit_code == 0


def test_a_table_dropped_and_created_again_by_its_owner_keeps_its_condition_rights(settings, make_user):
    """The engine drops a trigger's rights with it: the trigger made again
    at the CREATE TABLE's commit gets what the earlier one was found to need,
    from the owner who may give it, before any listener settles it."""
    app, clerk = make_user("app"), make_user("clerk")
    execute(settings, f"GRANT CREATE TABLE TO USER {app.user}")
    execute(
        app,
        "CREATE TABLE APP_CUSTOMERS (ID INTEGER NOT NULL PRIMARY KEY, VIP BOOLEAN)",
        "CREATE TABLE APP_ITEMS (ID INTEGER NOT NULL PRIMARY KEY, CUSTOMER INTEGER)",
    )
    execute(app, "INSERT INTO APP_CUSTOMERS VALUES (1, TRUE)")
    condition = "EXISTS (SELECT 1 FROM APP_CUSTOMERS C WHERE C.ID = NEW.CUSTOMER AND C.VIP)"
    Subs(settings).ok("add", "app_items", "I", "audit", "--when", condition)
    assert query(settings, "SELECT TRIM(OBJECT_NAME), TRIM(OBJECT_KIND) FROM EVENT_CAPTURE_RIGHT") == [
        ("APP_CUSTOMERS", "select")
    ]

    execute(app, "DROP TABLE APP_ITEMS")
    execute(app, "CREATE TABLE APP_ITEMS (ID INTEGER NOT NULL PRIMARY KEY, CUSTOMER INTEGER)")
    execute(app, f"GRANT INSERT ON APP_ITEMS TO USER {clerk.user}")
    execute(clerk, "INSERT INTO APP_ITEMS VALUES (1, 1)", "INSERT INTO APP_ITEMS VALUES (2, 2)")
    assert [e["pk"]["ID"] for e in events(settings)] == [1]
    assert Subs(settings)("status", "--check").exit_code == 0

    Subs(settings).ok("remove", "app_items", "I", "audit")
    assert query(settings, "SELECT COUNT(*) FROM EVENT_CAPTURE_RIGHT") == [(0,)]


def test_an_upgrade_gives_listener_users_the_rights_of_the_new_version(settings, make_user):
    """Version 16 adds EVENT_CAPTURE_RIGHT, version 23 EVENT_NOW, and since
    version 22 a listener executes EVENT_TIME_ZONE (version 21's): a
    listener `subs grant` made before the upgrade gets their rights from
    `subs init`, not from a second grant."""
    listener_user = make_user("listener")
    old = another_database(settings)
    with Database(old) as db:
        upgrade(db, target=15)
    execute(old, "CREATE ROLE SUBS_LISTENERS")
    grants = sql.load("grants")
    for kind, name in (("USER", listener_user.user), ("ROLE", "SUBS_LISTENERS")):
        newer = ("capture_rights", "time_zone", "clock", "event_ids")
        execute(old, *(sql.with_grantee(grants[block], kind, name) for block in grants if block not in newer))

    assert Subs(old).ok("init").splitlines() == [
        f"upgraded schema from version 15 to {LATEST}",
        f"granted {listener_user.user} this version's listener rights",
        "granted role SUBS_LISTENERS this version's listener rights",
    ]
    for name in (listener_user.user, "SUBS_LISTENERS"):
        assert query(
            old,
            "SELECT TRIM(RDB$PRIVILEGE) FROM RDB$USER_PRIVILEGES WHERE RDB$RELATION_NAME = 'EVENT_CAPTURE_RIGHT' "
            "AND RDB$USER = ? ORDER BY 1",
            (name,),
        ) == [("D",), ("I",), ("S",)]
        assert query(
            old,
            "SELECT TRIM(RDB$PRIVILEGE) FROM RDB$USER_PRIVILEGES "
            "WHERE RDB$RELATION_NAME IN ('EVENT_TIME_ZONE', 'EVENT_NOW') AND RDB$USER = ?",
            (name,),
        ) == [("X",), ("X",)]
    assert Subs(old).ok("init").strip() == f"schema is up to date (version {LATEST})"


def test_an_application_user_migrates_its_own_subscribed_table_after_an_upgrade(settings, make_user):
    """The capture's generator and DDL procedures come from the migrations in
    an upgraded database: a user other than subs's migrates its table after
    the last one (version 21's sync procedure raises an exception it needs
    the right to)."""
    app = make_user("app")
    old = another_database(settings)
    with Database(old) as db:
        upgrade(db, target=LATEST - 1)
    execute(old, f"GRANT CREATE TABLE TO USER {app.user}")
    app = replace(app, dsn=old.dsn)
    execute(app, "CREATE TABLE APP_ITEMS (ID INTEGER NOT NULL PRIMARY KEY, NOTE VARCHAR(10))")
    Subs(old).ok("init")
    Subs(old).ok("add", "app_items", "IU", "audit")

    execute(app, "ALTER TABLE APP_ITEMS ADD EMAIL VARCHAR(40)")
    execute(app, "INSERT INTO APP_ITEMS VALUES (1, 'n', 'a@example.com')")
    assert events(old)[-1]["new"] == {"ID": 1, "NOTE": "n", "EMAIL": "a@example.com"}
    assert Subs(old)("status", "--check").exit_code == 0
