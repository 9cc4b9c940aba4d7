"""A database with subs backed up and restored with gbak (the engine's
services, as `gbak -b` and `gbak -c` run them): operators restore backups,
and the restored database must go on capturing and delivering."""

from __future__ import annotations

import uuid

from firebird.driver import connect_server, driver_config

from subscriptions.db import runtime
from subscriptions.db.settings import ConnectionSettings

from conftest import Subs, events, execute, query
from listening import Listener, handled, insert

FB3_SERVICES = "subs-tests-fb3-services"


def backup_and_restore(settings: ConnectionSettings) -> ConnectionSettings:
    """The database restored from a backup into a new file beside it."""
    runtime.load()
    directory, _, name = settings.dsn.rpartition("/")
    restored = ConnectionSettings(f"{directory}/{uuid.uuid4().hex}.fdb", settings.user, settings.password)
    server = ""  # the embedded engine's own service manager
    if settings.dsn.startswith("inet://"):
        server = FB3_SERVICES
        if driver_config.get_server(server) is None:
            config = driver_config.register_server(server)
            config.host.value, config.port.value = "127.0.0.1", "3050"
    path, restored_path = (dsn.split(":3050/", 1)[-1] for dsn in (settings.dsn, restored.dsn))
    with connect_server(server, user=settings.effective_user, password=settings.password) as services:
        services.database.backup(database=path, backup=f"{path}.fbk")
        services.wait()
        services.database.restore(backup=f"{path}.fbk", database=restored_path)
        services.wait()
    return restored


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
