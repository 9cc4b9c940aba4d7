"""A transaction that holds subs's rows and does not end (an isql session
that did not commit, or a dead process's attachment a server keeps). Claims
pass the subscription over, settling waits for it, and the listener says so
after LOCKED_OUT_AFTER, naming what waits and what to do, then says when
they go through again; a drain gives up after its patience; a command gives
up after LOCK_WAIT with one line."""

from __future__ import annotations

import re
import time

import pytest

from subscriptions.cli import LOCK_WAIT
from subscriptions.delivery.lockouts import LOCKED_OUT_AFTER, Lockouts

from conftest import Subs, assert_one_line_error, execute, query, uncommitted, wait_until
from listening import Listener, handled, insert, remaining

FIRST_EVENT = "UPDATE EVENT_LOG SET ATTEMPTS = ATTEMPTS WHERE EVENT_ID = (SELECT MIN(EVENT_ID) FROM EVENT_LOG)"


@pytest.mark.parametrize("mode", ["ordered", "parallel"])
def test_a_lease_row_held_by_an_open_transaction_is_reported_then_served(items, tmp_path, listeners, mode) -> None:
    (sub_id,) = query(items, "SELECT SUB_ID FROM EVENT_SUBSCRIBER WHERE ACTION = 'I'")[0]
    execute(items, f"UPDATE OR INSERT INTO EVENT_LEASE (SUB_ID) VALUES ({sub_id}) MATCHING (SUB_ID)")
    insert(items, 1, 3)
    with uncommitted(items, "UPDATE EVENT_LEASE SET HOLDER = HOLDER WHERE SUB_ID = ?", sub_id):
        listener = Listener(items, tmp_path, "--mode", mode, "--poll", "0.5")
        listeners.append(listener)
        locked_out = "stream ITEMS rec" if mode == "ordered" else f"subscription {sub_id} (ITEMS I rec)"
        warning = f"claims of {locked_out} met another transaction's lock for"
        wait_until(lambda: warning in listener.output(), LOCKED_OUT_AFTER + 30, "the lockout warning")
        assert "end the transaction that holds it (MON$TRANSACTIONS lists the open ones)" in listener.output()
        assert handled(listener.lines()) == []
        assert remaining(items) == 3
    listener.wait_for(lambda lines: len(handled(lines)) == 3)
    wait_until(lambda: "go through again" in listener.output(), 30, "the all-clear")
    assert f"claims of {locked_out} go through again" in listener.output()
    assert listener.output().count("met another transaction's lock") == 1
    assert "Traceback" not in listener.output()


@pytest.mark.parametrize("mode", ["ordered", "parallel"])
def test_settling_waits_for_an_event_another_transaction_holds_and_says_so(items, tmp_path, listeners, mode) -> None:
    """An isql session that changed an event and did not commit: the
    listener handles the events, waits to acknowledge them (a second at a
    time, stamping its progress, so it is not taken for stuck and killed),
    warns, and acknowledges them once that transaction ends: each handled
    once."""
    insert(items, 1, 3)
    with uncommitted(items, FIRST_EVENT):
        listener = Listener(items, tmp_path, "--mode", mode, "--poll", "0.5")
        listeners.append(listener)
        warning = "settlements of handled and failed events met another transaction's lock for"
        wait_until(lambda: warning in listener.output(), LOCKED_OUT_AFTER + 30, "the lockout warning")
        assert "this listener waits until that transaction ends" in listener.output()
        assert remaining(items) == 3
    wait_until(lambda: remaining(items) == 0, 30, "the acknowledgements")
    listener.wait_for(lambda lines: len(handled(lines)) == 3)
    assert len(set(handled(listener.lines()))) == 3
    assert [line["attempt"] for line in listener.lines()] == [1] * len(listener.lines())
    wait_until(lambda: "go through again" in listener.output(), 30, "the all-clear")
    assert "settlements of handled and failed events go through again" in listener.output()
    assert "Traceback" not in listener.output() and "died" not in listener.output()


def test_a_drain_gives_up_a_settlement_a_lock_holds_after_its_patience(items, tmp_path, listeners) -> None:
    insert(items, 1, 3)
    with uncommitted(items, FIRST_EVENT):
        listener = Listener(items, tmp_path, "--drain", "--drain-patience", "5", "--poll", "0.5")
        listeners.append(listener)
        assert listener.finish(60) == 1
        given_up = r"giving up the drain: settling events waited \d+s for another transaction's lock"
        assert re.search(given_up, listener.output())
        assert "Error: the drain was given up: " in listener.output()
        assert handled(listener.lines())
        assert remaining(items) == 3  # handled, not acknowledged: delivered again by the next run
    assert "Traceback" not in listener.output()


def test_a_command_gives_up_rows_another_transaction_keeps_with_one_line_and_no_change(items) -> None:
    """`subs retry --all` hung for as long as an isql session held one dead
    event; now it waits LOCK_WAIT, then says what holds it up."""
    insert(items, 1, 2)
    execute(items, "UPDATE EVENT_LOG SET DEAD = TRUE, DEAD_AT = LOCALTIMESTAMP, LAST_ERROR = 'broke'")
    with uncommitted(items, FIRST_EVENT):
        started = time.monotonic()
        result = Subs(items)("retry", "--all")
        assert time.monotonic() - started >= LOCK_WAIT - 1  # Firebird 3 ends it on a whole second
        assert_one_line_error(result, f"another transaction has held rows this needs for over {LOCK_WAIT} s")
    assert query(items, "SELECT COUNT(*) FROM EVENT_LOG WHERE DEAD") == [(2,)]
    assert "re-queued 2 dead event(s)" in Subs(items).ok("retry", "--all")


def test_a_lockout_is_reported_when_due_then_as_it_doubles_and_once_ended(monkeypatch) -> None:
    now = [100.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    lockouts = Lockouts(after=10.0)
    lockouts.observe([1, 2], locked={1, 2})
    now[0] = 105.0
    lockouts.observe([1, 2], locked={1})  # 2 was free for a moment: its count starts again
    assert lockouts.overdue() == {}
    now[0] = 110.0
    lockouts.observe([1, 2], locked={1, 2})
    assert lockouts.overdue() == {1: 10.0}
    assert lockouts.overdue() == {}
    now[0] = 120.0
    assert lockouts.overdue() == {1: 20.0, 2: 10.0}
    now[0] = 125.0
    lockouts.observe([2], locked=())  # 1 was not tried: still locked out
    assert lockouts.ended() == [2]
    assert lockouts.ended() == []
    assert lockouts.overdue() == {}
    now[0] = 140.0
    assert lockouts.overdue() == {1: 40.0}
    lockouts.observe([1], locked=())
    assert lockouts.ended() == [1]
    lockouts.observe([3], locked={3})
    lockouts.observe([3], locked=())
    assert lockouts.ended() == []  # never reported
