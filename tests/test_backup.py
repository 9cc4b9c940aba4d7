"""A database with subs backed up and restored with gbak (the engine's
services, as `gbak -b` and `gbak -c` run them): operators restore backups,
and move databases to a newer Firebird that way; the restored database must
go on capturing and delivering."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from firebird.driver import connect_server, driver_config

from subscriptions.db import runtime
from subscriptions.db.connection import Database
from subscriptions.db.settings import ConnectionSettings
from subscriptions.schema import upgrade as schema
from subscriptions.schema.version import LATEST

import fb3server
from conftest import EMBEDDED, ITEMS_TABLE, Subs, events, execute, query
from listening import Listener, handled, insert

FB3_SERVICES = "subs-tests-fb3-services"


def _services(settings: ConnectionSettings) -> str:
    """The service manager of ``settings``'s engine: the Firebird 3 server's,
    or the embedded engine's own ("")."""
    runtime.load()
    if not settings.dsn.startswith("inet://"):
        return ""
    if driver_config.get_server(FB3_SERVICES) is None:
        config = driver_config.register_server(FB3_SERVICES)
        config.host.value, config.port.value = "127.0.0.1", "3050"
    return FB3_SERVICES


def _path(settings: ConnectionSettings) -> str:
    return settings.dsn.split(":3050/", 1)[-1]


def backup(settings: ConnectionSettings) -> str:
    """A backup of the database, in a file beside it; its path."""
    path = _path(settings)
    with connect_server(_services(settings), user=settings.effective_user, password=settings.password) as services:
        services.database.backup(database=path, backup=f"{path}.fbk")
        services.wait()
    return f"{path}.fbk"


def restore(backup_path: str, restored: ConnectionSettings) -> ConnectionSettings:
    with connect_server(_services(restored), user=restored.effective_user, password=restored.password) as services:
        services.database.restore(backup=backup_path, database=_path(restored))
        services.wait()
    return restored


def backup_and_restore(settings: ConnectionSettings) -> ConnectionSettings:
    """The database restored from a backup into a new file beside it."""
    directory, _, _ = settings.dsn.rpartition("/")
    restored = ConnectionSettings(f"{directory}/{uuid.uuid4().hex}.fdb", settings.user, settings.password)
    return restore(backup(settings), restored)


def test_a_restored_backup_goes_on_capturing_and_delivering(items, tmp_path, listeners):
    """The restore brings back the log with its pending events, the capture
    trigger and its --when condition, the DDL triggers, and EVENT_LOG's
    identity: new events are numbered after the restored ones."""
    Subs(items).ok("add", "items", "I", "rec2", "--when", "NEW.note <> 'skip'")
    insert(items, 1, 2)
    insert(items, 3, 1, "skip")
    restored = backup_and_restore(items)

    assert Subs(restored)("status", "--check").exit_code == 0
    assert query(restored, "SELECT * FROM EVENT_DATABASE") == query(items, "SELECT * FROM EVENT_DATABASE")
    execute(restored, "ALTER TABLE ITEMS ADD EXTRA INTEGER")
    execute(restored, "INSERT INTO ITEMS VALUES (4, 'new', 7)")
    logged = events(restored)
    assert [(event["id"], event["tag"], event["new"]["ID"]) for event in logged] == [
        (1, "rec", 1),
        (2, "rec2", 1),
        (3, "rec", 2),
        (4, "rec2", 2),
        (5, "rec", 3),
        (6, "rec", 4),
        (7, "rec2", 4),
    ]
    assert logged[-1]["new"] == {"ID": 4, "NOTE": "new", "EXTRA": 7}

    listener = Listener(restored, tmp_path, "--drain", "--tag", "rec")
    listeners.append(listener)
    assert listener.finish() == 0, listener.output()
    assert handled(listener.lines()) == [1, 3, 5, 6]


@pytest.mark.parametrize("engine", [EMBEDDED], indirect=True)
def test_a_firebird_3_database_moved_to_the_embedded_engine_goes_on(engine, fb3_dir: Path, tmp_path, listeners):
    """The way to a newer Firebird: gbak's backup on the Firebird 3 server,
    its restore on the embedded engine (5, or 4 in the Firebird 4 pass).
    The pending events, the capture and its rights come along: a user with
    rights on the table alone writes, a migration is followed, and every
    event is delivered in order. The trigger of a table with a BLOB, which
    the later engine's generator writes another way, is stale until `subs
    init` makes it again."""
    old = ConnectionSettings(f"inet://127.0.0.1:3050/{fb3_dir}/{uuid.uuid4().hex}.fdb", "SYSDBA", fb3server.password())
    with Database(old, create=True) as db:
        schema.upgrade(db)
    execute(old, ITEMS_TABLE)
    execute(old, "CREATE TABLE DOCS (ID INTEGER NOT NULL PRIMARY KEY, BODY BLOB SUB_TYPE TEXT)")
    execute(old, "GRANT SELECT, INSERT ON ITEMS TO USER CLERK")
    Subs(old).ok("add", "items", "IUD", "rec")
    Subs(old).ok("add", "docs", "I", "rec")
    insert(old, 1, 2)
    execute(old, "UPDATE ITEMS SET NOTE = 'changed' WHERE ID = 1")
    execute(old, "INSERT INTO DOCS VALUES (1, 'before')")
    backup_path = backup(old)
    Path(_path(old)).unlink()

    moved = restore(backup_path, ConnectionSettings(str(tmp_path / "moved.fdb")))
    with Database(moved) as db:
        assert db.engine_version[0] == int(engine[2:])
    check = Subs(moved)("status", "--check")
    assert (check.exit_code, check.stdout) == (1, "subscription 4 (DOCS I rec): trigger stale\n")
    assert Subs(moved).ok("init") == (
        f"schema is up to date (version {LATEST})\n"
        "made the capture trigger of DOCS again: it was not what this release makes on this engine (a database "
        "restored on a later Firebird, or DDL that skipped database triggers)\n"
    )
    assert Subs(moved)("status", "--check").exit_code == 0
    assert Subs(moved).ok("init") == f"schema is up to date (version {LATEST})\n"
    insert(ConnectionSettings(moved.dsn, "CLERK"), 3, 1)
    execute(moved, "ALTER TABLE ITEMS ADD EXTRA INTEGER")
    execute(moved, "INSERT INTO ITEMS VALUES (4, 'new', 7)")
    execute(moved, "INSERT INTO DOCS VALUES (2, 'after')")
    logged = events(moved)
    assert [(event["id"], event["table"], event["action"], event["pk"]["ID"]) for event in logged] == [
        (1, "ITEMS", "I", 1),
        (2, "ITEMS", "I", 2),
        (3, "ITEMS", "U", 1),
        (4, "DOCS", "I", 1),
        (5, "ITEMS", "I", 3),
        (6, "ITEMS", "I", 4),
        (7, "DOCS", "I", 2),
    ]
    assert (logged[2]["old"], logged[2]["new"]) == ({"ID": 1, "NOTE": ""}, {"ID": 1, "NOTE": "changed"})
    assert logged[5]["new"] == {"ID": 4, "NOTE": "new", "EXTRA": 7}
    assert [logged[3]["new"], logged[6]["new"]] == [{"ID": 1, "BODY": "before"}, {"ID": 2, "BODY": "after"}]

    listener = Listener(moved, tmp_path, "--drain")
    listeners.append(listener)
    assert listener.finish() == 0, listener.output()
    done = handled(listener.lines())  # in order per table (ordered mode)
    assert sorted(done) == [1, 2, 3, 4, 5, 6, 7]
    assert [event for event in done if logged[event - 1]["table"] == "DOCS"] == [4, 7]
