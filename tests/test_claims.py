"""Claims at the Claimer level, on both engines: the lease an ordered claim
takes on its stream, the spans a parallel claim takes, and how claims and
status see each other."""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Sequence

import pytest

from subscriptions.db.connection import Database
from subscriptions.delivery import claims
from subscriptions.delivery.claimed import Claimed
from subscriptions.delivery.claims import Claimer, Settlement, load_targets, stream_of, streams
from subscriptions.delivery.worker import HeadsProbe
from subscriptions.ops import console

from conftest import Subs, execute, query, wait_until
from listening import insert


def key(claimed: Claimed) -> int:
    """The ID of the row a claimed event is about (decoding as a handler process does)."""
    event, error = claimed.event()
    assert error is None
    return int(event.pk["ID"])


def insert_target(items):
    """The INSERT subscription of ITEMS, and 6 of its events."""
    insert(items, 1, 6)
    with Database(items) as db:
        return next(t for t in load_targets(db) if t.action == "I")


def test_an_ordered_batch_is_held_by_its_subscription_lease(items):
    target = insert_target(items)
    with Database(items) as a_db, Database(items) as b_db:
        a, b = Claimer(a_db, "a:1", 30), Claimer(b_db, "b:2", 30)
        batch = a.claim_head([target], 3)
        assert [(key(e), e.attempt) for e in batch] == [(1, 1), (2, 1), (3, 1)]
        assert query(items, "SELECT ATTEMPTS FROM EVENT_LOG ORDER BY EVENT_ID") == [(0,)] * 6
        assert b.claim_head([target], 10) == [], "a second ordered consumer must wait for the lease"
        parallel = b.claim({target.sub_id: target}, 10)
        assert [key(e) for e in parallel] == [4, 5, 6], "a parallel claim took events of the batch in hand"
        assert b.ack([], {e.span for e in parallel}) == 0  # given back, not handled

        status = json.loads(Subs(items).ok("status", "--json"))
        row = next(r for r in status if r["action"] == "I")
        assert (row["pending"], row["in_flight"]) == (3, 3)

        assert a.settle_head(stream_of(target), [batch[0].id]) == 1
        assert [(key(e), e.attempt) for e in b.claim_head([target], 2)] == [(2, 1), (3, 1)]


def test_a_lease_taken_over_counts_the_attempt_of_the_batch_left_in_hand(items):
    target = insert_target(items)
    with Database(items) as a_db, Database(items) as b_db:
        a, b = Claimer(a_db, "a:1", 0.5), Claimer(b_db, "b:2", 30)
        assert len(a.claim_head([target], 3)) == 3  # then "a" dies without settling
        expired = "SELECT COUNT(*) FROM EVENT_LEASE WHERE EXPIRES_AT <= EVENT_NOW()"
        wait_until(lambda: query(items, expired) == [(3,)], 10, "the stream's lease (I, U, D) to run out")
        assert [(key(e), e.attempt) for e in b.claim_head([target], 4)] == [(1, 2), (2, 2), (3, 2), (4, 1)]
        assert a.settle_head(stream_of(target), []) == 0
        assert b.settle_head(stream_of(target), []) == 0
        assert query(items, "SELECT ATTEMPTS FROM EVENT_LOG ORDER BY EVENT_ID") == [(1,), (1,), (1,), (0,), (0,), (0,)]


def test_a_failed_ordered_attempt_is_counted_once(items):
    target = insert_target(items)
    with Database(items) as db:
        claimer = Claimer(db, "a:1", 30)
        first, *_ = claimer.claim_head([target], 3)
        claimer.fail(first.id, "boom", 0, dead=False)
        claimer.settle_head(stream_of(target), [])
        assert query(items, "SELECT ATTEMPTS, LAST_ERROR FROM EVENT_LOG ORDER BY EVENT_ID")[:2] == [
            (1, "boom"),
            (0, None),
        ]
        again = claimer.claim_head([target], 1)
        assert [(e.id, e.attempt) for e in again] == [(first.id, 2)]


def test_removing_a_subscription_removes_its_lease(items):
    target = insert_target(items)
    with Database(items) as db:
        Claimer(db, "a:1", 30).claim_head([target], 1)
    execute(items, "DELETE FROM EVENT_LOG")
    Subs(items).ok("remove", "items", "I", "rec")
    assert query(items, "SELECT COUNT(*) FROM EVENT_LEASE WHERE SUB_ID = ?", (target.sub_id,)) == [(0,)]


def test_a_claim_that_meets_an_uncommitted_lease_claims_nothing(items):
    """Another consumer's lease that is still being written: a conflict,
    counted (subs_claim_conflicts_total), never a wait or an error."""
    target = insert_target(items)
    with Database(items) as a_db, Database(items) as b_db:
        a = Claimer(a_db, "a:1", 30)
        with b_db.transaction() as cursor:
            cursor.execute(
                "UPDATE OR INSERT INTO EVENT_LEASE (SUB_ID, HOLDER, EXPIRES_AT) "
                "VALUES (?, 'b:2', EVENT_NOW()) MATCHING (SUB_ID)",
                (target.sub_id,),
            )
            assert a.claim_head([target], 5) == []
            assert a.conflicts == 1
        assert [key(e) for e in a.claim_head([target], 2)] == [1, 2]


def test_an_idle_subscription_is_claimed_without_a_write(items):
    """Workers claim every subscription they serve on each drain: one with
    nothing to hand out must not write its lease (a write, and a commit with
    forced writes, per subscription per drain)."""
    target = insert_target(items)
    lease_version = "SELECT RDB$RECORD_VERSION FROM EVENT_LEASE WHERE SUB_ID = ?"
    with Database(items) as db:
        claimer = Claimer(db, "a:1", 30)
        claimer.settle_head(stream_of(target), [e.id for e in claimer.claim_head([target], 10)])
        written = query(items, lease_version, (target.sub_id,))
        assert claimer.claim_head([target], 10) == []
    assert query(items, lease_version, (target.sub_id,)) == written


def test_parallel_claims_of_any_size_take_each_event_once(items):
    """A claim far larger than the log works; two claimers share the events
    without overlap."""
    target = insert_target(items)
    targets = {target.sub_id: target}
    with Database(items) as a_db, Database(items) as b_db:
        a, b = Claimer(a_db, "a:1", 30), Claimer(b_db, "b:2", 30)
        first = a.claim(targets, 2)
        rest = b.claim(targets, 100_000)
        assert [key(e) for e in first] == [1, 2] and [key(e) for e in rest] == [3, 4, 5, 6]
        assert a.claim(targets, 100_000) == [] and a.conflicts == b.conflicts == 0
        assert a.ack([e.id for e in first], {e.span for e in first}) == 2
        assert b.ack([e.id for e in rest], {e.span for e in rest}) == 4
        assert query(items, "SELECT COUNT(*) FROM EVENT_SPAN") == [(0,)]


def test_an_ordered_claim_takes_the_whole_stream_in_log_order(items):
    """A table's subscriptions of one tag are one stream: one claim hands out
    their events merged in log order, under one lease; a subscription added
    after the targets were read is part of it too."""
    insert(items, 1, 2)
    execute(items, "UPDATE ITEMS SET NOTE = 'x' WHERE ID = 1", "DELETE FROM ITEMS WHERE ID = 2")
    insert(items, 3, 1)
    with Database(items) as a_db, Database(items) as b_db:
        inserts = next(t for t in load_targets(a_db) if t.action == "I")
        a, b = Claimer(a_db, "a:1", 30), Claimer(b_db, "b:2", 30)
        batch = a.claim_head([inserts], 10)  # the U and D targets are read in the claim
        assert [(e.action, key(e)) for e in batch] == [("I", 1), ("I", 2), ("U", 1), ("D", 2), ("I", 3)]
        assert [e.id for e in batch] == sorted(e.id for e in batch)
        updates = next(t for t in load_targets(b_db) if t.action == "U")
        assert b.claim_head([updates], 10) == [], "the stream's lease covers every subscription of it"
        assert a.settle_head(stream_of(inserts), [e.id for e in batch[:2]]) == 2
        assert [(e.action, key(e)) for e in b.claim_head([updates], 2)] == [("U", 1), ("D", 2), ("I", 3)]


def test_an_ordered_claim_stops_at_the_streams_first_event_that_waits(items):
    insert(items, 1, 1)
    execute(items, "UPDATE ITEMS SET NOTE = 'x' WHERE ID = 1")
    insert(items, 2, 1)
    execute(items, "UPDATE EVENT_LOG SET NEXT_ATTEMPT_AT = DATEADD(1 HOUR TO EVENT_NOW()) WHERE EVENT_ID = 2")
    with Database(items) as db:
        stream = [t for t in load_targets(db) if t.table == "ITEMS"]
        claimer = Claimer(db, "a:1", 30)
        assert [e.id for e in claimer.claim_head(stream, 10)] == [1]  # not event 3 after the waiting update
        claimer.settle_head(stream_of(stream[0]), [1])
        assert claimer.claim_head(stream, 10) == []


def test_ready_names_the_subscriptions_whose_head_can_be_claimed(items):
    execute(items, "CREATE TABLE OTHERS (ID INTEGER NOT NULL PRIMARY KEY, NOTE VARCHAR(20))")
    Subs(items).ok("add", "others", "I", "rec")
    with Database(items) as db:
        claimer = Claimer(db, "a:1", 30)
        every = [target.sub_id for target in load_targets(db)]
        assert claimer.ready(every) == set()
        insert(items, 1, 2)
        execute(items, "INSERT INTO OTHERS VALUES (1, NULL)", "UPDATE ITEMS SET NOTE = 'x' WHERE ID = 2")
        assert claimer.ready(every) == {1, 2, 4}  # ITEMS I and U, OTHERS I
        assert claimer.ready([2, 3, 4]) == {2, 4}
        execute(items, "UPDATE EVENT_LOG SET NEXT_ATTEMPT_AT = DATEADD(1 HOUR TO EVENT_NOW()) WHERE EVENT_ID = 1")
        Subs(items).ok("pause", "others", "I", "rec")
        assert claimer.ready(every) == {2}  # ITEMS I waits for its retry, OTHERS is paused


def test_a_large_batch_of_long_ids_is_claimed_and_acknowledged_whole(items):
    """The claimer claims for all its handler processes at once: hundreds of
    ids of many digits travel in one list parameter per statement, which an
    attachment in UTF8 passes only up to 8,191 characters."""
    execute(items, "ALTER TABLE EVENT_LOG ALTER COLUMN EVENT_ID RESTART WITH 1000000000000000")
    insert(items, 1, 1000)
    with Database(items) as db:
        targets = {t.sub_id: t for t in load_targets(db) if t.action == "I"}
        claimer = Claimer(db, "a:1", 30)
        events = claimer.claim(targets, 1000)
        assert len(events) > 300 and min(e.id for e in events) >= 10**15
        assert claimer.ack([e.id for e in events]) == len(events)
    assert query(items, "SELECT COUNT(*) FROM EVENT_LOG") == [(1000 - len(events),)]


def test_the_next_batch_is_claimed_under_the_same_lease_while_the_first_runs(items):
    """claim_next: the ordered batch after the one in hand, for its handler
    process to go on with; the stream's lease covers both, and is released
    with the last."""
    target = insert_target(items)
    stream = stream_of(target)
    with Database(items) as a_db, Database(items) as b_db:
        a, b = Claimer(a_db, "a:1", 30), Claimer(b_db, "b:2", 30)
        first = a.claim_head([target], 3)
        second = a.claim_next([target], first[-1].id, len(first), 2)
        assert [(key(e), e.attempt) for e in second] == [(4, 1), (5, 1)]
        assert [key(e) for e in b.claim({target.sub_id: target}, 10)] == [6], "the lease covers both batches"
        assert a.settle_head(stream, [e.id for e in first], release=False) == 3
        assert b.claim_head([target], 10) == [], "the lease stays while a batch is in hand"
        assert a.settle_head(stream, [e.id for e in second]) == 2
        assert query(items, "SELECT COUNT(*) FROM EVENT_LEASE WHERE HOLDER IS NOT NULL") == [(0,)]


def test_every_claim_hands_out_created_at_as_the_driver_selects_it(items):
    """Claims read CREATED_AT as text (claimed_columns); the datetime
    handlers get is the one a select of the column gives, to the 100 µs."""
    target = insert_target(items)
    execute(
        items,
        "UPDATE EVENT_LOG SET CREATED_AT ="
        " DATEADD(EVENT_ID * 1234567 MILLISECOND TO TIMESTAMP '1999-12-31 23:59:59.9999')",
        "UPDATE EVENT_LOG SET CREATED_AT = TIMESTAMP '2024-02-29 00:00:00.0001'"
        " WHERE EVENT_ID = (SELECT MIN(EVENT_ID) FROM EVENT_LOG)",
    )
    selected = dict(query(items, "SELECT EVENT_ID, CREATED_AT FROM EVENT_LOG"))
    with Database(items) as a_db, Database(items) as b_db:
        a, b = Claimer(a_db, "a:1", 30), Claimer(b_db, "b:2", 30)
        head = a.claim_head([target], 2)
        following = a.claim_next([target], head[-1].id, len(head), 2)
        parallel = b.claim({target.sub_id: target}, 10)
    claimed = head + following + parallel
    assert len(claimed) == 6
    assert {e.id: e.created_at for e in claimed} == selected
    assert dt.datetime(2024, 2, 29, 0, 0, 0, 100) in selected.values()


def test_handled_batches_are_deleted_together_when_the_lease_is_given_back(items):
    """A busy stream's handled batches stay in the log, under its lease,
    until a later settle deletes them together: claim_next counts them as
    held, and nobody else takes them meanwhile."""
    target = insert_target(items)
    with Database(items) as a_db, Database(items) as b_db:
        a, b = Claimer(a_db, "a:1", 30), Claimer(b_db, "b:2", 30)
        first = a.claim_head([target], 2)
        second = a.claim_next([target], first[-1].id, len(first), 2)
        assert a.claim_next([target], second[-1].id, len(second), 2) == [], "the first batch is still live"
        third = a.claim_next([target], second[-1].id, len(first) + len(second), 2)
        assert [key(e) for e in third] == [5, 6]
        assert b.claim({target.sub_id: target}, 10) == [] and b.claim_head([target], 10) == []
        handled = [e.id for e in first + second + third]
        assert a.settle_head(stream_of(target), handled) == 6
        assert query(items, "SELECT COUNT(*) FROM EVENT_LEASE WHERE HOLDER IS NOT NULL") == [(0,)]
        assert b.claim_head([target], 10) == [], "all six were deleted"


def test_batches_of_several_streams_are_settled_in_one_transaction(items):
    """settle_heads: the batches of streams that ended together, one
    commit for all; a lease goes back only with a batch that releases it."""
    execute(items, "CREATE TABLE OTHERS (ID INTEGER NOT NULL PRIMARY KEY, NOTE VARCHAR(20))")
    Subs(items).ok("add", "others", "I", "rec")
    target = insert_target(items)
    execute(items, "INSERT INTO OTHERS SELECT ID, NULL FROM ITEMS")
    with Database(items) as db:
        other = next(t for t in load_targets(db) if t.table == "OTHERS")
    with Database(items) as a_db, Database(items) as b_db:
        a, b = Claimer(a_db, "a:1", 30), Claimer(b_db, "b:2", 30)
        items_batch, others_batch = a.claim_head([target], 2), a.claim_head([other], 3)
        settled = [
            Settlement(stream_of(target), [e.id for e in items_batch], release=True),
            Settlement(stream_of(other), [e.id for e in others_batch], release=False),
        ]
        assert a.settle_heads(settled) == 5
        assert [key(e) for e in b.claim_head([target], 10)] == [3, 4, 5, 6], "ITEMS's lease went back"
        assert b.claim_head([other], 10) == [], "OTHERS's lease stays"
        assert a.settle_head(stream_of(other), []) == 0
        assert [key(e) for e in b.claim_head([other], 10)] == [4, 5, 6]


def test_no_next_batch_past_an_event_that_committed_late_among_the_held_ones(items):
    """An event whose id lies among those of the batch in hand but that
    committed after its claim comes before any later batch: claim_next
    leaves the stream to claim_head."""
    with Database(items) as late, Database(items) as db:
        late.connection.begin()
        late.connection.cursor().execute("INSERT INTO ITEMS VALUES (1, NULL)")  # the first event id
        insert(items, 2, 4)
        target = next(t for t in load_targets(db) if t.action == "I")
        claimer = Claimer(db, "a:1", 30)
        first = claimer.claim_head([target], 2)
        assert [key(e) for e in first] == [2, 3]
        late.connection.commit()
        assert claimer.claim_next([target], first[-1].id, len(first), 2) == []
        claimer.settle_head(stream_of(target), [e.id for e in first])
        assert [key(e) for e in claimer.claim_head([target], 2)] == [1, 4]


def test_no_next_batch_for_a_lease_another_consumer_took_over(items):
    target = insert_target(items)
    with Database(items) as a_db, Database(items) as b_db:
        a, b = Claimer(a_db, "a:1", 0.5), Claimer(b_db, "b:2", 30)
        first = a.claim_head([target], 2)
        expired = "SELECT COUNT(*) FROM EVENT_LEASE WHERE EXPIRES_AT <= EVENT_NOW()"
        wait_until(lambda: query(items, expired) == [(3,)], 10, "the stream's lease (I, U, D) to run out")
        assert [key(e) for e in b.claim_head([target], 2)] == [1, 2]
        assert a.claim_next([target], first[-1].id, len(first), 2) == []


SPANS = "SELECT FIRST_EVENT, LAST_EVENT, TRIM(HOLDER) FROM EVENT_SPAN ORDER BY FIRST_EVENT"
RECORD_VERSIONS = "SELECT EVENT_ID, RDB$RECORD_VERSION FROM EVENT_LOG ORDER BY EVENT_ID"


def test_a_parallel_claim_leases_a_span_and_writes_no_event(items):
    """The claimed events stay as they were (no new record version); one
    EVENT_SPAN row per run holds them, and the acknowledgement deletes the
    handled events and gives the span back together."""
    target = insert_target(items)
    versions = query(items, RECORD_VERSIONS)
    with Database(items) as db:
        claimer = Claimer(db, "a:1", 30)
        events = claimer.claim({target.sub_id: target}, 4)
        assert [(key(e), e.attempt) for e in events] == [(1, 1), (2, 1), (3, 1), (4, 1)]
        assert len({e.span for e in events}) == 1
        assert query(items, RECORD_VERSIONS) == versions
        assert query(items, SPANS) == [(events[0].id, events[-1].id, "a:1")]
        status = json.loads(Subs(items).ok("status", "--json"))
        row = next(r for r in status if r["action"] == "I")
        assert (row["pending"], row["in_flight"]) == (2, 4)
        assert claimer.ack([e.id for e in events[:3]], {e.span for e in events}) == 3
    assert query(items, SPANS) == []
    assert query(items, "SELECT EVENT_ID, ATTEMPTS FROM EVENT_LOG ORDER BY EVENT_ID") == [(4, 0), (5, 0), (6, 0)]


def test_status_counts_an_event_in_flight_once_whatever_holds_it(items):
    """Two consumers' spans and a batch in hand across both (a lease its
    ordered consumer took while they ran: in flight twice, counted once);
    a failed event is failed, not pending, and in flight while it is tried
    again (as the console counts them); a dead one is dead."""
    target = insert_target(items)
    with Database(items) as a_db, Database(items) as b_db:
        a, b = Claimer(a_db, "a:1", 30), Claimer(b_db, "b:2", 30)
        first, second = a.claim({target.sub_id: target}, 2), b.claim({target.sub_id: target}, 2)
        assert [key(e) for e in first + second] == [1, 2, 3, 4]
        execute(
            items,
            "UPDATE EVENT_LEASE SET HOLDER = 'c:3', EXPIRES_AT = DATEADD(1 MINUTE TO EVENT_NOW()), "
            "FIRST_EVENT = ?, LAST_EVENT = ? WHERE SUB_ID = ?",
            params=(first[1].id, second[0].id, target.sub_id),
        )
        fifth, sixth = (
            e for (e,) in query(items, "SELECT EVENT_ID FROM EVENT_LOG WHERE EVENT_ID > ?", (second[1].id,))
        )
        failing = "UPDATE EVENT_LOG SET LAST_ERROR = 'boom', ATTEMPTS = 1 WHERE EVENT_ID = ?"
        for failed in (fifth, first[0].id):
            execute(items, failing, params=(failed,))
        execute(items, "UPDATE EVENT_LOG SET DEAD = TRUE, DEAD_AT = LOCALTIMESTAMP WHERE EVENT_ID = ?", params=(sixth,))
        status = json.loads(Subs(items).ok("status", "--json"))
        row = next(r for r in status if r["action"] == "I")
        assert (row["pending"], row["in_flight"], row["failed"], row["dead"]) == (0, 4, 1, 1)
        with a_db.transaction() as cursor:
            (summary,) = [s for s in console.overview(cursor).subscriptions if s.action == "I"]
        assert (summary.pending, summary.in_flight, summary.failed, summary.dead) == (0, 4, 1, 1)


def test_a_parallel_claim_writes_nothing_for_a_subscription_with_nothing_to_claim(items):
    """Its lease row is locked by a write only when there is a live event to
    walk: with hundreds of subscriptions, mostly idle, every claim locked
    (and left a record version on) each of them."""
    insert(items, 1, 2)
    leases = "SELECT SUB_ID, RDB$RECORD_VERSION FROM EVENT_LEASE ORDER BY SUB_ID"
    with Database(items) as db:
        targets = {t.sub_id: t for t in load_targets(db)}
        inserts = next(t.sub_id for t in targets.values() if t.action == "I")
        claimer = Claimer(db, "a:1", 30)
        claimed = claimer.claim(targets, 10)
        assert [key(e) for e in claimed] == [1, 2]
        assert [sub_id for sub_id, _ in query(items, leases)] == [inserts]
        assert claimer.claim(targets, 10) == []
        versions = query(items, leases)
        assert claimer.ack([e.id for e in claimed], {e.span for e in claimed}) == 2
        assert claimer.claim(targets, 10) == [] and claimer.claim(targets, 10, resume=True) == []
        assert query(items, leases) == versions


def test_a_run_ends_at_an_event_that_is_not_available(items):
    """An event waiting for its retry splits the claim into two spans, and is
    claimed on its own once due: spans never overlap."""
    target = insert_target(items)
    targets = {target.sub_id: target}
    execute(items, "UPDATE EVENT_LOG SET NEXT_ATTEMPT_AT = DATEADD(1 HOUR TO EVENT_NOW()) WHERE EVENT_ID = 3")
    with Database(items) as db:
        claimer = Claimer(db, "a:1", 30)
        events = claimer.claim(targets, 10)
        assert [e.id for e in events] == [1, 2, 4, 5, 6]
        assert [(first, last) for first, last, _ in query(items, SPANS)] == [(1, 2), (4, 6)]
        execute(items, "UPDATE EVENT_LOG SET NEXT_ATTEMPT_AT = NULL WHERE EVENT_ID = 3")
        assert [e.id for e in claimer.claim(targets, 10)] == [3]
        assert [(first, last) for first, last, _ in query(items, SPANS)] == [(1, 2), (3, 3), (4, 6)]


def test_a_parallel_claim_over_more_subscriptions_than_one_statement_takes_claims_them_in_turns(items):
    """Hundreds of subscriptions overflow the claim's lists of ids: the claim
    goes on through them, MAX_CLAIM_TARGETS per statement, until it has its
    fill. The others here are subscriptions that no longer exist, with the
    longest ids, before the real one."""
    target = insert_target(items)
    gone = [claims.Target(-2_000_000_000 - n, "ITEMS", "I", "t") for n in range(3 * claims.MAX_CLAIM_TARGETS)]
    targets = {t.sub_id: t for t in [*gone, target]}
    with Database(items) as db:
        claimer = Claimer(db, "a:1", 30)
        assert [key(e) for e in claimer.claim(targets, 4)] == [1, 2, 3, 4]
        assert [key(e) for e in claimer.claim(targets, 10, resume=True)] == [5, 6]
        assert claimer.conflicts == 0


def test_a_span_taken_over_counts_the_attempt_of_the_events_left_in_it(items):
    target = insert_target(items)
    targets = {target.sub_id: target}
    with Database(items) as a_db, Database(items) as b_db:
        a, b = Claimer(a_db, "a:1", 0.5), Claimer(b_db, "b:2", 30)
        held = a.claim(targets, 3)  # then "a" dies with them in hand
        assert a.ack([held[0].id]) == 1
        assert b.claim(targets, 10) and b.conflicts == 0
        wait_until(lambda: query(items, "SELECT COUNT(*) FROM EVENT_SPAN WHERE EXPIRES_AT <= EVENT_NOW()") == [(1,)])
        again = b.claim(targets, 10)
        assert [(key(e), e.attempt) for e in again] == [(2, 2), (3, 2)]
    assert query(items, "SELECT COUNT(*) FROM EVENT_SPAN WHERE HOLDER = 'a:1'") == [(0,)]


def test_a_failed_parallel_attempt_is_counted_once(items):
    target = insert_target(items)
    targets = {target.sub_id: target}
    with Database(items) as db:
        claimer = Claimer(db, "a:1", 30)
        first, *rest = claimer.claim(targets, 3)
        claimer.fail(first.id, "boom", 0, dead=False)
        claimer.ack([e.id for e in rest], {first.span})
        assert query(items, "SELECT ATTEMPTS, LAST_ERROR FROM EVENT_LOG WHERE EVENT_ID = ?", (first.id,)) == [
            (1, "boom")
        ]
        assert [(e.id, e.attempt) for e in claimer.claim(targets, 1)] == [(first.id, 2)]


def test_a_subscription_another_claimer_is_claiming_is_passed_over(items):
    """Its EVENT_LEASE row locked by a claim not committed yet: the claim
    takes the other subscriptions' events, counts a conflict, never waits."""
    insert(items, 1, 2)
    execute(items, "UPDATE ITEMS SET NOTE = 'x' WHERE ID = 1")
    with Database(items) as a_db, Database(items) as b_db:
        targets = {t.sub_id: t for t in load_targets(a_db) if t.table == "ITEMS"}
        inserts = next(t.sub_id for t in targets.values() if t.action == "I")
        a = Claimer(a_db, "a:1", 30)
        with b_db.transaction() as cursor:
            cursor.execute("UPDATE OR INSERT INTO EVENT_LEASE (SUB_ID) VALUES (?) MATCHING (SUB_ID)", (inserts,))
            assert [(e.action, key(e)) for e in a.claim(targets, 10)] == [("U", 1)]
            assert a.conflicts == 1
        assert [(e.action, key(e)) for e in a.claim(targets, 10)] == [("I", 1), ("I", 2)]
        Subs(items).ok("pause", "items", "IU", "rec")
        insert(items, 3, 1)
        assert a.claim(targets, 10) == [] and a.conflicts == 1, "a paused subscription is no conflict"


def test_parallel_claims_take_turns_among_subscriptions(items):
    """A claim starts with the subscription after the one the last claim
    started with: a backlog of one does not hold back the others."""
    insert(items, 1, 5)
    execute(items, "UPDATE ITEMS SET NOTE = 'x'")
    with Database(items) as db:
        targets = {t.sub_id: t for t in load_targets(db) if t.table == "ITEMS" and t.action in "IU"}
        claimer = Claimer(db, "a:1", 30)
        assert {e.action for e in claimer.claim(targets, 3)} == {"I"}
        assert {e.action for e in claimer.claim(targets, 3)} == {"U"}


def retry_later(settings, event_id: int, later: bool = True) -> None:
    """Make an event wait for its retry for an hour, or be due again."""
    due = "DATEADD(1 HOUR TO EVENT_NOW())" if later else "NULL"
    execute(settings, f"UPDATE EVENT_LOG SET NEXT_ATTEMPT_AT = {due} WHERE EVENT_ID = ?", params=(event_id,))


def test_a_parallel_claim_in_a_backlog_resumes_where_the_last_one_stopped(items, monkeypatch):
    """After a full claim, a claim the caller lets resume starts after the
    events claimed so far: an event that became available behind them (here
    one whose retry fell due unnoticed) waits for a claim that walks from
    the first event: one not allowed to resume, one after a short claim, or
    the first once WALK_ALL_EVERY has passed."""
    insert(items, 1, 7)  # events 1-7
    retry_later(items, 1)
    with Database(items) as db:
        target = next(t for t in load_targets(db) if t.action == "I")
        targets = {target.sub_id: target}
        claimer = Claimer(db, "a:1", 30)
        assert [e.id for e in claimer.claim(targets, 2, resume=True)] == [2, 3]
        retry_later(items, 1, later=False)
        assert [e.id for e in claimer.claim(targets, 2, resume=True)] == [4, 5]
        assert [e.id for e in claimer.claim(targets, 2, resume=False)] == [1, 6]

        retry_later(items, 7)
        assert claimer.claim(targets, 1, resume=True) == [], "7 waits: the claim is short"
        retry_later(items, 7, later=False)
        assert [e.id for e in claimer.claim(targets, 1, resume=True)] == [7]

        insert(items, 8, 2)  # events 8-9
        retry_later(items, 8)
        assert [e.id for e in claimer.claim(targets, 1, resume=True)] == [9]
        retry_later(items, 8, later=False)
        monkeypatch.setattr(claims, "WALK_ALL_EVERY", 0.0)
        assert [e.id for e in claimer.claim(targets, 1, resume=True)] == [8]


class CountingClaimer(Claimer):
    """Notes what each probe asked of."""

    def __init__(self, db: Database, owner: str, lease_seconds: float) -> None:
        super().__init__(db, owner, lease_seconds)
        self.asked: list[list[int]] = []

    def ready(self, among: Sequence[int]) -> set[int]:
        self.asked.append(sorted(among))
        return super().ready(among)


def test_idle_streams_are_probed_again_only_when_something_may_have_changed(items):
    """Ordered mode probes the heads of every subscription after a
    notification or a due retry (forget), or when that probe is PROBE_EVERY
    old; in between only those of the streams that became idle since its
    last look, and otherwise it goes by what it found. A lone idle stream
    is not probed: its claim reads its head."""
    for table in ("OTHERS", "MORE"):
        execute(items, f"CREATE TABLE {table} (ID INTEGER NOT NULL PRIMARY KEY, NOTE VARCHAR(20))")
        Subs(items).ok("add", table, "I", "rec")
    with Database(items) as db:
        by_stream = streams(load_targets(db))
        keys = [("ITEMS", "rec"), ("OTHERS", "rec"), ("MORE", "rec")]
        all_three = {key: by_stream[key] for key in keys}
        others = {key: by_stream[key] for key in keys[1:]}
        claimer = CountingClaimer(db, "a:1", 30)
        probe = HeadsProbe(every=0.5)
        every = [1, 2, 3, 4, 5]  # ITEMS I, U, D; OTHERS I; MORE I
        assert probe.ready(claimer, all_three) == set() and claimer.asked == [every]
        insert(items, 1, 1)
        assert probe.ready(claimer, all_three) == set() and claimer.asked == [every], "went by the last probe"
        probe.forget()
        assert probe.ready(claimer, all_three) == {1} and claimer.asked == [every, every]
        execute(items, "INSERT INTO OTHERS VALUES (1, NULL)")
        assert probe.ready(claimer, others) == {1} and len(claimer.asked) == 2, "fewer idle streams: no probe"
        assert probe.ready(claimer, all_three) == {1} and claimer.asked[2:] == [[1, 2, 3]], "ITEMS idle again: it alone"
        assert probe.ready(claimer, {}) == set() and len(claimer.asked) == 3, "nothing idle: no probe"
        time.sleep(0.5)
        assert probe.ready(claimer, others) == {4} and claimer.asked[3:] == [[4, 5]], "the last probe was too old"
        lone = {keys[1]: by_stream[keys[1]]}
        assert probe.ready(claimer, lone) == {4} and len(claimer.asked) == 4, "a lone idle stream: no probe"
        assert probe.ready(claimer, others) == set() and claimer.asked[4:] == [[5]], "OTHERS' claim looked at it"


def test_after_forget_the_stream_that_last_had_events_is_claimed_before_the_probe(items):
    """After a notification the probe's transaction would delay every
    stream's claim: the stream whose claim last found events is claimed at
    once, and the next look probes every idle stream, that one too."""
    execute(items, "CREATE TABLE OTHERS (ID INTEGER NOT NULL PRIMARY KEY, NOTE VARCHAR(20))")
    Subs(items).ok("add", "others", "I", "rec")
    with Database(items) as db:
        by_stream = streams(load_targets(db))
        both = {key: by_stream[key] for key in (("ITEMS", "rec"), ("OTHERS", "rec"))}
        claimer = CountingClaimer(db, "a:1", 30)
        probe = HeadsProbe(every=60)
        assert probe.ready(claimer, both) == set() and claimer.asked == [[1, 2, 3, 4]], "nothing claimed yet"
        probe.claimed(("OTHERS", "rec"))
        probe.forget()
        assert probe.ready(claimer, both) == {4} and len(claimer.asked) == 1 and probe.probe_due
        insert(items, 1, 1)
        assert probe.ready(claimer, both) == {1} and claimer.asked[1:] == [[1, 2, 3, 4]] and not probe.probe_due
        probe.forget()
        assert probe.ready(claimer, {("ITEMS", "rec"): both["ITEMS", "rec"]}) == {1, 2, 3}, "OTHERS is busy"
        assert len(claimer.asked) == 2 and not probe.probe_due
        probe.forget()
        probe.claimed(("ITEMS", "rec"))
        assert probe.ready(claimer, both) == {1, 2, 3} and probe.probe_due
        assert probe.ready(claimer, both) == {1} and claimer.asked[2:] == [[1, 2, 3, 4]], "the guess was made"


def test_a_stream_claim_reads_large_values_before_it_looks_up_a_new_subscription(settings):
    """A subscription added to the stream since its targets were read is
    looked up on the claim's cursor: the large values it claimed (BLOB
    readers past the driver's 64 KB) are read before that, or are lost."""
    execute(settings, "CREATE TABLE DOCS (ID INTEGER NOT NULL PRIMARY KEY, BODY BLOB SUB_TYPE TEXT)")
    Subs(settings).ok("add", "docs", "I", "mail")
    with Database(settings) as db:
        (inserts,) = load_targets(db)
    Subs(settings).ok("add", "docs", "U", "mail")
    body = "é" * 100_000
    execute(settings, "INSERT INTO DOCS VALUES (1, ?)", params=(body,))
    execute(settings, "UPDATE DOCS SET BODY = BODY || 'x'")
    with Database(settings) as db:
        claimer = Claimer(db, "a:1", 30)
        events = [claimed.event()[0] for claimed in claimer.claim_head([inserts], 10)]
        claimer.free_statements()
    assert [(e.action, e.new["BODY"]) for e in events] == [("I", body), ("U", body + "x")]


def test_a_claim_stops_once_its_events_carry_16_mb(settings):
    """Both kinds of claim, on events of 6 MB: the one that reaches 16 MB is
    the last (a batch of 100 such events took 1.2 GB in the listener)."""
    execute(settings, "CREATE TABLE DOCS (ID INTEGER NOT NULL PRIMARY KEY, BODY BLOB SUB_TYPE BINARY)")
    Subs(settings).ok("add", "docs", "I", "mail")
    for row in range(1, 6):
        execute(settings, "INSERT INTO DOCS VALUES (?, ?)", params=(row, bytes([row]) * 6_000_000))
    with Database(settings) as db:
        (target,) = load_targets(db)
        claimer = Claimer(db, "a:1", 30)
        ordered = claimer.claim_head([target], 100)
        assert [key(e) for e in ordered] == [1, 2, 3]
        claimer.settle_head(stream_of(target), [e.id for e in ordered])
        parallel = claimer.claim({target.sub_id: target}, 100)
        assert [key(e) for e in parallel] == [4, 5]
        assert all(e.event()[0].new["BODY"] == bytes([key(e)]) * 6_000_000 for e in ordered + parallel)
        claimer.free_statements()


def set_subs_zone(settings, offset: str) -> None:
    """Make subs's time zone a fixed offset. Attachments take it as they
    attach, so changing it between two moves the wall clock of the second
    as a daylight saving time change does."""
    execute(
        settings,
        "CREATE OR ALTER FUNCTION EVENT_TIME_ZONE RETURNS VARCHAR(63) CHARACTER SET UTF8 "
        f"AS BEGIN RETURN '{offset}'; END",
    )


def test_leases_and_retry_times_outlive_a_daylight_saving_time_change(items, engine):
    """Until version 23 leases and retry times ran on LOCALTIMESTAMP, the
    wall time of subs's zone. When the clocks went forward, every lease
    ended at once (another consumer took a batch still in hand) and retries
    came an hour early; when they went back, a released lease stayed held
    for an hour. EVENT_NOW() is UTC on Firebird 4 and later."""
    if engine == "fb3":
        pytest.skip("Firebird 3 has no time zones: EVENT_NOW() is its LOCALTIMESTAMP")
    set_subs_zone(items, "+01:00")
    inserts = insert_target(items)
    execute(items, "UPDATE ITEMS SET NOTE = 'x' WHERE ID = 1")
    with Database(items) as db:
        updates = next(t for t in load_targets(db) if t.action == "U")
        a = Claimer(db, "a:1", 30)
        assert [key(e) for e in a.claim_head([inserts], 2)] == [1, 2]
        (failing,) = a.claim({updates.sub_id: updates}, 10)
        a.fail(failing.id, "boom", 60, dead=False)
        assert a.ack([], {failing.span}) == 0

    set_subs_zone(items, "+02:00")  # the clocks go forward
    with Database(items) as db:
        b = Claimer(db, "b:2", 30)
        assert b.claim_head([inserts], 10) == [], "a's lease ended when the clocks went forward"
        assert b.claim({updates.sub_id: updates}, 10) == [], "a retry due in a minute came at once"
        Claimer(db, "a:1", 30).settle_head(stream_of(inserts), [])

    set_subs_zone(items, "+01:00")  # and back
    with Database(items) as db:
        b = Claimer(db, "b:2", 30)
        assert [key(e) for e in b.claim_head([inserts], 2)] == [1, 2], "a released lease stayed held"
