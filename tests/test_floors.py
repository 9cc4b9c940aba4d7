"""Claim floors (delivery/floors.py): walks of the claim index start past
the events a transaction left open keeps as garbage, and never past an
event that may still commit or come back from dead."""

from __future__ import annotations

import itertools
import logging
import re
import threading
import time
from collections.abc import Iterator

import pytest
from firebird.driver import DatabaseError

from subscriptions.db.connection import Database
from subscriptions.delivery import floors
from subscriptions.delivery.claims import Claimer, Target, load_targets, stream_of
from subscriptions.delivery.floors import Bounds, Floors, Look

from conftest import EMBEDDED, Subs, execute, query, wait_until
from listening import Listener, insert

LOOKS_TO_RISE = 2  # a first look (no bound yet), a look with a bound
PAGE_FETCHES = """
SELECT i.MON$PAGE_FETCHES FROM MON$ATTACHMENTS a JOIN MON$IO_STATS i ON i.MON$STAT_ID = a.MON$STAT_ID
WHERE a.MON$ATTACHMENT_ID = ?"""


def test_the_bound_lags_one_look_and_waits_for_transactions_that_wrote() -> None:
    bounds = Bounds()
    assert bounds.after(Look(last_id=10, next_transaction=100, wrote={90: True, 95: False})) == 0
    # 90 wrote before the first look: nothing is known of its ids while it lasts.
    assert bounds.after(Look(last_id=20, next_transaction=110, wrote={90: True, 95: False})) == 0
    # 95 had not written at the look that read 20, so its ids are above the
    # one read a look earlier (10); 115 started after the look that read 20.
    assert bounds.after(Look(last_id=30, next_transaction=120, wrote={95: True, 115: True})) == 10
    assert bounds.after(Look(last_id=40, next_transaction=130, wrote={95: True, 115: True, 125: True})) == 10
    assert bounds.after(Look(last_id=50, next_transaction=140, wrote={115: True, 135: False})) == 20
    # Without a transaction that wrote, one look behind the ids handed out.
    assert bounds.after(Look(last_id=60, next_transaction=150, wrote={135: False})) == 50
    # One that wrote, older than the last look but not in it: nothing is known.
    assert bounds.after(Look(last_id=70, next_transaction=160, wrote={107: True})) == 0


def test_looks_that_take_long_are_spaced_out(monkeypatch) -> None:
    """A look's MON$ snapshot takes longer the more attachments there are
    (15 ms with 200 on fb5 and fb3): looks then come less often than EVERY,
    so they take at most LOOK_SHARE of the claimer's time."""
    clock = [100.0]
    monkeypatch.setattr(floors.time, "monotonic", lambda: clock[0])
    looks = Floors()
    looks.usable = True

    def slow_look(cursor) -> None:
        clock[0] += 0.03

    monkeypatch.setattr(looks, "_look", slow_look)
    looks.refresh(cursor=None)
    clock[0] += 0.03 / floors.LOOK_SHARE - 0.04  # measured from the look's start
    assert looks.until_due() == pytest.approx(0.01)
    clock[0] += 0.02
    assert looks.until_due() == 0


def items_insert_target(db: Database) -> Target:
    return next(t for t in load_targets(db) if t.action == "I")


def items_insert_target_of(settings) -> Target:
    with Database(settings) as db:
        return items_insert_target(db)


def look(claimer: Claimer, times: int = LOOKS_TO_RISE) -> None:
    for _ in range(times):
        floors.look(claimer.db, claimer.floors)


def first_event(settings, target: Target) -> int:
    return int(query(settings, f"SELECT MIN(EVENT_ID) FROM EVENT_LOG WHERE SUB_ID = {target.sub_id}")[0][0])


def page_fetches(db: Database, attachment: int) -> int:
    with Database(db.settings) as other:
        return int(other.fetch_value(PAGE_FETCHES, attachment))


def test_walks_start_past_what_a_transaction_left_open_keeps(items):
    """Behind a transaction that only read, 300 handled events stay in the
    claim index; once the floors rose, a stream's claim passes none of them
    (the engine's own count of page fetches), and still gets every live
    event in order."""
    with Database(items) as reader, Database(items) as db:
        reader.connection.begin()
        reader.connection.cursor().execute("SELECT COUNT(*) FROM ITEMS").fetchall()
        insert(items, 1, 300)
        target = items_insert_target(db)
        claimer = Claimer(db, "a:1", 30)
        handled_ids = [event.id for event in claimer.claim_head([target], 300)]
        assert claimer.settle_head(stream_of(target), handled_ids) == 300
        insert(items, 301, 2)
        attachment = db.fetch_value("SELECT CURRENT_CONNECTION FROM RDB$DATABASE")

        def claim_fetches() -> tuple[list[int], int]:
            before = page_fetches(db, attachment)
            claimed = claimer.claim_head([target], 10)
            claimer.settle_head(stream_of(target), [], release=True)
            return [int(event.id) for event in claimed], page_fetches(db, attachment) - before

        ids, fetches_from_first_entry = claim_fetches()
        assert len(ids) == 2
        look(claimer)
        assert claimer.floors.after([target.sub_id]) == first_event(items, target) - 1 == ids[0] - 1
        ids_again, fetches_from_floor = claim_fetches()
        # The claim walks the stream twice (where its batch stops, then the
        # batch); each garbage entry passed costs at least a page fetch.
        assert ids_again == ids and fetches_from_first_entry - fetches_from_floor >= 2 * 300


def test_no_floor_passes_an_event_that_may_still_commit(items):
    """Three transactions log an event while later events are handled and
    the floors look after each: one wrote before the first look, one was
    open without writing at a look, one began after a look. Each event is
    claimed first once it commits, and the floors did rise meanwhile."""
    with Database(items) as db, Database(items) as early, Database(items) as idle, Database(items) as late:
        target = items_insert_target(db)
        claimer = Claimer(db, "a:1", 30)

        def handle(first: int) -> None:
            for key in range(first, first + 4):
                insert(items, key, 1)
                [event] = claimer.claim_head([target], 10)
                claimer.settle_head(stream_of(target), [event.id])
                look(claimer, 1)

        def commit_and_claim(writer: Database, key: int) -> None:
            writer.connection.commit()
            claimed = claimer.claim_head([target], 10)
            assert [event_key(event) for event in claimed] == [key]
            claimer.settle_head(stream_of(target), [event.id for event in claimed])

        early.connection.begin()
        early.connection.cursor().execute("INSERT INTO ITEMS VALUES (1001, NULL)")
        idle.connection.begin()
        idle.connection.cursor().execute("SELECT COUNT(*) FROM ITEMS").fetchall()
        look(claimer, 2)
        handle(1)
        assert claimer.floors.after([target.sub_id]) == 0  # early may still commit its event
        commit_and_claim(early, 1001)
        handle(10)
        assert claimer.floors.after([target.sub_id]) > 1  # past early's event, handled
        late.connection.begin()
        late.connection.cursor().execute("INSERT INTO ITEMS VALUES (1003, NULL)")
        idle.connection.cursor().execute("INSERT INTO ITEMS VALUES (1002, NULL)")
        handle(20)
        commit_and_claim(idle, 1002)
        commit_and_claim(late, 1003)


def event_key(event) -> int:
    decoded, error = event.event()
    assert error is None
    return int(decoded.pk["ID"])


def test_without_the_rights_to_see_every_transaction_there_are_no_floors(items, make_user):
    listener_user = make_user("listener")
    Subs(items).ok("grant", listener_user.user)
    insert(items, 1, 3)
    with Database(listener_user) as db:
        target = items_insert_target(db)
        claimer = Claimer(db, "a:1", 30)
        claimer.settle_head(stream_of(target), [event.id for event in claimer.claim_head([target], 10)])
        insert(items, 4, 1)
        look(claimer, LOOKS_TO_RISE + 1)
        assert claimer.floors.after([target.sub_id]) == 0
        assert [event_key(event) for event in claimer.claim_head([target], 10)] == [4]


@pytest.fixture
def raising(items) -> Iterator[tuple[Floors, list[Database]]]:
    """Floors raised by keep_raising on a thread, as a listener's claimer
    has them, and the attachments it made."""
    looks, stop, attachments = Floors(), threading.Event(), []

    def attach() -> Database:
        attachments.append(Database(items))
        return attachments[-1]

    thread = threading.Thread(target=floors.keep_raising, args=(looks, attach, stop), daemon=True)
    thread.start()
    yield looks, attachments
    stop.set()
    thread.join(10)
    assert not thread.is_alive()


def claim_and_settle(claimer: Claimer, target: Target) -> list[int]:
    claimed = claimer.claim_head([target], 10)
    claimer.settle_head(stream_of(target), [event.id for event in claimed], release=True)
    return [event_key(event) for event in claimed]


def test_claims_go_on_while_a_look_waits(items, raising, monkeypatch):
    """After another process's SIGKILL a MON$ query on the embedded engine
    can wait in the engine for minutes (tests/SOAK-NOTES.md, finding 8).
    Looks run on a thread and an attachment of their own: claims go on
    meanwhile, and the floors rise once the looks do."""
    looks, attachments = raising
    waiting, release = threading.Event(), threading.Event()
    refresh = looks.refresh

    def stuck(cursor) -> None:
        waiting.set()
        release.wait(30)
        refresh(cursor)

    monkeypatch.setattr(looks, "refresh", stuck)
    insert(items, 1, 3)
    with Database(items) as db:
        target = items_insert_target(db)
        claimer = Claimer(db, "a:1", 30, floors=looks)
        assert claim_and_settle(claimer, target) == [1, 2, 3]
        assert waiting.wait(10), "the claim wanted a look"
        insert(items, 4, 2)
        assert claim_and_settle(claimer, target) == [4, 5]
        assert looks.after([target.sub_id]) == 0
        release.set()

        keys = itertools.count(100)

        def risen() -> bool:
            insert(items, next(keys), 1)
            claim_and_settle(claimer, target)
            return looks.after([target.sub_id]) > 0

        wait_until(risen, 20, "the floors to rise")
    assert len(attachments) == 1


def test_a_reset_during_a_look_leaves_the_floors_to_the_next_look(items, monkeypatch):
    """The worker resets the floors when dead events are queued again, with
    their old ids, maybe while a look walks past them: that look's floors
    are dropped, and the next one walks from the first entries."""
    insert(items, 1, 3)
    with Database(items) as db:
        target = items_insert_target(db)
        claimer = Claimer(db, "a:1", 30)
        claim_and_settle(claimer, target)
        insert(items, 4, 1)
        look(claimer, 1)
        bound_after = Bounds.after

        def reset_meanwhile(bounds: Bounds, seen: Look) -> int:
            claimer.floors.reset()
            return bound_after(bounds, seen)

        monkeypatch.setattr(Bounds, "after", reset_meanwhile)
        look(claimer, 1)
        assert claimer.floors.after([target.sub_id]) == 0
        monkeypatch.undo()
        look(claimer, 1)
        assert claimer.floors.after([target.sub_id]) == first_event(items, target) - 1 > 0


def test_a_failed_look_is_warned_of_once_and_tried_again(items, caplog):
    """A look that fails leaves the floors as they are (they stay true);
    its thread warns once, not at every try, and attaches again."""
    failures = [DatabaseError("the database went away"), DatabaseError("the database went away")]
    looks, stop = Floors(), threading.Event()

    def attach() -> Database:
        if failures:
            raise failures.pop()
        return Database(items)

    insert(items, 1, 1)
    with Database(items) as db:
        target = items_insert_target(db)
        claim_and_settle(Claimer(db, "a:1", 30), target)  # the floors rise past it
    thread = threading.Thread(target=floors.keep_raising, args=(looks, attach, stop), daemon=True)
    with caplog.at_level(logging.INFO, logger="subs.worker"):
        thread.start()
        wait_until(lambda: looks.after([target.sub_id]) > 0, 20, "the floors to rise")
        stop.set()
        thread.join(10)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == ["could not look for the claim floors: the database went away; trying again"]
    assert not thread.is_alive()


def floor_of(log: str, sub_id: int) -> int:
    """The last floor the listener's DEBUG log gives subscription ``sub_id`` (0: none)."""
    floors = re.findall(rf"\bsubscription {sub_id} from event (\d+)", log)
    return int(floors[-1]) if floors else 0


def started(lines: list[dict], key: int) -> int:
    return sum(1 for line in lines if line["key"] == key and line["phase"] == "start")


@pytest.mark.parametrize("engine", [EMBEDDED])  # Firebird 3 has no system privileges
def test_a_listener_user_with_a_monitoring_role_has_floors(items, make_user):
    """On Firebird 4 and later a role with the system privilege
    MONITOR_ANY_ATTACHMENT, the user's default role, shows MON$ every
    transaction (docs/OPERATIONS.md, "Users and rights"); the floors also
    read the event ids' generator, which `subs grant` lets it use. Without
    that right, a look gives the floors up instead of failing the claims."""
    listener_user = make_user("listener")
    Subs(items).ok("grant", listener_user.user)
    execute(items, "CREATE ROLE SUBS_MONITOR SET SYSTEM PRIVILEGES TO MONITOR_ANY_ATTACHMENT")
    execute(items, f"GRANT DEFAULT SUBS_MONITOR TO USER {listener_user.user}")
    insert(items, 1, 3)

    def claims_after_looks() -> int:
        with Database(listener_user) as db:
            target = items_insert_target(db)
            claimer = Claimer(db, "a:1", 30)
            claimed = claimer.claim_head([target], 10)
            claimer.settle_head(stream_of(target), [event.id for event in claimed])
            insert(items, 100 + len(claimed), 1)
            look(claimer)
            floor_after = claimer.floors.after([target.sub_id])
            assert len(claimer.claim_head([target], 10)) == 1
            claimer.settle_head(stream_of(target), [], release=True)
            return floor_after

    (generator,) = query(
        items,
        "SELECT TRIM(RDB$GENERATOR_NAME) FROM RDB$RELATION_FIELDS "
        "WHERE RDB$RELATION_NAME = 'EVENT_LOG' AND RDB$FIELD_NAME = 'EVENT_ID'",
    )[0]
    execute(items, f'REVOKE USAGE ON GENERATOR "{generator}" FROM USER {listener_user.user}')
    assert claims_after_looks() == 0
    Subs(items).ok("grant", listener_user.user)
    assert claims_after_looks() == first_event(items, items_insert_target_of(items)) - 1 > 0


@pytest.mark.parametrize("mode", ["ordered", "parallel"])
def test_a_dead_event_queued_again_is_claimed_though_the_floors_passed_it(items, tmp_path, listeners, mode):
    """A listener's floors rise past a dead event. Made live by hand, it is
    passed over by the claims after it (until the walk from the first entry
    a minute later); queued again by `subs retry`, which posts the requeue
    event, it is delivered at once."""
    listener = Listener(items, tmp_path, "--mode", mode, "--poll", "300", "--max-attempts", "1", "--log-level", "DEBUG")
    listeners.append(listener)
    insert(items, 1, 1, "fail")
    wait_until(lambda: query(items, "SELECT COUNT(*) FROM EVENT_LOG WHERE DEAD")[0][0] == 1, 60, "the event to die")
    ((dead_id, sub_id),) = query(items, "SELECT EVENT_ID, SUB_ID FROM EVENT_LOG WHERE DEAD")
    # The floors look every half second or more while claims go on, and rise
    # over two looks; under load the looks come later (LOOK_SHARE) or clear
    # the floors (a transaction they could not place): claims go on until
    # the floor is seen past the dead event.
    key = 2
    while floor_of(listener.output(), sub_id) <= dead_id:
        assert key < 100, f"the floor of subscription {sub_id} did not pass event {dead_id}: {listener.output()}"
        insert(items, key, 1)
        listener.wait_for(lambda lines, key=key: started(lines, key) == 1)
        time.sleep(0.6)
        key += 1
    execute(items, f"UPDATE EVENT_LOG SET DEAD = FALSE, DEAD_AT = NULL, ATTEMPTS = 0 WHERE EVENT_ID = {dead_id}")
    insert(items, 100, 1)
    listener.wait_for(lambda lines: started(lines, 100) == 1)
    time.sleep(1)
    assert started(listener.lines(), 1) == 1, "the floors passed it"
    execute(items, f"UPDATE EVENT_LOG SET DEAD = TRUE, DEAD_AT = EVENT_NOW() WHERE EVENT_ID = {dead_id}")
    Subs(items).ok("retry", str(dead_id))
    listener.wait_for(lambda lines: started(lines, 1) == 2, timeout=20)
