"""`subs pause` and `subs resume`: a paused subscription's changes are still
captured, no listener claims them, and they are delivered in order once it
is resumed."""

from __future__ import annotations

import json
import time

import pytest

from conftest import Subs, assert_one_line_error, query, state, wait_until
from listening import Listener, handled, insert, remaining


def test_pause_and_resume_say_what_they_did_and_show_in_list_and_status(items, subs: Subs) -> None:
    assert subs.ok("pause", "items", "IU", "rec").splitlines() == [
        "paused: ITEMS I rec (subscription 1); its changes are still captured and wait for `subs resume`",
        "paused: ITEMS U rec (subscription 2); its changes are still captured and wait for `subs resume`",
    ]
    assert "already paused: ITEMS I rec" in subs.ok("pause", "items", "I", "rec")
    listed = {row["action"]: row["paused"] for row in json.loads(subs.ok("list", "--json"))}
    assert listed == {"I": True, "U": True, "D": False}
    assert "paused" in subs.ok("list")
    statuses = {row["action"]: row["paused"] for row in json.loads(subs.ok("status", "--json"))}
    assert statuses == {"I": True, "U": True, "D": False}
    assert "rec (paused)" in subs.ok("status")
    insert(items, 1, 3)
    assert query(items, "SELECT COUNT(*) FROM EVENT_LOG") == [(3,)]  # still captured
    assert subs.ok("resume", "items", "I", "rec").startswith("resumed: ITEMS I rec (subscription 1)")
    assert "already running: ITEMS D rec" in subs.ok("resume", "items", "D", "rec")


@pytest.mark.parametrize(
    ("arguments", "fragments"),
    [
        (("nosuch", "I", "rec"), ("nosuch I rec is not subscribed",)),
        (("items", "I", "other"), ("ITEMS I other is not subscribed", "subs list")),
        (("items", "X", "rec"), ("ACTIONS must be one or more",)),
        (("items", "I", "bad tag!"), ("tag",)),
    ],
)
@pytest.mark.parametrize("command", ["pause", "resume"])
def test_bad_input_is_one_line_and_changes_nothing(items, subs: Subs, command, arguments, fragments) -> None:
    before = state(items)
    assert_one_line_error(subs(command, *arguments), *fragments)
    assert state(items) == before


@pytest.mark.parametrize("mode", ["ordered", "parallel"])
def test_a_running_listener_stops_at_its_next_claim_and_goes_on_in_order(items, tmp_path, listeners, mode) -> None:
    subs = Subs(items)
    subs.ok("remove", "items", "UD", "rec", "--purge")
    listener = Listener(items, tmp_path, "--mode", mode, "--workers", "1", "--batch", "1", "--poll", "0.2")
    listeners.append(listener)
    insert(items, 1, 1, "sleep1")
    wait_until(lambda: any(line["phase"] == "start" for line in listener.lines()), what="the first handler")
    subs.ok("pause", "items", "I", "rec")
    insert(items, 2, 5)
    wait_until(lambda: handled(listener.lines()) == [1], what="the event in flight to finish")
    time.sleep(1.0)  # five polls: nothing paused is claimed
    assert handled(listener.lines()) == [1] and remaining(items) == 5, listener.output()
    subs.ok("resume", "items", "I", "rec")
    wait_until(lambda: remaining(items) == 0, what="the paused events")
    keys = [line["key"] for line in listener.lines() if line["phase"] == "done"]
    assert keys == [1, 2, 3, 4, 5, 6]


def test_resume_and_retry_wake_a_listener_that_polls_rarely(items, tmp_path, listeners) -> None:
    """--poll 60: what `subs resume` and `subs retry` make claimable is claimed
    at once, because they post the tag's Firebird event."""
    subs = Subs(items)
    subs.ok("remove", "items", "UD", "rec", "--purge")
    listener = Listener(items, tmp_path, "--workers", "1", "--max-attempts", "1", "--poll", "60")
    listeners.append(listener)
    subs.ok("pause", "items", "I", "rec")
    insert(items, 1, 2)
    time.sleep(1.0)
    assert handled(listener.lines()) == []
    subs.ok("resume", "items", "I", "rec")
    wait_until(lambda: remaining(items) == 0, timeout=10, what="the resumed events, well before the next poll")
    flag = tmp_path / "record.jsonl.fail"
    flag.touch()
    insert(items, 3, 1, "fail_flagged")
    wait_until(lambda: query(items, "SELECT COUNT(*) FROM EVENT_LOG WHERE DEAD") == [(1,)], what="the event to die")
    flag.unlink()
    subs.ok("retry", "--all")
    wait_until(lambda: remaining(items) == 0, timeout=10, what="the retried event, well before the next poll")
