"""The claim index stays cheap: dead events are out of its way, and
rebuilding it drops the empty pages that deleting handled events leaves
behind, without ever leaving it inactive or failing an application's
write."""

from __future__ import annotations

import itertools
import logging
import multiprocessing
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from firebird.driver import DatabaseError

from subscriptions.db import sql
from subscriptions.db.connection import Database, nowait_tpb, protected_write_tpb
from subscriptions.db.errors import first_line, is_conflict
from subscriptions.db.settings import ConnectionSettings
from subscriptions.delivery import housekeeping, reaper, startup, stats
from subscriptions.delivery.claims import Claimer, load_targets, stream_of
from subscriptions.ops import repair

from conftest import EngineWedged, execute, query, queue_index_segments
from listening import insert, supervise
from soak_chaos import py_spy_dump

HISTORY = """
EXECUTE BLOCK (SUB INTEGER = ?, N INTEGER = ?) AS
DECLARE I INTEGER = 0;
BEGIN
    WHILE (I < N) DO
    BEGIN
        INSERT INTO EVENT_LOG (SUB_ID, PK_ROW) VALUES (:SUB, '2:IDi1:0');
        I = I + 1;
    END
END
"""


def fetches_per_claim(settings, ordered: bool = True) -> int:
    """Page fetches of one single-event claim of the subscription's head, or
    in parallel mode of its subscriptions (the second claim on the attachment:
    the first also prepares the statement)."""
    with Database(settings) as db:
        claimer = Claimer(db, "test:1", 30)
        targets = load_targets(db)
        for _ in range(2):
            before = db.connection.info.fetches
            if ordered:
                events = claimer.claim_head([targets[0]], 1)
            else:
                events = claimer.claim({t.sub_id: t for t in targets}, 1)
            fetches = db.connection.info.fetches - before
            assert len(events) == 1
            if ordered:
                claimer.settle_head(stream_of(targets[0]), [])
            else:
                claimer.ack([], {e.span for e in events})
    return fetches


def settled_fetches_per_claim(settings, ordered: bool = True) -> int:
    """The fewest page fetches of three claims. A claim soon after the log or
    its index changed may still walk garbage that the collector has not
    reached (the first claim after the deletes fetches more, and collects
    it). With another test process busy on the Firebird 3 server, the claim
    after the rebuild once fetched 292 pages instead of about 170, and a
    parallel claim beside dead events 236 against 81 without; the cause was
    not found, and a single figure made the tests fail."""
    return min(fetches_per_claim(settings, ordered) for _ in range(3))


def test_dead_events_cost_claims_nothing(items):
    """Dead events stay until purged; a claim must not read them one by one
    (with the index of schema version 2 each claim read all 3,000)."""
    assert queue_index_segments(items) == ["SUB_ID", "DEAD", "EVENT_ID"]
    (sub_id,) = query(items, "SELECT SUB_ID FROM EVENT_SUBSCRIBER WHERE ACTION = 'I'")[0]
    insert(items, 1, 1)
    without_dead = settled_fetches_per_claim(items), settled_fetches_per_claim(items, ordered=False)
    execute(items, "DELETE FROM EVENT_LOG")
    execute(items, HISTORY, params=(sub_id, 3_000))
    execute(items, "UPDATE EVENT_LOG SET DEAD = TRUE, DEAD_AT = LOCALTIMESTAMP")
    insert(items, 2, 1)
    query(items, "SELECT COUNT(*) FROM EVENT_LOG")  # collects the garbage of the updates
    with_dead = settled_fetches_per_claim(items), settled_fetches_per_claim(items, ordered=False)
    assert with_dead[0] < without_dead[0] + 30, (with_dead, without_dead)
    assert with_dead[1] < without_dead[1] + 30, (with_dead, without_dead)


def fetches_per_next_claim(settings) -> int:
    """Page fetches of a claim_next after a one-event claim_head (the
    second round on the attachment)."""
    with Database(settings) as db:
        claimer = Claimer(db, "test:1", 30)
        target = next(t for t in load_targets(db) if t.action == "I")
        for _ in range(2):
            head = claimer.claim_head([target], 1)
            before = db.connection.info.fetches
            following = claimer.claim_next([target], head[-1].id, 1, 1)
            fetches = db.connection.info.fetches - before
            assert len(following) == 1
            claimer.settle_head(stream_of(target), [])
    return fetches


def test_dead_events_cost_the_next_ordered_claim_nothing(items):
    """claim_next counts the live events up to the batch in hand; on
    Firebird 3 that count read the whole log up to it on the primary key."""
    (sub_id,) = query(items, "SELECT SUB_ID FROM EVENT_SUBSCRIBER WHERE ACTION = 'I'")[0]
    insert(items, 1, 2)
    without_dead = fetches_per_next_claim(items)
    execute(items, "DELETE FROM EVENT_LOG")
    execute(items, HISTORY, params=(sub_id, 3_000))
    execute(items, "UPDATE EVENT_LOG SET DEAD = TRUE, DEAD_AT = LOCALTIMESTAMP")
    insert(items, 3, 2)
    query(items, "SELECT COUNT(*) FROM EVENT_LOG")  # collects the garbage of the updates
    assert fetches_per_next_claim(items) < without_dead + 30, without_dead


def index_is_active() -> str:
    return "SELECT COALESCE(RDB$INDEX_INACTIVE, 0) FROM RDB$INDICES WHERE RDB$INDEX_NAME = 'IX_EVENT_LOG_QUEUE'"


def test_rebuild_drops_the_pages_left_by_handled_events(items):
    (sub_id,) = query(items, "SELECT SUB_ID FROM EVENT_SUBSCRIBER WHERE ACTION = 'I'")[0]
    execute(items, HISTORY, params=(sub_id, 50_000))
    execute(items, "DELETE FROM EVENT_LOG")
    insert(items, 1, 1)
    with_history = settled_fetches_per_claim(items)
    with Database(items) as db:
        assert housekeeping.rebuild_queue_index(db)
    rebuilt = settled_fetches_per_claim(items)
    # Typically 154 against 319 fetches (fb5) and 171 against 346 (fb3): half,
    # give or take a few fetches, which is why "under half" failed once in CI
    # at (171, 342). Under two thirds still tells a rebuild from none.
    assert rebuilt * 3 < with_history * 2, (rebuilt, with_history)
    assert query(items, index_is_active()) == [(0,)]


def test_rebuild_gives_way_to_an_open_writer_and_leaves_the_index_usable(items, caplog):
    """Until the rebuild held the table from its start, the engine refused
    its commit here ("object TABLE EVENT_LOG is in use") with the index
    already gone from the table, though still active in the catalogue."""
    caplog.set_level(logging.DEBUG, "subs.housekeeping")
    with Database(items) as writer, Database(items) as db:
        writer.connection.begin()
        writer.connection.cursor().execute("INSERT INTO ITEMS VALUES (1, '')")  # its trigger logs an event
        assert not housekeeping.rebuild_queue_index(db)
        assert housekeeping.queue_index_usable(db)
        writer.connection.commit()
        assert "EVENT_LOG is in use" in caplog.text
        assert query(items, index_is_active()) == [(0,)]
        assert housekeeping.rebuild_queue_index(db)
        assert housekeeping.queue_index_usable(db)


class HeldLikeARebuild:
    """A transaction holding EVENT_LOG as rebuild_queue_index does (its TPB
    and statements) for as long as the test wants, where the real one
    holds it for the milliseconds of the index build."""

    def __init__(self, settings: ConnectionSettings) -> None:
        self.db = Database(settings)
        self.db.connection.begin(protected_write_tpb("EVENT_LOG"))
        statements = sql.load("housekeeping")
        cursor = self.db.connection.cursor()
        cursor.execute(statements["deactivate_queue_index"])
        cursor.execute(statements["activate_queue_index"])

    def commit(self) -> None:
        self.db.connection.commit()
        self.db.close()


def write_in_a_no_wait_transaction(settings: ConnectionSettings, item_id: int) -> None:
    with Database(settings) as app, app.transaction(nowait_tpb()) as cursor:
        cursor.execute("INSERT INTO ITEMS VALUES (?, 'no wait')", (item_id,))


def test_an_application_write_in_a_no_wait_transaction_outlasts_a_rebuild(items):
    """Until schema version 24 the capture trigger's write to EVENT_LOG
    failed at once while a rebuild held the table ("lock conflict on no
    wait transaction / Acquire lock for relation (EVENT_LOG) failed"), and
    with it the application's write, which succeeds without subs."""
    rebuild = HeldLikeARebuild(items)
    outcome: list[BaseException | None] = []

    def write() -> None:
        try:
            write_in_a_no_wait_transaction(items, 1)
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - the thread hands it to the test
            outcome.append(exc)

    writer = threading.Thread(target=write)
    writer.start()
    time.sleep(0.5)
    assert writer.is_alive() and not outcome  # the trigger writes again and again meanwhile
    rebuild.commit()
    writer.join(10)
    assert outcome == [None]
    assert query(items, "SELECT COUNT(*) FROM EVENT_LOG") == [(1,)]
    assert query(items, "SELECT COUNT(*) FROM ITEMS") == [(1,)]
    with Database(items) as db:
        assert housekeeping.queue_index_usable(db)


def test_an_application_write_in_a_no_wait_transaction_gives_up_on_a_table_held_for_long(items):
    """The trigger tries for 2 s: a transaction that holds EVENT_LOG longer
    (a session that reserved it and did not commit) fails the write as it
    did before, with the conflict, and logs nothing."""
    rebuild = HeldLikeARebuild(items)
    try:
        started = time.monotonic()
        with pytest.raises(DatabaseError, match="lock conflict on no wait transaction"):
            write_in_a_no_wait_transaction(items, 1)
        assert 2 <= time.monotonic() - started < 10
    finally:
        rebuild.commit()
    assert query(items, "SELECT COUNT(*) FROM EVENT_LOG") == [(0,)]
    assert query(items, "SELECT COUNT(*) FROM ITEMS") == [(0,)]


def lose_the_claim_index(settings, *, check: bool = True) -> None:
    """Leave the claim index as a rebuild refused at its commit did before
    the rebuild held the table: active in the catalogue, gone from the table
    (docs/FIREBIRD-BUGS.md). ``check`` it is gone: not while a listener
    that may rebuild it at once runs."""
    statements = sql.load("housekeeping")
    with Database(settings) as writer, Database(settings) as db:
        writer.connection.begin()
        writer.connection.cursor().execute("INSERT INTO ITEMS VALUES (0, '')")
        with pytest.raises(DatabaseError, match="in use"):
            with db.transaction(nowait_tpb()) as cursor:
                cursor.execute(statements["deactivate_queue_index"])
                cursor.execute(statements["activate_queue_index"])
        writer.connection.rollback()
        if check:
            assert not housekeeping.queue_index_usable(db)
            assert query(settings, index_is_active()) == [(0,)]


def test_a_lost_claim_index_is_rebuilt_whatever_the_length_of_the_log(items, caplog):
    insert(items, 1, 5)
    lose_the_claim_index(items)
    with Database(items) as db:
        assert housekeeping.rebuild_queue_index(db, max_live=1)
        assert housekeeping.queue_index_usable(db)
    assert "claim index IX_EVENT_LOG_QUEUE was unusable (claims read the whole log); rebuilt it" in caplog.text


def test_a_repair_waits_a_while_for_the_writers(items, caplog, monkeypatch):
    monkeypatch.setattr(housekeeping, "REPAIR_WAIT", 1)
    lose_the_claim_index(items)
    with Database(items) as writer, Database(items) as db:
        writer.connection.begin()
        writer.connection.cursor().execute("INSERT INTO ITEMS VALUES (1, '')")
        assert not housekeeping.rebuild_queue_index(db)  # the writer outlasts the wait
        assert "unusable and EVENT_LOG is in use" in caplog.text
        assert not housekeeping.queue_index_usable(db)
        threading.Timer(0.3, writer.connection.commit).start()
        assert housekeeping.rebuild_queue_index(db)  # the writer commits within it
        assert housekeeping.queue_index_usable(db)


def test_the_listener_rebuilds_a_lost_claim_index(items, tmp_path, monkeypatch, caplog):
    """The supervisor's housekeeping checks the index with every backlog sample."""
    monkeypatch.setattr(stats, "RECORD_INTERVAL", 0.2)
    monkeypatch.setattr(stats, "BACKLOG_INTERVAL", 0.5)
    caplog.set_level(logging.INFO, "subs.housekeeping")

    def drive(supervisor, record) -> None:
        lose_the_claim_index(items, check=False)
        deadline = time.monotonic() + 60
        while "rebuilt it" not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.05)

    supervise(items, tmp_path, monkeypatch, drive, poll=0.3)
    assert "claim index IX_EVENT_LOG_QUEUE was unusable" in caplog.text
    with Database(items) as db:
        assert housekeeping.queue_index_usable(db)


def test_rebuild_waits_while_the_log_is_long(items):
    insert(items, 1, 5)
    with Database(items) as db:
        assert not housekeeping.rebuild_queue_index(db, max_live=4)
        assert housekeeping.rebuild_queue_index(db, max_live=5)


def test_the_listener_rebuilds_after_enough_handled_events(items, tmp_path, monkeypatch, caplog):
    """The supervisor's housekeeping thread, in-process; its workers are real."""
    monkeypatch.setattr(housekeeping, "REBUILD_EVERY", 20)
    monkeypatch.setattr(reaper, "REAP_INTERVAL", 0.3)
    caplog.set_level(logging.INFO, "subs.housekeeping")

    def drive(supervisor, record) -> None:
        insert(items, 1, 30)
        deadline = time.monotonic() + 60
        while "rebuilt the claim index" not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.05)

    supervisor, _ = supervise(items, tmp_path, monkeypatch, drive, poll=0.3, batch=5)
    assert "rebuilt the claim index" in caplog.text
    assert supervisor.handled_since_rebuild < 20
    assert query(items, index_is_active()) == [(0,)]


class AnotherListenerRebuilding:
    """Another attachment rebuilding the claim index every ``every`` seconds
    while the ``with`` block runs (a listener does it once per 50,000
    events); ``rebuilds`` counts them."""

    def __init__(self, settings: ConnectionSettings, every: float) -> None:
        self.settings = settings
        self.every = every
        self.rebuilds = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._rebuild_again_and_again)

    def _rebuild_again_and_again(self) -> None:
        with Database(self.settings) as other:
            while not self._stop.wait(self.every):
                self.rebuilds += housekeeping.rebuild_queue_index(other, max_live=10_000)

    def __enter__(self) -> AnotherListenerRebuilding:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()


SCENARIO_TIMEOUT = 120  # seconds; a scenario takes about 5 (3 of work, the child's start-up), at most 60 of work


def in_a_child(scenario: Callable[[ConnectionSettings], None], settings: ConnectionSettings, tmp_path: Path) -> None:
    """Run ``scenario(settings)`` in a child process, killed after
    SCENARIO_TIMEOUT seconds: its walks and the other listener's rebuilds
    are attachments of one process, where the engine can leave a claim
    spinning inside it for minutes on end (docs/FIREBIRD-BUGS.md, 7). A
    wedged child raises EngineWedged with its stacks; its failures fail
    the test."""
    child = multiprocessing.get_context("spawn").Process(target=scenario, args=(settings,))
    child.start()
    child.join(SCENARIO_TIMEOUT)
    if child.is_alive():
        stacks = py_spy_dump(child.pid, tmp_path / "stacks.txt")
        child.kill()
        child.join()
        raise EngineWedged(f"the scenario did not end in {SCENARIO_TIMEOUT} s; its stacks:\n{stacks}")
    assert child.exitcode == 0, f"the scenario failed (exit code {child.exitcode}); its traceback is in its stderr"


def enough(other: AnotherListenerRebuilding, done: int, started: float) -> bool:
    """Whether a scenario started at ``started`` has run long enough: 3 s
    and 10 rebuilds beside 100 events done, however slow the machine (a
    fixed 3 s gave 7 rebuilds on a loaded CI machine). One that gets
    nowhere still ends, at 60 s, and fails its assertions."""
    elapsed = time.monotonic() - started
    return elapsed >= 60 or (elapsed >= 3 and other.rebuilds >= 10 and done >= 100)


def settled(settle: Callable[[], int]) -> int:
    """``settle`` tried again on each conflict, as Dispatcher._settle does."""
    while True:
        try:
            return settle()
        except DatabaseError as exc:
            if not is_conflict(exc):
                raise


def claims_while_rebuilding(settings: ConnectionSettings) -> None:
    insert(settings, 1, 2_000)
    handled = 0
    with Database(settings) as db:
        claimer = Claimer(db, "a:1", 30)
        targets = {t.sub_id: t for t in load_targets(db)}
        with AnotherListenerRebuilding(settings, every=0.02) as other:
            started = time.monotonic()
            while not enough(other, handled, started):
                claimer.ready(list(targets))
                events = claimer.claim(targets, 20)
                handled += settled(lambda: claimer.ack([e.id for e in events[:10]], {e.span for e in events}))
        insert(settings, 10_001, 10)
        conflicts = claimer.conflicts
        claimer.ready(list(targets))
        events = claimer.claim(targets, 10)
        assert len(events) == 10 and claimer.conflicts == conflicts, "statements prepared before a rebuild"
    assert other.rebuilds >= 10 and handled >= 100, (other.rebuilds, handled)


def test_claims_go_on_while_another_listener_rebuilds_the_index(items, tmp_path):
    """A statement walking the index while another attachment rebuilds it
    fails with "index unexpectedly deleted"; in a benchmark with two
    listeners that restarted one's claimer and failed the 400 events it
    held. Claims, probes and settling take it as a conflict and try again,
    with their statements prepared again: one prepared before the rebuild
    can fail that way for good (then a claimer found nothing, for ever).
    On Firebird 3 a statement that names the index in its plan fails to
    prepare during a rebuild ("there is no index"): the same conflict."""
    in_a_child(claims_while_rebuilding, items, tmp_path)


def no_wait_writes_while_rebuilding(settings: ConnectionSettings) -> None:
    committed: list[int] = []
    failures: list[str] = []
    stop = threading.Event()

    def write(first_id: int) -> None:
        with Database(settings) as app:
            for item_id in itertools.count(first_id):
                if stop.wait(0.002):  # gaps in which a rebuild can start
                    return
                try:
                    with app.transaction(nowait_tpb()) as cursor:
                        cursor.execute("INSERT INTO ITEMS VALUES (?, 'no wait')", (item_id,))
                    committed.append(item_id)
                except DatabaseError as exc:
                    failures.append(first_line(exc))

    with AnotherListenerRebuilding(settings, every=0.02) as other:
        writers = [threading.Thread(target=write, args=(first_id,)) for first_id in (1, 1_000_001)]
        for writer in writers:
            writer.start()
        started = time.monotonic()
        while not enough(other, len(committed), started):
            time.sleep(0.05)
        stop.set()
        for writer in writers:
            writer.join()
    assert not failures, failures[:3]
    assert other.rebuilds >= 10 and len(committed) >= 100, (other.rebuilds, len(committed))
    logged = query(
        settings, "SELECT COUNT(*) FROM EVENT_LOG E JOIN EVENT_SUBSCRIBER S ON S.SUB_ID = E.SUB_ID WHERE S.ACTION = 'I'"
    )
    assert logged == [(len(committed),)]


def test_application_writes_in_no_wait_transactions_go_on_while_a_listener_rebuilds_the_index(items, tmp_path):
    """The same, end to end: the real rebuild, every 20 ms, beside two
    writers whose NO WAIT transactions each insert one subscribed row."""
    in_a_child(no_wait_writes_while_rebuilding, items, tmp_path)


def sweeps_while_rebuilding(settings: ConnectionSettings) -> None:
    insert(settings, 1, 2_000)
    sweeps = 0
    with Database(settings) as db, AnotherListenerRebuilding(settings, every=0.01) as other:
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            execute(settings, "INSERT INTO EVENT_LOG (SUB_ID, PK_ROW) VALUES (999, 'of a purged subscription')")
            assert startup.delete_orphans(db) == 1
            repair.retry(db, everything=True)
            repair.purge(db, 3600)
            sweeps += 1
    assert other.rebuilds >= 10 and sweeps >= 10, (other.rebuilds, sweeps)


def test_the_start_up_sweep_retry_and_purge_go_on_while_another_listener_rebuilds_the_index(items, tmp_path):
    """They walk the claim index too. A benchmark starting two listeners at
    once failed one's start-up: "index unexpectedly deleted" in the sweep for
    events of purged subscriptions, while the other rebuilt the index."""
    in_a_child(sweeps_while_rebuilding, items, tmp_path)
