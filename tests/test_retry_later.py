"""A handler's RetryLater sets the least delay before the next attempt: a
listener honours it over its shorter backoff, on every engine and in both
modes (the webhook raises it for a throttled answer: test_webhook.py)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from subscriptions import RetryLater
from subscriptions.errors import MAX_RETRY_AFTER

from conftest import ITEMS_TABLE, Subs, execute, query, wait_until
from httppeer import HttpPeer
from listening import Listener, insert


@pytest.mark.parametrize("seconds", [-1, math.nan, math.inf, MAX_RETRY_AFTER + 1])
def test_retry_later_refuses_a_delay_it_cannot_keep(seconds: float) -> None:
    with pytest.raises(ValueError, match="RetryLater needs 0 to"):
        RetryLater("busy", seconds)


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
