"""What a handler can say besides "this attempt failed", honoured by a
listener on every engine: RetryLater sets the least delay before the next
attempt, over the listener's shorter backoff, in both modes (the webhook
raises it for a throttled answer: test_webhook.py); Undeliverable makes the
event dead at once, unless --on-failure block says nothing goes dead."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from subscriptions import RetryLater
from subscriptions.db.settings import ConnectionSettings
from subscriptions.delivery.options import ListenOptions
from subscriptions.errors import MAX_RETRY_AFTER

from conftest import ITEMS_TABLE, Subs, execute, query, wait_until
from httppeer import HttpPeer
from listening import Listener, insert


@pytest.mark.parametrize("seconds", [-1, math.nan, math.inf, MAX_RETRY_AFTER + 1])
def test_retry_later_refuses_a_delay_it_cannot_keep(seconds: float) -> None:
    with pytest.raises(ValueError, match="RetryLater needs 0 to"):
        RetryLater("busy", seconds)


@pytest.mark.parametrize(
    ("backoff_min", "backoff_max", "bounds"),
    [
        (1.0, 300.0, [(1, 1), (1, 2), (2, 4), (4, 8), (8, 16), (16, 32), (32, 64), (64, 128), (128, 256), (150, 300)]),
        (5.0, 8.0, [(5, 5), (5, 8), (5, 8), (5, 8)]),
        (0.0, 300.0, [(0, 0), (0, 0)]),
    ],
)
def test_retry_delays_keep_within_backoff_min_and_max(
    backoff_min: float, backoff_max: float, bounds: list[tuple[float, float]]
) -> None:
    """--backoff-min is a floor even for the jittered delays, --backoff-max a
    ceiling, and the delays double in between."""
    options = ListenOptions(ConnectionSettings(), backoff_min=backoff_min, backoff_max=backoff_max)
    for attempt, (low, high) in enumerate(bounds, start=1):
        delays = [options.retry_delay(attempt) for _ in range(200)]
        assert low <= min(delays) and max(delays) <= high, (attempt, min(delays), max(delays))
        if high > low:
            assert max(delays) - min(delays) > (high - low) / 2, "no jitter"


@pytest.mark.parametrize("mode", ["ordered", "parallel"])
def test_a_listener_waits_the_retry_after_its_handler_asked_for(
    settings, tmp_path: Path, http_peer: HttpPeer, mode: str, listeners: list[Listener], monkeypatch
) -> None:
    """Three events, each answered 429 with Retry-After 2 at first: each
    comes again as attempt 2, no sooner than 2 s later (the listener's
    backoff alone would wait 0.2 s at most), and then it is handled."""
    execute(settings, ITEMS_TABLE)
    Subs(settings).ok("add", "items", "I", "webhook")
    config = tmp_path / "subs.toml"
    config.write_text(f'[handlers.webhook]\nurl = "{http_peer.base}/throttle-once?status=429&after=2"\n')
    monkeypatch.setenv("SUBS_CONFIG", str(config))
    listener = Listener(settings, tmp_path, "--mode", mode)
    listeners.append(listener)
    insert(settings, 1, 3)
    wait_until(lambda: query(settings, "SELECT COUNT(*) FROM EVENT_LOG") == [(0,)], what="every event handled")
    by_event: dict[str, list[tuple[str, float]]] = {}
    for request in http_peer.requests:
        by_event.setdefault(request.headers["X-Subs-Event-Id"], []).append(
            (request.headers["X-Subs-Attempt"], request.at)
        )
    assert len(by_event) == 3, by_event
    for (first, failed_at), (second, retried_at) in by_event.values():
        assert (first, second) == ("1", "2")
        assert retried_at - failed_at >= 1.9  # a claimer may claim 0.05 s early (RETRY_MARGIN)
    assert "Retry-After 2 s; retrying in 2.0s" in listener.output()


VERDICT = """
from subscriptions import Undeliverable, hookimpl


@hookimpl
def register_handlers(register):
    register("verdict", judge)


def judge(event):
    if event.new["NOTE"] == "bad":
        raise Undeliverable("the receiver will never take this row")
"""


@pytest.mark.parametrize("on_failure", ["dead", "block"])
def test_an_undeliverable_event_is_dead_at_once(
    settings, tmp_path: Path, listeners: list[Listener], on_failure: str
) -> None:
    """Of three events, the one its handler calls undeliverable is dead
    after its first attempt (of 5 allowed), with the handler's reason; the
    others are delivered. With --on-failure block it is retried instead, and
    the event after it waits its turn."""
    execute(settings, ITEMS_TABLE)
    Subs(settings).ok("add", "items", "I", "verdict")
    plugin = tmp_path / "verdict.py"
    plugin.write_text(VERDICT)
    listener = Listener(settings, tmp_path, "--plugin", str(plugin), "--max-attempts", "5", "--on-failure", on_failure)
    listeners.append(listener)
    insert(settings, 1, 1, "fine")
    insert(settings, 2, 1, "bad")
    insert(settings, 3, 1, "fine")
    left = "SELECT EVENT_ID, ATTEMPTS, DEAD, LAST_ERROR FROM EVENT_LOG"
    if on_failure == "dead":
        wait_until(lambda: len(query(settings, left)) == 1 and query(settings, left)[0][2], what="a dead event alone")
        [(_, attempts, _, error)] = query(settings, left)
        assert attempts == 1
        assert error == "Undeliverable: the receiver will never take this row"
        assert "is dead after 1 attempt(s): Undeliverable: " in listener.output()
    else:  # the event is retried, and in ordered mode the one after it waits
        retried = "SELECT ATTEMPTS, DEAD FROM EVENT_LOG WHERE EVENT_ID = 2"
        wait_until(lambda: query(settings, retried)[0][0] >= 3, what="retries")
        assert not query(settings, retried)[0][1]
        assert [row[:3] for row in query(settings, left + " ORDER BY EVENT_ID")][-1] == (3, 0, False)
