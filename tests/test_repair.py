"""subs retry and subs purge against real engines: which dead events they
touch, and that they find them on the claim index; and how subs dead and
subs failed list them."""

from __future__ import annotations

import json

import pytest

from subscriptions.db import sql
from subscriptions.db.connection import Database

from conftest import Subs, execute, query

DEAD = "SELECT l.EVENT_ID FROM EVENT_LOG l JOIN EVENT_SUBSCRIBER s ON s.SUB_ID = l.SUB_ID WHERE l.DEAD AND s.TAG = ?"


def kill_all(settings, age_minutes: int = 0) -> None:
    """Every event dead, as the listener leaves one after --max-attempts."""
    execute(
        settings,
        f"UPDATE EVENT_LOG SET DEAD = TRUE, DEAD_AT = DATEADD(-{age_minutes} MINUTE TO LOCALTIMESTAMP), "
        "ATTEMPTS = 5, LAST_ERROR = 'gave up'",
    )


def test_retry_by_tag_and_all_and_purge_by_age(items):
    subs = Subs(items)
    subs.ok("add", "items", "IU", "mail")
    execute(items, *(f"INSERT INTO ITEMS VALUES ({key}, 'x')" for key in range(1, 4)), "UPDATE ITEMS SET NOTE = 'y'")
    kill_all(items)
    # Tag rec (the fixture's, IUD) and tag mail (IU): 6 events each.
    assert "re-queued 6 dead event(s)" in subs.ok("retry", "--tag", "mail")
    assert query(items, DEAD, ("mail",)) == []
    assert len(query(items, DEAD, ("rec",))) == 6
    assert query(items, "SELECT COUNT(*) FROM EVENT_LOG WHERE ATTEMPTS = 0 AND LAST_ERROR IS NULL") == [(6,)]
    misspelt = subs("retry", "--tag", "nobody")
    assert (misspelt.exit_code, misspelt.stderr) == (
        1,
        "Error: no subscription has tag 'nobody'; `subs list` shows the subscriptions\n",
    )
    assert "re-queued 6 dead event(s)" in subs.ok("retry", "--all")
    assert query(items, "SELECT COUNT(*) FROM EVENT_LOG WHERE DEAD OR DEAD_AT IS NOT NULL") == [(0,)]

    kill_all(items, age_minutes=90)
    execute(items, "UPDATE EVENT_LOG SET DEAD_AT = LOCALTIMESTAMP WHERE MOD(EVENT_ID, 3) = 0")
    assert "deleted 8 dead event(s)" in subs.ok("purge", "--older-than", "1h")
    assert query(items, "SELECT COUNT(*) FROM EVENT_LOG") == [(4,)]
    assert "deleted 4 dead event(s)" in subs.ok("purge", "--older-than", "0s")
    assert query(items, "SELECT COUNT(*) FROM EVENT_LOG") == [(0,)]


@pytest.mark.parametrize("block", ["retry_dead", "purge_dead"])
def test_retries_and_purges_walk_the_claim_index(items, block: str) -> None:
    """A log of a million events is not read whole to find its dead ones."""
    with Database(items) as db, db.transaction() as cursor:
        statement = cursor.prepare(sql.load("repair")[block])
        try:
            plan = statement.plan
        finally:
            statement.free()
    assert "EVENT_LOG INDEX (IX_EVENT_LOG_QUEUE)" in plan and "EVENT_LOG NATURAL" not in plan, plan


@pytest.mark.parametrize("kind", ["dead", "failed"])
def test_dead_and_failed_list_the_oldest_up_to_their_limit(items, kind: str) -> None:
    """Before, both listed every such event at once: a day of a broken
    handler can leave millions."""
    execute(items, *(f"INSERT INTO ITEMS VALUES ({key}, 'x')" for key in range(1, 6)))
    if kind == "dead":
        kill_all(items)
    else:
        execute(items, "UPDATE EVENT_LOG SET ATTEMPTS = 1, LAST_ERROR = 'try again', NEXT_ATTEMPT_AT = LOCALTIMESTAMP")
    ids = [row[0] for row in query(items, "SELECT EVENT_ID FROM EVENT_LOG ORDER BY EVENT_ID")]
    subs = Subs(items)
    limited = subs(kind, "--json", "--limit", "3")
    assert limited.exit_code == 0, limited.output
    assert [row["id"] for row in json.loads(limited.stdout)] == ids[:3]
    assert limited.stderr == f"note: more {kind} events than these 3, the oldest; `--limit 0` lists all\n"
    assert [row["id"] for row in json.loads(subs.ok(kind, "--json", "--limit", "0"))] == ids
    exact = subs(kind, "--limit", "5")
    assert exact.stderr == "" and len(exact.stdout.splitlines()) == 1 + 5
    assert len(subs.ok(kind).splitlines()) == 1 + 5  # the default limit, 100
