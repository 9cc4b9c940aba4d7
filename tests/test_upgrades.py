"""A listener or console left running while `subs init` of another release
changes the schema: a listener would fail, and in the end kill, the events
captured the new way. It stops instead, gracefully, and says which release
to start; the console refuses every request."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from subscriptions.db.connection import Database
from subscriptions.schema.version import CHECK_EVERY, LATEST, changed_since_start

from conftest import Subs, query, release_changes_schema_to
from listening import Listener, handled, insert, remaining
from webconsole import Console


def test_the_reason_names_what_to_start(settings):
    with Database(settings) as db:
        assert changed_since_start(db, "listener") is None
        release_changes_schema_to(settings, LATEST + 1)
        assert changed_since_start(db, "listener") == (
            f"{settings.dsn} now has subs schema version {LATEST + 1} and this listener runs {LATEST}; "
            "start the listener of the subs release that upgraded it"
        )
        release_changes_schema_to(settings, LATEST - 1)  # an older backup restored over it
        assert changed_since_start(db, "listener").endswith(
            f"version {LATEST - 1} and this listener runs {LATEST}; "
            "run `subs init` of this release and start the listener again"
        )


def test_a_listener_user_with_the_granted_rights_sees_the_change(settings, make_user):
    """The check reads the function's source from the catalogue, which a
    listener user (`subs grant`) may read on every engine."""
    listener_user = make_user("listener")
    Subs(settings).ok("grant", listener_user.user)
    with Database(listener_user) as db:
        assert changed_since_start(db, "listener") is None
        release_changes_schema_to(settings, LATEST + 1)
        assert f"now has subs schema version {LATEST + 1}" in str(changed_since_start(db, "listener"))


def test_an_idle_listener_stops_with_a_one_line_error(items, tmp_path, listeners):
    listener = Listener(items, tmp_path, "--poll", "0.5")
    listeners.append(listener)
    insert(items, 1, 1)
    listener.wait_for(lambda lines: handled(lines) == [1])
    release_changes_schema_to(items, LATEST + 1)
    assert listener.finish(timeout=4 * CHECK_EVERY) == 1
    output = listener.output()
    assert output.splitlines()[-1] == (
        f"Error: the listener stopped: {items.dsn} now has subs schema version {LATEST + 1} and this "
        f"listener runs {LATEST}; start the listener of the subs release that upgraded it"
    ), output
    assert "Traceback" not in output


@pytest.mark.parametrize("mode", ["ordered", "parallel"])
def test_a_busy_listener_lets_its_running_handler_finish_first(items, tmp_path, listeners, mode):
    """The check comes CHECK_EVERY after the claimer started, while
    the handler of event 1 still sleeps: it finishes, and the event is
    acknowledged before the listener ends."""
    listener = Listener(items, tmp_path, "--mode", mode, "--poll", "0.5")
    listeners.append(listener)
    insert(items, 1, 1, f"sleep{2 * CHECK_EVERY:g}")
    listener.wait_for(lambda lines: lines)
    release_changes_schema_to(items, LATEST + 1)
    assert listener.finish(timeout=6 * CHECK_EVERY) == 1
    assert handled(listener.lines()) == [1], listener.output()
    assert "stopping: " in listener.output()
    assert remaining(items) == 0


def test_the_console_refuses_every_request_once_the_schema_changed(items, tmp_path: Path) -> None:
    insert(items, 1, 1)
    web = Console(items, tmp_path)
    try:
        assert web.request("GET", "/api/subscriptions")[0] == 200
        release_changes_schema_to(items, LATEST + 1)
        time.sleep(CHECK_EVERY)
        reason = (
            f"{items.dsn} now has subs schema version {LATEST + 1} and this console runs {LATEST}; "
            "start the console of the subs release that upgraded it"
        )
        for path in ("/api/subscriptions", "/api/events", "/"):
            status, _, body = web.request("GET", path)
            assert status == 503 and reason in body.decode(), (path, body)
        status, body = web.post_json("/api/subscriptions/1/pause")
        assert (status, body["error"]) == (503, reason)
    finally:
        web.stop()
    assert query(items, "SELECT PAUSED FROM EVENT_SUBSCRIBER WHERE SUB_ID = 1") == [(False,)]
