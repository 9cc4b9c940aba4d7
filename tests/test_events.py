"""EventWatch, the listener's registration for Firebird events (POST_EVENT),
on every engine: each post wakes it once, and a registration the server
ends is never touched again."""

from __future__ import annotations

import pytest
from firebird.driver import DatabaseError, fbapi

from subscriptions.db.connection import Database
from subscriptions.db.errors import is_connection_lost
from subscriptions.db.events import MAX_BLOCK_BYTES, EventWatch, event_block, event_blocks

from conftest import execute, wait_until

NAMES = [f"subs:tag{number}" for number in range(40)]  # more than the driver's 15 per block


def post(settings, name: str) -> None:
    execute(settings, f"EXECUTE BLOCK AS BEGIN POST_EVENT '{name}'; END")


def test_event_block_layout():
    assert event_block(["ab", "c"]) == b"\x01\x02ab\x00\x00\x00\x00\x01c\x00\x00\x00\x00"
    for bad in ("", "x" * 256):
        with pytest.raises(ValueError, match="1 to 255 bytes"):
            event_block([bad])


def test_names_are_split_into_blocks_in_order():
    assert event_blocks(["ab", "c", "de"], limit=14) == [event_block(["ab", "c"]), event_block(["de"])]
    assert event_blocks(["ab"], limit=1) == [event_block(["ab"])]
    assert event_blocks([]) == []


def test_names_beyond_one_parameter_block_wake_the_watch(settings, db):
    """A listener of many tags: 1,400 names of 50 bytes are 70 KB of event
    parameter block, whose length the client library takes as a C short.
    In one block, the wrapped length registered the first few names only,
    and posts of the others never woke the listener."""
    names = [f"subs:{'t' * 36}{number:04d}" for number in range(1400)]
    assert all(len(block) <= MAX_BLOCK_BYTES for block in event_blocks(names)) and len(event_blocks(names)) == 3
    watch = EventWatch(db.connection, names)
    try:
        while watch.wait(1):
            pass  # first notices may only report the counts the engine has
        for name in (names[0], names[700], names[-1]):
            post(settings, name)
            assert watch.wait(10), f"{name} did not wake the watch"
            assert not watch.take(), f"{name} woke the watch twice"
    finally:
        watch.close()
    while watch.wait(0.5):
        pass  # a server's notices of length 0 for the cancels, if any: they register nothing again
    post(settings, names[-1])
    assert not watch.wait(0.5), "a closed watch was notified"


def test_each_post_wakes_the_watch_once(settings, db):
    watch = EventWatch(db.connection, NAMES)
    try:
        watch.wait(1)  # the first notice may only report the counts the engine has
        assert not watch.wait(0.3), "woken with nothing posted"
        for name in NAMES[::13]:
            post(settings, name)
            assert watch.wait(10), f"{name} did not wake the watch"
            assert not watch.take(), f"{name} woke the watch twice"
        post(settings, "subs:not-watched")
        assert not watch.wait(0.5), "woken by an event it does not watch"
    finally:
        watch.close()
    watch.take()  # a server's notice of length 0 for the cancel, if any: it registers nothing again
    post(settings, NAMES[0])
    assert not watch.wait(0.5), "a closed watch was notified"


def test_the_watch_tells_which_names_were_posted(settings, db):
    """Across blocks and until asked, each name once per asking."""
    names = [f"subs:{'t' * 36}{number:04d}" for number in range(1400)]
    watch = EventWatch(db.connection, names)
    try:
        while watch.wait(1):
            pass
        for name in names:
            watch.posted(name)  # forget what the first notices reported
        post(settings, names[3])
        post(settings, names[-1])
        wait_until(lambda: watch.take() and watch.posted(names[-1]), 10, "the last name's post")
        assert watch.posted(names[3]) or (watch.wait(10) and watch.posted(names[3]))
        assert not watch.posted(names[3]) and not watch.posted(names[700])
    finally:
        watch.close()


@pytest.mark.parametrize("engine", ["fb3"], indirect=True)
def test_a_registration_the_server_ends_is_left_alone(settings, db, monkeypatch):
    """Firebird 3 server: once the watched attachment is killed and a call
    on it has failed, the client library ends the registration (a notice of
    length 0). The watch wakes its owner and makes no further call into the
    client library: registering again or cancelling then, while the client
    library's event thread is still in the callback, aborted the process."""
    watch = EventWatch(db.connection, NAMES[:3])
    watch.wait(1)
    kill(settings, db)
    wait_until(lambda: watch.ended, 10, "the client library to end the registration")

    calls: list[str] = []
    for function in ("isc_que_events", "isc_cancel_events"):
        monkeypatch.setattr(fbapi.api, function, lambda *_, name=function: calls.append(name))
    assert watch.take(), "the end of the registration did not wake the owner"
    assert not watch.take()
    watch.close()
    assert calls == []


def kill(settings, db: Database) -> None:
    """Kill ``db``'s attachment as an operator would; the next call on it
    fails, which is how the client library learns of it."""
    execute(settings, "DELETE FROM MON$ATTACHMENTS WHERE MON$ATTACHMENT_ID = ?", params=(db.connection.info.id,))
    with pytest.raises(DatabaseError) as failed:
        db.connection.begin()
        db.connection.cursor().execute("SELECT 1 FROM RDB$DATABASE").fetchall()
    assert is_connection_lost(failed.value), failed.value


def test_a_failed_registration_raises_a_database_error(settings, db):
    kill(settings, db)
    with pytest.raises(DatabaseError) as failed:
        EventWatch(db.connection, NAMES[:1])
    assert is_connection_lost(failed.value), failed.value
